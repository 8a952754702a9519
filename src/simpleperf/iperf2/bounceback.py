"""iperf2's bounceback test (--bounceback), both ends: the client writes a message of one
size (its header: iperf 2.1.8's bounceback_hdr, protocol/iperf2.py) and waits for it to
come back, stamped with the server's read and write times; each round trip is one RTT
sample, the messages back to back or one every --bounceback-period.

The server's end (Echo) runs as a stream body of our iperf2 service; the client's (run)
against any server that bounces (iperf -s 2.1, simpleperf -s)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable

from ..description.client_options import ClientOptions
from ..description.testspec import TestSpec
from ..engine.records import Stream
from ..errors import Interrupted, ProtocolError, SimpleperfError
from ..protocol import iperf2
from ..report import native as table
from ..stats import summarise_rtt
from ..transport import tcp

REPLY_SECONDS = 5.0  # a message not back within this long ends the client's test
BOUNCEBACK = iperf2.BOUNCEBACK.to_bytes(4, "big")  # a message's first word


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

    def run(self, stream: Stream, spec: TestSpec, start: float, stop: threading.Event
            ) -> None:
        sock, size, hold = stream.sock, self.bounce.size, self.bounce.hold / 1e6
        message, read_at = self.first, self.read_at  # one buffer, read into again
        view, clock, wall = memoryview(message), time.monotonic, time.time
        stream.first = stream.last = clock()
        stream.num_bytes = size
        try:
            while not stop.is_set() and not iperf2.bounce_stops(message):
                if hold:
                    time.sleep(hold)
                iperf2.stamp_bounce(message, read_at, wall())
                sock.sendall(message)
                if not _read_into(sock, view, size, stop, self.idle):
                    break
                read_at = wall()
                stream.num_bytes += size
                stream.last = clock()
        except ProtocolError as error:
            stream.error = str(error)
        except OSError as error:
            if not stop.is_set():
                stream.error = (error.strerror or str(error)).lower()
        finally:
            stream.done.set()


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
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        tcp.set_wake_up(sock)
        if not options.json:
            pace = (f"{options.bounceback} every {options.bounce_period:g} s"
                    if options.bounce_period else "back to back")
            out(f"Bounceback to {options.host} port {options.port}: {size}-byte messages, "
                f"{pace}, for {options.seconds:g} s")
        samples, held = _bounce(sock, options, size, out)
    except KeyboardInterrupt:
        raise Interrupted() from None
    finally:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)
        sock.close()
    summary = summarise_rtt(samples)
    if options.json:
        out(json.dumps(_document(options, size, samples, held), indent=2))
        return
    for line in table.rtt_summary_lines(options.host, len(samples), summary):
        out(line)
    if held:
        out(f"the server held each message {sum(held) / len(held):.3f} ms on average "
            "(its read to its write)")


def _bounce(sock: socket.socket, options: ClientOptions, size: int,
            out: Callable[[str], None]) -> tuple[list[float], list[float]]:
    """The round trips (ms) until -t is up, and the server's hold of each (ms)."""
    samples: list[float] = []
    held: list[float] = []
    began = time.monotonic()
    end = began + options.seconds
    every = options.rows_every or 0.0
    next_row = began + every if every else None
    row_from, row_samples = 0.0, list[float]()
    number = 0
    stop = threading.Event()
    message = iperf2.encode_bounce(iperf2.Bounce(
        size, 0, 0, options.test.tos, int(options.bounce_hold * 1e6), time.time()))
    reply = memoryview(bytearray(size))
    burst_began = began
    while time.monotonic() < end:
        if options.bounce_period and number and number % options.bounceback == 0:
            burst_began += options.bounce_period  # the next burst, on the period's grid
            time.sleep(max(0.0, burst_began - time.monotonic()))
            if time.monotonic() >= end:
                break
        now = time.monotonic()
        if next_row is not None and now >= next_row and not options.json:
            out(_row(row_from, next_row - began, row_samples))
            row_from, row_samples, next_row = next_row - began, [], next_row + every
        number += 1
        sent = time.monotonic()
        iperf2.renumber_bounce(message, number, time.time())
        sock.sendall(message)
        try:
            back = _read_into(sock, reply, size, stop, REPLY_SECONDS)
        except ProtocolError:
            back = False
        if not back or reply[:4] != BOUNCEBACK:
            raise SimpleperfError(f"the server did not bounce message {number} back within "
                                  f"{REPLY_SECONDS:g} s (is it iperf 2.1 or simpleperf?)")
        rtt = (time.monotonic() - sent) * 1000
        samples.append(rtt)
        row_samples.append(rtt)
        read_at, wrote_at = iperf2.bounce_server_times(reply)
        held.append(max(0.0, wrote_at - read_at) * 1000)
    if row_samples and next_row is not None and not options.json:
        out(_row(row_from, time.monotonic() - began, row_samples))
    return samples, held


def _row(start: float, end: float, samples: list[float]) -> str:
    if not samples:
        return f"{start:.1f}-{end:.1f} s  0 round trips"
    return (f"{start:.1f}-{end:.1f} s  {len(samples)} round trips  rtt avg/min/max = "
            f"{sum(samples) / len(samples):.3f}/{min(samples):.3f}/{max(samples):.3f} ms")


def _document(options: ClientOptions, size: int, samples: list[float],
              held: list[float]) -> dict:
    summary = summarise_rtt(samples)
    rtt = {} if summary is None else {
        "min_ms": summary.minimum, "mean_ms": summary.average, "max_ms": summary.maximum,
        "stdev_ms": summary.mdev, "p50_ms": summary.p50, "p90_ms": summary.p90,
        "p99_ms": summary.p99}
    return {"start": {"connecting_to": {"host": options.host, "port": options.port},
                      "protocol": "iperf2 bounceback",
                      "test_start": {"size": size, "burst": options.bounceback,
                                     "period_s": options.bounce_period,
                                     "hold_ms": options.bounce_hold * 1000}},
            "end": {"round_trips": len(samples), "rtt": rtt,
                    "server_hold_mean_ms": sum(held) / len(held) if held else None}}
