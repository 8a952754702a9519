"""TCP writes that carry their send time (--trip-times, --isochronous): the sender opens each
write with WRITE_HEADER and ends it with MSG_EOR (the segment that holds its last byte holds
nothing after it); the receiver follows the headers through the byte stream and times each
write two ways:

- write to read: from the write() that began it to the read that brought its last byte
  (iperf2's write-to-read latency): the application's delay, which includes the time the
  write waited in the sender's socket buffer, seconds when the path is slow;
- the path's one-way delay: from the moment the sender's kernel sent the write's last byte
  (SO_TIMESTAMPING, reported to the sender a little later and carried in a later write's
  header) to the moment the segment holding it reached the receiver (an ArrivalSource): the
  network's delay and its queues, not the buffer's, nor the sender's pacing (it comes
  before the kernel's send), nor a wait behind a lost segment (it comes after the arrival).

Frames of an isochronous TCP test are writes of varying size, timed write to read."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections import deque

from ..delays import DelayLog, FrameAccount
from ..description.options import MAX_LENGTH
from ..description.testspec import TestSpec
from ..errors import SimpleperfError
from ..protocol.native import WRITE_HEADER
from ..transport import buffers, tcp
from ..transport.segments import Segments
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
            done += sock.send(chunk[done:], socket.MSG_EOR)
        except BlockingIOError:  # the wake-up timer: nothing could be written for a while
            continue
    return done


ARRIVALS_KEPT = 65536  # writes whose departure may still be reported (a sender's buffer)


class WriteTimes:
    """Follows the write headers through a receiver's byte stream. feed() is given each
    read's bytes; when a read brings a write's last byte, its write-to-read delay is added to
    `log`, and its arrival (as `source` tells it) is kept until a later header says when it
    left the sender's kernel, which adds its path delay to `path`."""

    def __init__(self, log: DelayLog, frames: FrameAccount | None = None,
                 path: DelayLog | None = None, source: ArrivalSource | None = None) -> None:
        self.log = log
        self.frames = frames  # isochronous: each write is a frame
        self.path = path
        self.source = source if source is not None else ReadTimes()
        self.arrivals: deque[tuple[int, float]] = deque(maxlen=ARRIVALS_KEPT)
        self.position = 0  # stream offset of the next byte fed
        self.header_at = 0  # stream offset of the next write's header
        self.partial = b""  # a header split between reads
        self.write_end: int | None = None  # the current write's end, once its header is read
        self.sent = 0.0  # its send time, seconds of the sender's wall clock
        self.number = 0

    def time_arrivals(self, source: ArrivalSource) -> None:
        """Arrivals from `source` from now on, which the path's delays say they are."""
        self.source = source
        if self.path is not None:
            self.path.arrival = source.method

    def wanted(self, most: int) -> int:
        """How many bytes the next read may take so that it ends where a write (or its
        header) does: a stamped read then says when the write's last byte came."""
        if self.write_end is not None:
            return max(1, min(most, self.write_end - self.position))
        return HEADER - len(self.partial)

    def feed(self, data: memoryview, now: float, stamp: float | None = None) -> None:
        """`data` read at `now`; `stamp`: the read's arrival stamp, where reads are stamped
        (StampedReads)."""
        source = self.source
        if self.path is not None:
            self._arrived(source.read(stamp))
        end = self.position + len(data)
        while True:
            if self.write_end is not None:
                if self.write_end > end:
                    break
                self.log.current.add(now - self.sent)
                if self.path is not None:
                    self._arrived(source.ended(self.number, self.write_end, now, stamp))
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
            if self.path is not None:
                if departed:
                    self._departed(departed, left_ns * 1e-9)
                source.began((sent_ns, number), self.header_at)
            self.partial = b""
            self.sent = sent_ns * 1e-9
            self.number = number
            self.write_end = self.header_at + length
        self.position = end

    def _arrived(self, arrival: tuple[int, float] | None) -> None:
        if arrival is not None:
            self.arrivals.append(arrival)

    def _departed(self, number: int, left: float) -> None:
        """Write `number`'s last byte left the sender at `left`: its path delay, if it is
        still among the arrivals kept (numbers rise, so older ones are passed)."""
        arrivals = self.arrivals
        while arrivals and arrivals[0][0] != number and _before(arrivals[0][0], number):
            arrivals.popleft()
        if arrivals and arrivals[0][0] == number:
            assert self.path is not None
            self.path.current.add(arrivals.popleft()[1] - left)


class ArrivalSource:
    """When each write's last byte reached the receiver. `read` is told of every read
    before its bytes are followed, `began` of each write's header (the write's number and
    its first byte's offset in the stream), `ended` of each write whose last byte a read
    brought; each returns (write number, arrival) for a write whose arrival is known by then.
    A write is known to `began` by its header's first two fields (send time, number).
    StampedReads needs reads that end where writes and headers do (WriteTimes.wanted)."""

    method = "read"

    def read(self, stamp: float | None) -> tuple[int, float] | None:
        return None

    def began(self, write: tuple[int, int], offset: int) -> None:
        return None

    def ended(self, number: int, end: int, now: float,
              stamp: float | None) -> tuple[int, float] | None:
        raise NotImplementedError

    def close(self) -> None:
        return None


class ReadTimes(ArrivalSource):
    """No stamps: the read that brought the last byte stands for its arrival (and counts
    the time it waited behind a lost segment, or for the reader)."""

    def ended(self, number: int, end: int, now: float,
              stamp: float | None) -> tuple[int, float] | None:
        return number, now


class StampedReads(ArrivalSource):
    """Reads stamped by the kernel (tcp.Arrivals), each ending on a write's last byte. The
    kernel stamps a read with the newest segment it took bytes from, and merges a waiting
    segment with the ones after it: a stamp is the last byte's own only when the next read
    (the next header) has another, so a write whose last segment was merged is not timed."""

    method = "stamped reads"

    def __init__(self, reader: tcp.Arrivals) -> None:
        self.reader = reader
        self.waiting: tuple[int, float] | None = None
        self.merged = 0

    def read(self, stamp: float | None) -> tuple[int, float] | None:
        waiting, self.waiting = self.waiting, None
        if waiting is None:
            return None
        if stamp is None or stamp == waiting[1]:
            self.merged += 1
            return None
        return waiting

    def ended(self, number: int, end: int, now: float,
              stamp: float | None) -> tuple[int, float] | None:
        if stamp is not None:
            self.waiting = (number, stamp)
        return None


class CapturedArrivals(ArrivalSource):
    """Each segment's arrival as a capture on this host sees it (segments.Segments): the
    segment that ends with a write's last byte (the sender ends each write's segment there,
    MSG_EOR). A write whose last segment came only when resent is not timed: its first copy
    was lost, and the sender's departure stamp is the first copy's. Nor is one whose segment
    the kernel did not stamp (it came before the kernel's stamping was on)."""

    method = "capture"

    def __init__(self, segments: Segments) -> None:
        self.segments = segments
        self.base: int | None = None  # the sequence number of the stream's offset 0
        self.resent = 0
        self.unstamped = 0

    def read(self, stamp: float | None) -> tuple[int, float] | None:
        # a segment's first bytes are looked at only until one ties the stream to it; after
        # that the capture is read only when a write's end is not known yet (ended): a read
        # of the packet socket a write, not two a read of the stream
        if self.base is None:
            self.segments.drain(WRITE_HEADER)
        return None

    def began(self, write: tuple[int, int], offset: int) -> None:
        if self.base is None:
            start = self.segments.start_of(write)
            if start is not None:
                self.base = start - offset

    def ended(self, number: int, end: int, now: float,
              stamp: float | None) -> tuple[int, float] | None:
        if self.base is None:
            return None
        seen = self.segments.arrival(self.base + end)
        if seen is None:  # not taken in yet: the capture holds it (it came before the read)
            self.segments.drain()
            seen = self.segments.arrival(self.base + end)
        if seen is None:
            return None
        arrival, resent = seen
        if resent:
            self.resent += 1
            return None
        if arrival is None:
            self.unstamped += 1
            return None
        return number, arrival

    def close(self) -> None:
        self.segments.close()


def arrival_source(sock: socket.socket) -> ArrivalSource:
    """The most faithful arrival times this receiver can have: a capture (CAP_NET_RAW),
    else stamped reads, else read times. An MPTCP connection's segments come over several
    subflows, which neither a capture of one nor its reads follow, and its sender's kernel
    stamps no departures: read times, which time nothing (and cost nothing)."""
    if sock.proto == tcp.IPPROTO_MPTCP:
        return ReadTimes()
    captured = Segments.open(sock)
    if captured is not None:
        return CapturedArrivals(captured)
    reader = tcp.Arrivals.start(sock)
    if reader is not None:
        return StampedReads(reader)
    return ReadTimes()


def _before(a: int, b: int) -> bool:
    """Write number a came before b (32-bit numbers that wrap)."""
    return 0 < (b - a) & 0xFFFFFFFF < 0x80000000
