"""iperf2's TCP --trip-times (and --isochronous) streams at either end of ours: every write
is a burst opening with iperf2's burst fields (its write time, number and size) over a copy
of the test's header, and the reader times each burst from its write to the read of its
last byte (iperf2.BurstTimes). Our server reads its clients' and sends their -R; our client
sends to iperf2's servers and reads their -R."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from ..delays import DelayLog
from ..description.testspec import TestSpec
from ..engine.frames import FrameClock
from ..engine.pacing import wait_until
from ..engine.records import Stream
from ..engine.streams import run_stream
from ..protocol import iperf2
from ..transport import buffers


def timed(rests: dict[int, bytes], head: bytes, head_sent: bool = False
          ) -> Callable[..., None]:
    """The stream threads' body: a receiving stream read burst by burst, each write's delay
    from its write to our read of its last byte (write_to_read_delay: the sender's buffer
    included, as iperf2 times it), `rests` what came with each one's header (a server's
    read of it), or the sender's `head` skipped first (a client's -R: 2.1.8's server opens
    with it); a sending one as bursts over `head` (after it, unless `head_sent`)."""
    def body(stream: Stream, spec: TestSpec, start: float, stop: threading.Event) -> None:
        if stream.sending:
            send(stream, spec, start, stop, head, head_sent)
            return
        if stream.write_delays is not None:
            stream.delays = None  # not the path's: the writes'
            rest = rests.get(stream.number)
            stream.write_times = times = BurstLog(stream.write_delays,
                                                  len(head) if rest is None else 0)
            times.feed(rest or b"", time.time())
        run_stream(stream, spec, start, stop)

    return body


class BurstLog:
    """An iperf2 TCP --trip-times stream's write times (iperf2.BurstTimes) into `log`, after
    `skip` bytes that are not bursts (the sender's header)."""

    def __init__(self, log: DelayLog, skip: int = 0) -> None:
        self.reader, self.log, self.skip = iperf2.BurstTimes(), log, skip

    def feed(self, data: Any, now: float) -> None:
        if self.skip:
            skipped = min(self.skip, len(data))
            self.skip -= skipped
            data = memoryview(data)[skipped:]
        for delay in self.reader.feed(data, now):
            self.log.current.add(delay)


def send(stream: Stream, spec: TestSpec, start: float, stop: threading.Event, head: bytes,
         head_sent: bool = False) -> None:
    """`head` (unless `head_sent`), then each write a burst opening with iperf2's burst
    fields over a copy of it (times, number, size), as 2.1.8 sends them: of -l bytes back
    to back, or with --isochronous a frame's bytes at each frame's time (engine.frames)."""
    sock, clock = stream.sock, time.monotonic
    frames = FrameClock(spec, start) if spec.isochronous else None
    size = max(spec.length, len(head), iperf2.MIN_BURST)
    largest = max(size, frames.largest) if frames is not None else size
    deadline = None if spec.end is None else start + spec.end
    payload = bytearray(buffers.aligned(largest, True))
    payload[:len(head)] = head
    wait_until(start, stop)
    stream.first, began = clock(), time.time()
    number = before = 0
    try:
        if not head_sent:
            send_all(sock, memoryview(head), stream, stop)
        while not stop.is_set() and (deadline is None or clock() < deadline) and (
                spec.num_bytes is None or stream.num_bytes < spec.num_bytes):
            if frames is not None:
                drawn = frames.next_size(clock(), stop)
                if drawn is None:
                    continue
                size = max(drawn, iperf2.MIN_BURST)
            number += 1
            iperf2.stamp_burst(payload, began, time.time(), number, size, before,
                               frames.period if frames is not None else 0.0)
            send_all(sock, memoryview(payload)[:size], stream, stop)
            before += size
            if frames is not None:
                stream.frames_sent = frames.sent
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)  # the end of stream ends the reader's test
    except OSError as error:
        if not stop.is_set():
            stream.error = (error.strerror or str(error)).lower()
    finally:
        if frames is not None:
            stream.frames_slipped = frames.slipped
        stream.done.set()


def send_all(sock: socket.socket, data: memoryview, stream: Stream,
             stop: threading.Event) -> None:
    """All of `data` (a send returns now and then: the wake-up timer), counted."""
    sent = 0
    while sent < len(data) and not stop.is_set():
        try:
            sent += sock.send(data[sent:])
        except BlockingIOError:
            continue
    stream.num_bytes += sent
    stream.last = time.monotonic()
