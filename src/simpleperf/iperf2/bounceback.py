"""iperf2's bounceback test (--bounceback), both ends: the client writes a message of one
size (its header: iperf 2.1.8's bounceback_hdr, protocol/iperf2.py) and waits for it to
come back, stamped with the server's read and write times; each round trip is one RTT
sample, the messages back to back or one every --bounceback-period.

The server's end (Echo) runs as a stream body of our iperf2 service; the client's (run)
against any server that bounces (iperf -s 2.1, simpleperf -s)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable
from types import ModuleType

from ..description.client_options import ClientOptions
from ..description.testspec import TestSpec
from ..engine.records import Stream
from ..errors import Interrupted, ProtocolError, SimpleperfError
from ..protocol import iperf2
from ..report import native as table
from ..stats import summarise_rtt
from ..transport import compiled, tcp
from . import working_load

REPLY_SECONDS = 5.0  # a message not back within this long ends the client's test
BOUNCEBACK = iperf2.BOUNCEBACK.to_bytes(4, "big")  # a message's first word
# The compiled loops' statuses (_fastpath.c)
BOUNCE_BUDGET, BOUNCE_ENDED, BOUNCE_STOPPED, BOUNCE_PARTIAL, BOUNCE_QUIET, BOUNCE_FAILED, \
    BOUNCE_WRONG = range(7)
RESULTS_PER_CALL = 4096  # round trips a compiled call records at most


def quick_ack(sock: socket.socket) -> None:
    """TCP_QUICKACK, which the kernel clears on its own: set before every read, as
    iperf 2.1.8's bounceback does at both ends unless --bounceback-no-quickack."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)


def read_message(sock: socket.socket, size: int, prefix: bytes, stop: threading.Event,
                 idle: float) -> bytearray | None:
    """The next `size`-byte message (what `prefix` holds of it already); None at the
    peer's end of stream between messages. The socket wakes up now and then (its timer),
    so `stop` and `idle` seconds of silence end the wait."""
    message = bytearray(size)
    message[:len(prefix)] = prefix
    if len(prefix) < size and not _read_into(sock, memoryview(message)[len(prefix):],
                                             size - len(prefix), stop, idle):
        if prefix:
            raise ProtocolError("the peer closed inside a bounceback message")
        return None
    return message


class Echo:
    """The server's end: each message back as it came, with our read and write times,
    after the hold it asks for; until the client's end of stream or its last message."""

    def __init__(self, first: bytearray, read_at: float, idle: float) -> None:
        self.first, self.read_at, self.idle = first, read_at, idle
        self.bounce = iperf2.parse_bounce(first)
        self.quickack = bool(self.bounce.flags & iperf2.BB_QUICKACK)

    def run(self, stream: Stream, spec: TestSpec, start: float, stop: threading.Event
            ) -> None:
        sock, size, hold = stream.sock, self.bounce.size, self.bounce.hold / 1e6
        message, read_at = self.first, self.read_at  # one buffer, read into again
        view, clock, wall = memoryview(message), time.monotonic, time.time
        stream.first = stream.last = clock()
        stream.num_bytes = size
        fastpath = None if hold else compiled.module()  # a hold sleeps: Python's loop
        try:
            while not stop.is_set() and not iperf2.bounce_stops(message):
                if hold:
                    time.sleep(hold)
                iperf2.stamp_bounce(message, read_at, wall())
                sock.sendall(message)
                if fastpath is not None:
                    read = self._compiled(fastpath, stream, view, stop)
                elif self._read(sock, view, stop):
                    read = wall()
                    stream.num_bytes += size
                    stream.last = clock()
                else:
                    read = None
                if read is None:
                    break
                read_at = read
            if iperf2.bounce_stops(message):  # the client's last: read, never bounced
                stream.num_bytes -= size
        except ProtocolError as error:
            stream.error = str(error)
        except OSError as error:
            if not stop.is_set():
                stream.error = (error.strerror or str(error)).lower()
        finally:
            stream.done.set()

    def _read(self, sock: socket.socket, view: memoryview, stop: threading.Event) -> bool:
        """The next message in Python's loop (False at the client's end of stream)."""
        if self.quickack:
            quick_ack(sock)
        return _read_into(sock, view, self.bounce.size, stop, self.idle)

    def _compiled(self, fastpath: ModuleType, stream: Stream, view: memoryview,
                  stop: threading.Event) -> float | None:
        """Messages echoed in the compiled loop until one Python must see: the read time
        of the next message Python is to stamp and send (the stop message's, which the
        loop's condition then ends on), or None at the client's end of stream."""
        size, quiet_since = self.bounce.size, None
        while True:
            count, got, read_at, status, error = fastpath.bounce_echo(
                stream.sock.fileno(), view, size, iperf2.BB_STOP_BYTE, iperf2.BB_STOP_MASK,
                iperf2.BB_SERVER_TIMES, compiled.SLICE_SECONDS * 20, self.quickack)
            if count:
                stream.num_bytes += count * size
                stream.last = time.monotonic()
                quiet_since = None
            if status == BOUNCE_STOPPED:
                return read_at
            if status == BOUNCE_ENDED:
                return None
            if status == BOUNCE_FAILED:
                raise OSError(error, os.strerror(error))
            if status == BOUNCE_PARTIAL:  # the rest as Python reads it
                if not _read_into(stream.sock, view[got:], size - got, stop, self.idle):
                    raise ProtocolError("the peer closed inside a bounceback message")
                stream.num_bytes += size
                stream.last = time.monotonic()
                return time.time()
            if status == BOUNCE_QUIET:
                quiet_since = quiet_since or time.monotonic()
                if stop.is_set() or time.monotonic() - quiet_since > self.idle:
                    raise ProtocolError(f"no bounceback message for {self.idle:g} s")
            elif stop.is_set():
                return None


def _read_into(sock: socket.socket, view: memoryview, size: int, stop: threading.Event,
               idle: float) -> bool:
    """The next message into `view` (False at the peer's end of stream between messages);
    the quick path is one recv_into that brings it whole."""
    got = 0
    quiet_since = None
    while got < size:
        try:
            count = sock.recv_into(view[got:] if got else view, size - got)
        except BlockingIOError:  # the socket's wake-up timer
            quiet_since = quiet_since or time.monotonic()
            if stop.is_set() or time.monotonic() - quiet_since > idle:
                raise ProtocolError(f"no bounceback message for {idle:g} s") from None
            continue
        if not count:
            if got:
                raise ProtocolError("the peer closed inside a bounceback message")
            return False
        got += count
        quiet_since = None
    return True


def first_message(conn: socket.socket, prefix: bytes, stop: threading.Event,
                  idle: float) -> tuple[bytearray, float]:
    """A bounceback test's first message, whole (its size from its header), and when it
    was read; a ProtocolError for one that states what cannot be or is cut short."""
    head = read_message(conn, iperf2.BOUNCE.size, prefix[:iperf2.BOUNCE.size], stop, idle)
    if head is None:
        raise ProtocolError("the client closed before its bounceback message")
    size = iperf2.parse_bounce(head).size
    message = read_message(conn, size, bytes(head) + prefix[iperf2.BOUNCE.size:size], stop,
                           idle)
    if message is None:
        raise ProtocolError("the client closed inside its bounceback message")
    return message, time.time()


# The client's end ----------------------------------------------------------------------


def run(options: ClientOptions, out: Callable[[str], None]) -> None:
    size = options.test.length if "length" in options.given else iperf2.DEFAULT_BOUNCE_SIZE
    if not iperf2.BOUNCE_MIN <= size <= iperf2.BOUNCE_MAX:
        raise SimpleperfError(f"--bounceback messages are {iperf2.BOUNCE_MIN} to "
                              f"{iperf2.BOUNCE_MAX} bytes (-l), not {size}")
    sock = tcp.connect_to_server(options, stream=1)
    load = None if options.bounce_congest is None else working_load.WorkingLoad(options)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        tcp.set_wake_up(sock)
        if not options.json:
            pace = (f"{options.bounceback} every {options.bounce_period:g} s"
                    if options.bounce_period else "back to back")
            out(f"Bounceback to {options.host} port {options.port}: {size}-byte messages, "
                f"{pace}, for {options.seconds:g} s")
        if load is not None:
            load.start()
        samples, held = _bounce(sock, options, size, out)
    except KeyboardInterrupt:
        raise Interrupted() from None
    finally:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)
        sock.close()
    loaded = None if load is None else load.result()
    summary = summarise_rtt(samples)
    if options.json:
        out(json.dumps(_document(options, size, samples, held, loaded), indent=2))
        return
    for line in table.rtt_summary_lines(options.host, len(samples), summary):
        out(line)
    if held:
        out(f"the server held each message {sum(held) / len(held):.3f} ms on average "
            "(its read to its write)")
    if loaded is not None:
        out(working_load.line(loaded))


class _Rounds:
    """The client's round trips: its message, the answers, what they measured (ms)."""

    def __init__(self, sock: socket.socket, options: ClientOptions, size: int) -> None:
        self.sock, self.size = sock, size
        self.samples: list[float] = []
        self.held: list[float] = []  # the server's hold of each
        self.row: list[float] = []  # the round trips of the row under way (-i)
        self.number = 0
        self.quickack = options.bounce_quickack
        flags = iperf2.BB_QUICKACK if self.quickack else 0
        self.message = iperf2.encode_bounce(iperf2.Bounce(
            size, 0, flags, options.test.tos, int(options.bounce_hold * 1e6), time.time()))
        self.reply = memoryview(bytearray(size))
        self.stop = threading.Event()
        self.results = memoryview(bytearray(16 * RESULTS_PER_CALL)).cast("d")

    def one(self) -> None:
        """A round trip in Python's loop."""
        self.number += 1
        sent = time.monotonic()
        iperf2.renumber_bounce(self.message, self.number, time.time())
        self.sock.sendall(self.message)
        if self.quickack:
            quick_ack(self.sock)
        self._answer(0, sent)

    def compiled(self, fastpath: ModuleType, deadline: float) -> None:
        """Round trips back to back in the compiled loop until the monotonic `deadline`
        (an answer slower than the socket's wake-up timer, as Python waits for it)."""
        count, status, error, got, sent = fastpath.bounce_send(
            self.sock.fileno(), self.message, self.reply, self.size, self.number,
            iperf2.BB_NUMBER, iperf2.BB_SENT, iperf2.BB_SERVER_TIMES, deadline, self.results,
            self.quickack)
        self.number += count
        times = self.results[:2 * count]
        self.samples.extend(times[0::2])
        self.row.extend(times[0::2])
        self.held.extend(times[1::2])
        if status == BOUNCE_FAILED:
            raise OSError(error, os.strerror(error))
        if status in (BOUNCE_QUIET, BOUNCE_PARTIAL):
            self.number += 1
            self._answer(got, sent)
        elif status != BOUNCE_BUDGET:
            raise SimpleperfError(f"the server did not bounce message {self.number + 1} back "
                                  f"within {REPLY_SECONDS:g} s (is it iperf 2.1 or "
                                  "simpleperf?)")

    def _answer(self, got: int, sent: float) -> None:
        """The rest of the answer to the message sent at `sent` (monotonic), recorded."""
        try:
            back = _read_into(self.sock, self.reply[got:], self.size - got, self.stop,
                              REPLY_SECONDS)
        except ProtocolError:
            back = False
        if not back or self.reply[:4] != BOUNCEBACK:
            raise SimpleperfError(f"the server did not bounce message {self.number} back "
                                  f"within {REPLY_SECONDS:g} s (is it iperf 2.1 or "
                                  "simpleperf?)")
        rtt = (time.monotonic() - sent) * 1000
        self.samples.append(rtt)
        self.row.append(rtt)
        read_at, wrote_at = iperf2.bounce_server_times(self.reply)
        self.held.append(max(0.0, wrote_at - read_at) * 1000)


def _bounce(sock: socket.socket, options: ClientOptions, size: int,
            out: Callable[[str], None]) -> tuple[list[float], list[float]]:
    """The round trips (ms) until -t is up, and the server's hold of each (ms): back to
    back in the compiled loop where it is built, each row's (-i) in one call."""
    rounds = _Rounds(sock, options, size)
    began = time.monotonic()
    end = began + options.seconds
    every = options.rows_every or 0.0
    next_row = began + every if every else None
    row_from = 0.0
    burst_began = began
    fastpath = None if options.bounce_period else compiled.module()
    while time.monotonic() < end:
        if fastpath is not None:
            rounds.compiled(fastpath, min(end, next_row) if next_row is not None else end)
        else:
            if options.bounce_period and rounds.number and \
                    rounds.number % options.bounceback == 0:
                burst_began += options.bounce_period  # the next burst, on the period's grid
                time.sleep(max(0.0, burst_began - time.monotonic()))
                if time.monotonic() >= end:
                    break
            rounds.one()
        if next_row is not None and time.monotonic() >= next_row:  # (-J: no rows printed)
            if not options.json:
                out(_row(row_from, next_row - began, rounds.row))
            row_from, rounds.row, next_row = next_row - began, [], next_row + every
    if rounds.row and next_row is not None and not options.json:
        out(_row(row_from, time.monotonic() - began, rounds.row))
    return rounds.samples, rounds.held


def _row(start: float, end: float, samples: list[float]) -> str:
    if not samples:
        return f"{start:.1f}-{end:.1f} s  0 round trips"
    return (f"{start:.1f}-{end:.1f} s  {len(samples)} round trips  rtt avg/min/max = "
            f"{sum(samples) / len(samples):.3f}/{min(samples):.3f}/{max(samples):.3f} ms")


def _document(options: ClientOptions, size: int, samples: list[float],
              held: list[float], loaded: dict | None) -> dict:
    summary = summarise_rtt(samples)
    rtt = {} if summary is None else {
        "min_ms": summary.minimum, "mean_ms": summary.average, "max_ms": summary.maximum,
        "stdev_ms": summary.mdev, "p50_ms": summary.p50, "p90_ms": summary.p90,
        "p99_ms": summary.p99}
    return {"start": {"connecting_to": {"host": options.host, "port": options.port},
                      "protocol": "iperf2 bounceback",
                      "test_start": {"size": size, "burst": options.bounceback,
                                     "period_s": options.bounce_period,
                                     "hold_ms": options.bounce_hold * 1000,
                                     "quickack": options.bounce_quickack}},
            "end": {"round_trips": len(samples), "rtt": rtt,
                    "server_hold_mean_ms": sum(held) / len(held) if held else None,
                    "working_load": loaded}}
