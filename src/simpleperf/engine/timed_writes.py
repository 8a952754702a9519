"""TCP writes that carry their send time (--trip-times, --isochronous): the sender opens each
write with WRITE_HEADER; the receiver follows the headers through the byte stream and times
each write from its start at the sender to the read that brought its last byte (iperf2's
write-to-read latency). Frames of an isochronous TCP test are writes of varying size."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

from ..delays import DelayLog, FrameAccount
from ..errors import SimpleperfError
from ..options import MAX_LENGTH
from ..protocol.native import WRITE_HEADER, TestSpec
from ..transport import buffers
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
        WRITE_HEADER.pack_into(payload, 0, time.time_ns(), number & 0xFFFFFFFF, size)
        sent += _write_whole(sock, payload[:size], stop)
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


class WriteTimes:
    """Follows the write headers through a receiver's byte stream. feed() is given each
    read's bytes; when a read brings a write's last byte, that write's delay is added."""

    def __init__(self, log: DelayLog, frames: FrameAccount | None = None) -> None:
        self.log = log
        self.frames = frames  # isochronous: each write is a frame
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
            sent_ns, number, length = WRITE_HEADER.unpack(self.partial)
            if not HEADER <= length <= MAX_LENGTH + HEADER:
                raise SimpleperfError(f"a timed write's header says {length} bytes: not a "
                                      "simpleperf sender's (--trip-times)")
            self.partial = b""
            self.sent = sent_ns * 1e-9
            self.number = number
            self.write_end = self.header_at + length
        self.position = end
