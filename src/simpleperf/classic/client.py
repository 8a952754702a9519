"""The client: open the connections, send, report.

One thread per connection moves bytes; the main thread prints interval rows, waits, and
handles Ctrl-C. Each connection's interval runs from its first write until the server's
acknowledgement arrives.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..description.client_options import ClientOptions
from ..description.options import stall_limit
from ..engine.clock import IntervalClock
from ..errors import Interrupted, SimpleperfError
from ..protocol import iperf3
from ..protocol.classic import FINISH, is_acknowledgement
from ..report import classic as table
from ..transport import buffers, compiled, tcp, tcpinfo

# A classic test's first payload: zeros, as long as an iperf3 cookie (see _probe).
PROBE = bytes(iperf3.COOKIE_SIZE)
# How long an answer to it is awaited: an iperf3 server answers within a round trip.
PROBE_WAIT_MIN = 0.005
REFUSED_AT_ONCE_SECONDS = 1.0  # a connection closed this soon was refused, not lost
PROBE_WAIT_RTTS = 2


@dataclass
class SendingStream:
    """One TCP connection of a test and what it has measured so far."""

    sock: socket.socket
    local: str
    sent: int = 0
    started: float | None = None  # monotonic time of the first write
    sending_ended: float | None = None  # monotonic time the last payload byte was written
    delivered: float | None = None  # monotonic time the server's TCP had every byte
    finished: float | None = None  # monotonic time the acknowledgement arrived
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def elapsed(self, now: float) -> float:
        """Until the acknowledgement; without one, until the data ended (a wait for an
        answer that never came is no part of the transfer)."""
        if self.started is None:
            return 0.0
        return (self.finished or self.delivered or self.sending_ended or now) - self.started



def run(options: ClientOptions, out: Callable[[str], None],
        first: tuple[socket.socket, int] | None = None) -> None:
    """`first`: a connection already open to a classic server and the bytes already sent
    on it (the native client's greeting, which a classic server counts as payload)."""
    probed_at = None
    if first is None:
        sock = tcp.connect_to_server(options, stream=1)
        try:
            iperf3_answered, probed_at = _probe(sock, options)
        except BaseException:
            sock.close()
            raise
        if iperf3_answered:
            from ..iperf3 import client as iperf3_client

            iperf3_client.run(options, out, control=(sock, PROBE))
            return
        first = (sock, len(PROBE) if probed_at is not None else 0)
    left_out = options.report_exclude  # -x: iperf2's kinds of report
    if "S" not in left_out:
        out(table.client_banner(options.host, options.port))
    streams = _connect_all(options, first, probed_at)
    try:
        for stream in streams:
            if "C" not in left_out:
                out(table.client_connected(options.host, options.port,
                                           stream.local if options.test.parallel > 1 else None))
        _measure(streams, options, (lambda _: None) if "D" in left_out else out, probed_at)
    finally:
        for stream in streams:
            stream.sock.close()


def _probe(sock: socket.socket, options: ClientOptions) -> tuple[bool, float | None]:
    """Is the server iperf3's? The first payload goes out as PROBE, as long as an iperf3
    cookie: an iperf3 server answers it with a state byte within a round trip, a classic
    one says nothing and counts it as payload. (Whether the server answered, when the
    probe was written: None when the test is too small to hold it.)"""
    if options.test.num_bytes is not None and options.test.num_bytes < len(PROBE):
        return False, None
    rtt = tcpinfo.rtt_seconds(sock)
    sock.sendall(PROBE)
    written = time.monotonic()
    readable, _, _ = select.select([sock], [], [], PROBE_WAIT_MIN + PROBE_WAIT_RTTS * rtt)
    if not readable:
        return False, written
    try:
        first = sock.recv(1, socket.MSG_PEEK)
    except OSError:
        return False, written  # reset: the sending will say so
    return bool(first) and first[0] in iperf3.FIRST_ANSWERS, written


def _connect_all(options: ClientOptions, first: tuple[socket.socket, int] | None,
                 probed_at: float | None = None) -> list[SendingStream]:
    streams: list[SendingStream] = []
    if first is not None:
        sock, already_sent = first
        streams.append(SendingStream(sock, tcp.endpoint(sock.getsockname()), already_sent,
                                     started=probed_at))
    try:
        for _ in range(options.test.parallel - len(streams)):
            sock = tcp.connect_to_server(options, stream=len(streams) + 1)
            streams.append(SendingStream(sock, tcp.endpoint(sock.getsockname())))
    except BaseException:
        for stream in streams:
            stream.sock.close()
        raise
    return streams


def _measure(streams: list[SendingStream], options: ClientOptions,
             out: Callable[[str], None], probed_at: float | None = None) -> None:
    stop = threading.Event()
    deadline_offset = None if options.test.num_bytes is not None else options.seconds
    start = probed_at if probed_at is not None else time.monotonic()  # the first write
    workers = [threading.Thread(target=_send, args=(stream, options, start, stop),
                                name=f"send {stream.local}", daemon=True)
               for stream in streams]
    for worker in workers:
        worker.start()
    out(table.header("Transfer"))
    rule_printed = False
    try:
        if options.interval:
            _print_intervals(streams, options, start, deadline_offset, out)
            out(table.INTERVAL_RULE)
            rule_printed = True
        for stream in streams:
            while not stream.done.wait(0.2):
                pass
    except KeyboardInterrupt:
        stop.set()
        for stream in streams:
            _abort(stream.sock)
        for worker in workers:
            worker.join(2)
        if options.interval and not rule_printed:
            out(table.INTERVAL_RULE)
        _print_totals(streams, options, out)
        raise Interrupted() from None
    _print_totals(streams, options, out)
    failures = [stream.error for stream in streams if stream.error]
    if failures:
        raise SimpleperfError(failures[0])


def _send(stream: SendingStream, options: ClientOptions, start: float,
          stop: threading.Event) -> None:
    sock = stream.sock
    try:
        tcp.set_wake_up(sock)
        payload = buffers.aligned(options.test.length)
        if stream.started is None:  # the probe may have been its first write
            stream.started = time.monotonic()
        limit = stall_limit(options.seconds if options.test.num_bytes is None else None)
        if options.test.num_bytes is None:
            _send_for(sock, payload, start + options.seconds, stream, stop,
                      whole_segments="length" not in options.given)
        else:
            _send_amount(sock, payload, options.test.num_bytes, stream, stop, limit)
        stream.sending_ended = time.monotonic()
        if stop.is_set():
            return
        tcp.wait_until_drained(sock, stop.is_set, limit)
        if stop.is_set():
            return
        stream.delivered = time.monotonic()
        # The peer acknowledged our last byte on its arrival; by the time BYE arrives its
        # application has had a round trip and SETTLE_MIN_SECONDS more to read what it held
        # (the least it needs is not a matter of round trips): BYE arrives alone at servers
        # that compare a read with it, and the interval carries no idle round trips.
        time.sleep(tcp.SETTLE_MIN_SECONDS)
        _send_all(sock, FINISH, stop)
        acknowledged = _await_acknowledgement(sock, stop, limit)
        if not stop.is_set():  # a stop while awaiting the acknowledgement is no finished one
            # A server that closed without acknowledging (an iperf2 server, some classic
            # ones) had the data when its TCP had acknowledged it all.
            stream.finished = time.monotonic() if acknowledged else stream.delivered
    except SimpleperfError as error:
        stream.error = str(error)
    except OSError as error:
        if not stop.is_set():
            stream.error = f"connection {stream.local} to the server failed: " + (
                error.strerror or str(error)).lower()
            if error.errno in (errno.EPIPE, errno.ECONNRESET) and \
                    time.monotonic() - start < REFUSED_AT_ONCE_SECONDS:
                stream.error += (" at once (a simpleperf server closes a classic client it "
                                 "will not serve: it is busy, see its --max-clients, or it "
                                 "has a shared secret: --native --auth-secret-file FILE)")
    finally:
        if stream.sending_ended is None:
            stream.sending_ended = time.monotonic()
        stream.done.set()


def _send_for(sock: socket.socket, payload: memoryview, deadline: float,
              stream: SendingStream, stop: threading.Event, whole_segments: bool) -> None:
    """Writes of the whole payload, or of as many whole segments as it holds (the compiled
    loop looks the segment size up again every slice, as the connection grows it)."""
    fastpath = compiled.module()
    if fastpath is not None:  # the write loop in C: no GIL handover per write with -P
        fd, tcp_send = sock.fileno(), fastpath.tcp_send
        while not stop.is_set() and time.monotonic() < deadline:
            length = tcp.write_length(sock, len(payload), whole_segments)
            sent, error = tcp_send(fd, payload, length, -1, deadline,
                                   compiled.SLICE_SECONDS, -1)
            stream.sent += sent
            if error:
                raise OSError(error, os.strerror(error))
        return
    send = sock.send
    clock = time.monotonic
    sent = stream.sent
    payload = payload[:tcp.write_length(sock, len(payload), whole_segments)]
    while not stop.is_set():
        try:  # noqa: SIM105 - hot loop: a context manager per write costs throughput
            sent += send(payload)
        except BlockingIOError:  # the wake-up timer: nothing could be written for a while
            pass
        stream.sent = sent
        if clock() >= deadline:
            return


def _send_amount(sock: socket.socket, payload: memoryview, amount: int,
                 stream: SendingStream, stop: threading.Event, limit: float) -> None:
    send = sock.send
    size = len(payload)
    sent = stream.sent
    moved = time.monotonic()
    while sent < amount and not stop.is_set():
        try:
            sent += send(payload if amount - sent >= size else payload[: amount - sent])
        except BlockingIOError:  # the wake-up timer: nothing could be written for a while
            if time.monotonic() - moved > limit:
                raise SimpleperfError(f"the server stopped reading (nothing could be sent "
                                      f"for {limit:g} s)") from None
            continue
        moved = time.monotonic()
        stream.sent = sent


def _send_all(sock: socket.socket, data: bytes, stop: threading.Event) -> None:
    view = memoryview(data)
    while view and not stop.is_set():
        with contextlib.suppress(BlockingIOError):
            view = view[sock.send(view):]


def _await_acknowledgement(sock: socket.socket, stop: threading.Event, limit: float) -> bool:
    """Any reply starting with ACK ends the test (True); so does the server closing the
    connection (False): some classic servers close without answering, and an iperf2 server
    reads until the stream ends, which this side says by closing its sending half once no
    acknowledgement has come for a few round trips (answer_grace)."""
    reply = b""
    waited_since = time.monotonic()
    grace = answer_grace(sock)
    half_closed = False
    while not stop.is_set():
        waited = time.monotonic() - waited_since
        if not half_closed and waited >= grace:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)
            half_closed = True
        if waited > limit:
            raise SimpleperfError(f"the server neither acknowledged the end of the test nor "
                                  f"closed the connection within {limit:g} s")
        readable, _, _ = select.select([sock], [], [],
                                       min(tcp.SETTLE_MAX_SECONDS,
                                           max(0.001, (grace if not half_closed else limit)
                                               - waited)))
        if not readable:
            continue
        try:
            chunk = sock.recv(64)
        except BlockingIOError:
            continue
        if not chunk:
            return False
        reply += chunk
        if reply[0] in iperf3.FIRST_ANSWERS:
            raise SimpleperfError("the server answered as an iperf3 server does, later than "
                                  "this client waited for it: run again with --iperf3")
        if is_acknowledgement(reply) or len(reply) >= 3:
            if not is_acknowledgement(reply):
                raise SimpleperfError(f"unexpected reply from the server: {reply[:40]!r}")
            return True
    return False


ANSWER_GRACE_MIN = 0.1  # seconds a classic server has to acknowledge BYE before the half-close
ANSWER_GRACE_RTTS = 4


def answer_grace(sock: socket.socket) -> float:
    """How long to wait for an acknowledgement of BYE before closing the sending half: a
    classic server answers within a round trip of reading it."""
    return max(ANSWER_GRACE_MIN, ANSWER_GRACE_RTTS * tcpinfo.rtt_seconds(sock))


def _abort(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _print_intervals(streams: list[SendingStream], options: ClientOptions, start: float,
                     end: float | None, out: Callable[[str], None]) -> None:
    """Print a row per stream for every closed interval, while the test runs."""
    step = options.interval
    assert step  # the classic exchange prints rows only when -i asks for them
    clock = IntervalClock(step, end=end)
    printed_until = 0.0
    reported = [0] * len(streams)
    while True:
        all_sent = all(s.done.is_set() or s.sending_ended is not None for s in streams)
        now = time.monotonic() - start
        if all_sent:
            finished_at = max(s.sending_ended or start for s in streams) - start
            now = max(now, finished_at)
        marks = [m for m in clock.closed_by(now) if m > printed_until]
        if end is not None and marks and marks[-1] == end and not all_sent:
            marks.pop()  # the final row waits until every stream has stopped sending
        for mark in marks:
            counts = [s.sent for s in streams]
            for index, stream in enumerate(streams):
                out(table.row(stream.local, printed_until, mark, counts[index] - reported[index],
                              options.unit))
            reported = counts
            printed_until = mark
        if all_sent:
            if end is None and finished_at > printed_until + 1e-3:
                for index, stream in enumerate(streams):
                    out(table.row(stream.local, printed_until, finished_at,
                                  stream.sent - reported[index], options.unit))
            return
        next_mark = (int(printed_until / step + 1e-9) + 1) * step
        if end is not None:
            next_mark = min(next_mark, end)
        time.sleep(max(0.001, min(0.05, start + next_mark - time.monotonic())))


def _print_totals(streams: list[SendingStream], options: ClientOptions,
                  out: Callable[[str], None]) -> None:
    now = time.monotonic()
    for stream in streams:
        note = "" if stream.finished else "incomplete"
        out(table.row(stream.local, 0.0, stream.elapsed(now), stream.sent, options.unit,
                      note))
