"""Isochronous traffic (--isochronous FPS:MEAN,STDEV, as iperf2): frames of a video stream,
one every 1/FPS seconds, their sizes log-normal around MEAN/FPS. The sender's frame clock,
and UDP frames: every datagram carries its frame's number, size and its index in it, so the
receiver can tell a frame that arrived whole (and when) from one that lost a datagram."""

from __future__ import annotations

import math
import random
import socket
import threading
import time
from typing import Any

from ..description.options import MAX_LENGTH
from ..description.testspec import TestSpec
from ..errors import SimpleperfError
from ..protocol.native import (
    AUTH_DATAGRAM_HEADER,
    DATAGRAM_HEADER,
    FRAME_FIELDS,
    MAX_FRAME_DATAGRAMS,
)
from ..stats import UdpReceiveAccount
from ..transport import udp
from ..transport.buffers import aligned
from .pacing import wait_until
from .records import Stream

SIZE_SPREAD = 6.0  # the largest frame: this many standard deviations above the mean


class FrameClock:
    """When each frame is due and how large it is. A frame whose whole period has passed
    before it could be sent is skipped and counted as a slip (iperf2's term)."""

    def __init__(self, spec: TestSpec, start: float, seed: int | None = None) -> None:
        self.period = 1.0 / spec.frame_rate
        self.start = start
        mean = spec.frame_load / 8 / spec.frame_rate
        spread = spec.frame_stdev / 8 / spec.frame_rate
        self.mean = mean
        self.largest = min(MAX_LENGTH, math.ceil(mean + SIZE_SPREAD * spread))
        self._sigma = math.sqrt(math.log1p((spread / mean) ** 2)) if spread > 0 else 0.0
        self._mu = math.log(mean) - self._sigma ** 2 / 2
        self._random = random.Random(seed)
        self.slot = 0  # the frame slots passed so far, sent or slipped
        self.sent = 0  # frames handed out: the latest one's number (numbers have no gaps)
        self.slipped = 0

    def size(self) -> int:
        """A frame's size in bytes: log-normal with the asked mean and deviation."""
        if self._sigma == 0:
            return max(1, round(self.mean))
        drawn = self._random.lognormvariate(self._mu, self._sigma)
        return max(1, min(self.largest, round(drawn)))

    def next_size(self, now: float, stop: threading.Event) -> int | None:
        """The next frame's size once it is due; None after waiting (check the deadline)."""
        due = self.start + self.slot * self.period
        if now < due:
            wait_until(due, stop)
            return None
        missed = int((now - due) / self.period)
        self.slipped += missed
        self.slot += missed + 1
        self.sent += 1
        return self.size()


def frame_offset(keyed: bool) -> int:
    """Where the frame fields sit in a datagram: after the header, and the key if any."""
    return AUTH_DATAGRAM_HEADER.size if keyed else DATAGRAM_HEADER.size


def send(stream: Stream, spec: TestSpec, start: float, deadline: float | None,
         stop: threading.Event) -> None:
    """UDP frames: each a burst of -l byte datagrams at its tick (the last one shorter: a
    frame's bytes are its size), all stamped with the frame's start, so the receiver times
    the frame from its start to its last datagram."""
    sock = stream.sock
    size = spec.length
    frames = FrameClock(spec, start)
    buffer = aligned(size, spec.repeating_payload)
    at = frame_offset(stream.key is not None)
    if stream.key is not None:
        buffer[DATAGRAM_HEADER.size:at] = stream.key
    wait_until(start, stop)
    stream.first = time.monotonic()
    number = 0
    while not stop.is_set():
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            break
        if spec.num_bytes is not None and stream.num_bytes >= spec.num_bytes:
            break
        frame_bytes = frames.next_size(now, stop)
        if frame_bytes is None:
            continue
        count = min(MAX_FRAME_DATAGRAMS, max(1, -(-frame_bytes // size)))
        # the last datagram takes what is left of the frame (at least the headers)
        last = max(at + FRAME_FIELDS.size, min(size, frame_bytes - (count - 1) * size))
        stamp = time.time()
        seconds = int(stamp)
        micros = int((stamp - seconds) * 1e6)
        for index in range(count):
            number += 1
            DATAGRAM_HEADER.pack_into(buffer, 0, seconds, micros, number)
            FRAME_FIELDS.pack_into(buffer, at, frames.sent & 0xFFFFFFFF, count, index)
            send_datagram(sock, buffer if index < count - 1 else buffer[:last])
        stream.packets_sent = number
        stream.num_bytes += (count - 1) * size + last
        stream.frames_sent = frames.sent
    stream.frames_slipped = frames.slipped
    stream.last = time.monotonic()


def send_datagram(sock: socket.socket, buffer: Any) -> None:
    """One datagram, sent again while the socket is full; a closed port is one line."""
    while True:
        try:
            sock.send(buffer)
            return
        except BlockingIOError:
            continue
        except ConnectionRefusedError:
            raise SimpleperfError(udp.PORT_CLOSED) from None


def receive(stream: Stream, spec: TestSpec, stop: threading.Event) -> None:
    """Every datagram into the stream's account (loss, jitter, delays) and its frame's."""
    sock = stream.sock
    account = stream.account = UdpReceiveAccount(stream.delays)
    frames = stream.frames
    assert frames is not None
    key = stream.key
    at = frame_offset(key is not None)
    smallest = at + FRAME_FIELDS.size
    buffer = aligned(udp.MAX_GSO_BYTES + 65536)
    buffers = [buffer]
    received = 0
    while not stop.is_set():
        try:
            count, ancillary, _, _ = sock.recvmsg_into(buffers, udp.ANCILLARY_SPACE)
        except (BlockingIOError, ConnectionRefusedError):
            continue
        segment, arrival, drops = udp.read_ancillary(ancillary, count)
        step = max(1, min(segment, count))
        lost_before = account.host_gap_begins(drops)
        for offset in range(0, count, step):
            length = min(step, count - offset)
            if length < smallest or (key is not None and
                                     buffer[offset + DATAGRAM_HEADER.size:offset + at] != key):
                account.bad += 1
                continue
            seconds, micros, number = DATAGRAM_HEADER.unpack_from(buffer, offset)
            sent = seconds + micros * 1e-6
            account.feed(number, sent, arrival)
            frame, datagrams, index = FRAME_FIELDS.unpack_from(buffer, offset + at)
            frames.feed(frame, datagrams, index, sent, arrival)
            received += length
        account.host_gap_ends(lost_before)
        if stream.first is None:
            stream.first = time.monotonic()
        stream.num_bytes = received
        stream.last = time.monotonic()

