"""TCP writes that carry their send time (--trip-times, --isochronous): the sender opens each
write with WRITE_HEADER; the receiver follows the headers through the byte stream and times
each write two ways:

- write to read: from the write() that began it to the read that brought its last byte
  (iperf2's write-to-read latency): the application's delay, which includes the time the
  write waited in the sender's socket buffer, seconds when the path is slow;
- the path's one-way delay: from the moment the sender's kernel sent the write's last byte
  (SO_TIMESTAMPING, reported to the sender a little later and carried in a later write's
  header) to the read that brought it: the network's delay and its queues, not the buffer's.

Frames of an isochronous TCP test are writes of varying size, timed write to read."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections import deque

from ..delays import DelayLog, FrameAccount
from ..errors import SimpleperfError
from ..options import MAX_LENGTH
from ..protocol.native import WRITE_HEADER
from ..testspec import TestSpec
from ..transport import buffers, tcp
from .frames import FrameClock
from .pacing import WriteTurns, wait_until
from .records import Stream

HEADER = WRITE_HEADER.size


def send(stream: Stream, spec: TestSpec, start: float, deadline: float | None,
         stop: threading.Event) -> None:
    """Whole writes, each stamped, until the deadline, -n bytes, or `stop`; frames at their
    ticks when the test is isochronous, else back to back (or paced by -b)."""
    sock = stream.sock
    frames = FrameClock(spec, start) if spec.isochronous else None
    most = frames.largest if frames is not None else spec.length
    # room for a last write that takes in a remainder too small for a header of its own
    payload = buffers.aligned(most + HEADER, spec.repeating_payload)
    amount = spec.num_bytes
    wait_until(start, stop)
    stream.first = time.monotonic()
    turns = WriteTurns(sock, spec, deadline, amount, stream.first)
    departures = tcp.Departures.start(sock)
    departed: deque[tuple[int, int]] = deque()  # writes known to have left, not yet told
    number = 0
    sent = 0
    clock = time.monotonic
    while not stop.is_set():
        now = clock()
        turn = turns.take(now, sent)
        if turn is None:
            break
        if not turn:
            continue
        size = spec.length if frames is None else frames.next_size(now, stop)
        if size is None:
            continue
        if amount is not None:
            left = amount - sent
            size = left if left - size < HEADER else min(size, left)
        number += 1
        if departures is not None:
            departed.extend((which, round(when * 1e9)) for which, when in departures.read())
        # one departure a write, oldest first: a write a departure, so none is left out
        told = departed.popleft() if departed else (0, 0)
        WRITE_HEADER.pack_into(payload, 0, time.time_ns(), number & 0xFFFFFFFF, size, *told)
        sent += _write_whole(sock, payload[:size], stop)
        if departures is not None:
            departures.pending(sent, number & 0xFFFFFFFF)
        stream.num_bytes = sent
        stream.packets_sent = number
    stream.last = clock()
    if frames is not None:
        stream.frames_sent, stream.frames_slipped = number, frames.slipped
    if not stop.is_set():
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)


def _write_whole(sock: socket.socket, chunk: memoryview, stop: threading.Event) -> int:
    """A write's bytes in order, however many calls it takes (its header says how long it
    is, so a receiver must see it whole)."""
    done = 0
    while done < len(chunk) and not stop.is_set():
        try:
            done += sock.send(chunk[done:])
        except BlockingIOError:  # the wake-up timer: nothing could be written for a while
            continue
    return done


ARRIVALS_KEPT = 65536  # writes whose departure may still be reported (a sender's buffer)


class WriteTimes:
    """Follows the write headers through a receiver's byte stream. feed() is given each
    read's bytes; when a read brings a write's last byte, its write-to-read delay is added to
    `log`, and its arrival is kept until a later header says when it left the sender's
    kernel, which adds its path delay to `path`."""

    def __init__(self, log: DelayLog, frames: FrameAccount | None = None,
                 path: DelayLog | None = None) -> None:
        self.log = log
        self.frames = frames  # isochronous: each write is a frame
        self.path = path
        self.arrivals: deque[tuple[int, float]] = deque(maxlen=ARRIVALS_KEPT)
        self.position = 0  # stream offset of the next byte fed
        self.header_at = 0  # stream offset of the next write's header
        self.partial = b""  # a header split between reads
        self.write_end: int | None = None  # the current write's end, once its header is read
        self.sent = 0.0  # its send time, seconds of the sender's wall clock
        self.number = 0

    def feed(self, data: memoryview, now: float) -> None:
        end = self.position + len(data)
        while True:
            if self.write_end is not None:
                if self.write_end > end:
                    break
                self.log.current.add(now - self.sent)
                if self.path is not None:
                    self.arrivals.append((self.number, now))
                if self.frames is not None:
                    self.frames.feed(self.number, 1, 0, self.sent, now)
                self.header_at, self.write_end = self.write_end, None
            if self.header_at >= end:
                break
            start = self.header_at + len(self.partial) - self.position
            need = HEADER - len(self.partial)
            self.partial += bytes(data[start:start + need])
            if len(self.partial) < HEADER:
                break
            sent_ns, number, length, departed, left_ns = WRITE_HEADER.unpack(self.partial)
            if not HEADER <= length <= MAX_LENGTH + HEADER:
                raise SimpleperfError(f"a timed write's header says {length} bytes: not a "
                                      "simpleperf sender's (--trip-times)")
            if departed and self.path is not None:
                self._departed(departed, left_ns * 1e-9)
            self.partial = b""
            self.sent = sent_ns * 1e-9
            self.number = number
            self.write_end = self.header_at + length
        self.position = end

    def _departed(self, number: int, left: float) -> None:
        """Write `number`'s last byte left the sender at `left`: its path delay, if it is
        still among the arrivals kept (numbers rise, so older ones are passed)."""
        arrivals = self.arrivals
        while arrivals and arrivals[0][0] != number and _before(arrivals[0][0], number):
            arrivals.popleft()
        if arrivals and arrivals[0][0] == number:
            assert self.path is not None
            self.path.current.add(arrivals.popleft()[1] - left)


def _before(a: int, b: int) -> bool:
    """Write number a came before b (32-bit numbers that wrap)."""
    return 0 < (b - a) & 0xFFFFFFFF < 0x80000000
