"""UDP at unlimited rate (-b 0) as fast as the receiving host takes it, not faster: a sender
that floods the receiver's socket measures the receiver's loss, not the path's. The
receiver tells the sender what its socket dropped (protocol/native.py: PACE_FEEDBACK); the
sender runs unpaced until the first drop, then paces at BACK_OFF of what the receiver read
over the last READ_WINDOW (at most one cut a window), speeds up by PROBE every feedback
without a drop, and goes unpaced again after UNPACED_AFTER without one. Loss in
the network never slows it (the receiver counts only its own socket's drops), and against
a receiver that says nothing (an older simpleperf) it stays unpaced.

`ReceiverPace` is the sender's rule alone (sans-IO); `Teller` and `hear` move the feedback."""

from __future__ import annotations

import contextlib
import hmac
import socket
import time
from collections import deque

from ..protocol.native import PACE_FEEDBACK, PACE_FEEDBACK_MAGIC, PACE_FEEDBACK_SECONDS

BACK_OFF = 0.9  # of what the receiver read, after it dropped some
PROBE = 1.01  # the pace's growth per feedback without drops: the cut back in ~0.1 s
READ_WINDOW = 0.1  # seconds of the receiver's reading its pace follows; one cut per window
CATCH_UP_SECONDS = 0.0005  # the most a paced sender owes itself after a pause
PACED_BATCHES = 4  # the most a paced sender sends at once: a burst the receiver can hold
UNPACED_AFTER = 0.5  # seconds without drops after which the sender goes unpaced again
MAX_CUT = 0.5  # a cut leaves at least this much of what the sender sent
MIN_RATE = 1e6  # bits/s: the least it slows to
WAIT_SECONDS = 0.0005  # the longest a paced sender sleeps before looking again
FEEDBACK_BYTES = PACE_FEEDBACK.size + 64  # room for a key
# A report whose receiver's clock ran ahead of ours since the last by more than this is not
# the receiver's (a forged one, its clock set far ahead, would make every real one look
# older); reports looking older than the last for STALE_SECONDS mean the last was not.
JUMP_SLACK_NS = 1_000_000_000
STALE_SECONDS = 0.25


class ReceiverPace:
    """A sender's pace (`rate`, bits/s; None: unpaced) from the receiver's feedback, and
    what it may send now (`due`)."""

    def __init__(self, datagram_bytes: int) -> None:
        self.bits = datagram_bytes * 8
        self.rate: float | None = None
        self._sends: deque[tuple[float, int]] = deque()  # (sender's clock, datagrams sent)
        self._sent = 0
        self.dropped = 0  # the receiver's socket's drops, as last told
        self.cuts = 0
        self._reads: deque[tuple[int, int]] = deque()  # (bytes read, receiver's clock ns)
        self._credit = 0.0  # datagrams the pace allows and not yet sent
        self._at: float | None = None
        self._cut_at = -(1 << 62)  # the receiver's clock at the last cut (ns)
        self._heard_at: float | None = None  # our clock at the last report taken
        self._older_since: float | None = None  # our clock at the first report older than it

    def feedback(self, dropped: int, read: int, clock_ns: int, now: float | None = None
                 ) -> None:
        """A report: the receiver's socket's drops, the bytes it read, its clock; `now` our
        clock (None: its clock is not checked against ours)."""
        if self._sent and (read > self._sent * self.bits // 8 or dropped > self._sent):
            return  # more than was sent: not the receiver's
        reads = self._reads
        if reads and now is not None and self._heard_at is not None and \
                clock_ns - reads[-1][1] > (now - self._heard_at) * 1e9 + JUMP_SLACK_NS:
            return  # its clock jumped ahead of ours: not the receiver's
        if reads and (clock_ns <= reads[-1][1] or read < reads[-1][0]):
            # older than the last (UDP may reorder), or not from this test; for long, the
            # last was what was not the receiver's: start again from this one
            if now is None or self._older_since is None:
                self._older_since = now
                return
            if now - self._older_since < STALE_SECONDS:
                return
            reads.clear()
            self._cut_at = -(1 << 62)
        self._older_since = None
        self._heard_at = now
        reads.append((read, clock_ns))
        while len(reads) > 2 and clock_ns - reads[1][1] >= READ_WINDOW * 1e9:
            reads.popleft()
        if dropped > self.dropped:
            self.dropped = dropped
            # once a window: what the receiver read since the last cut was at its pace
            if len(reads) > 1 and clock_ns - self._cut_at >= READ_WINDOW * 1e9:
                took = (read - reads[0][0]) * 8e9 / (clock_ns - reads[0][1])
                # a receiver that was not scheduled for a while read little: at most
                # half the pace goes at once
                self.rate = max(MIN_RATE, BACK_OFF * took, MAX_CUT * self.sending_rate())
                self.cuts += 1
                self._cut_at = clock_ns
        elif self.rate is not None:
            self.rate *= PROBE
            if clock_ns - self._cut_at >= UNPACED_AFTER * 1e9:
                self.rate, self._at, self._credit = None, None, 0.0

    def due(self, now: float, most: int) -> int:
        """How many datagrams may go now, at most `most` (all of them while unpaced)."""
        if self.rate is None:
            return most
        if self._at is not None:
            self._credit = min(self._credit + (now - self._at) * self.rate / self.bits,
                               max(1.0, CATCH_UP_SECONDS * self.rate / self.bits))
        self._at = now
        return min(most, int(self._credit))

    def sent(self, count: int, now: float) -> None:
        if self.rate is not None:
            self._credit -= count
        self._sent += count
        sends = self._sends
        if not sends or now - sends[-1][0] >= PACE_FEEDBACK_SECONDS:
            sends.append((now, self._sent))
            while len(sends) > 2 and now - sends[1][0] >= READ_WINDOW:
                sends.popleft()

    def sending_rate(self) -> float:
        """Bits/s sent over about the last READ_WINDOW (0 until known)."""
        sends = self._sends
        if len(sends) < 2 or sends[-1][0] <= sends[0][0]:
            return 0.0
        return (sends[-1][1] - sends[0][1]) * self.bits / (sends[-1][0] - sends[0][0])

    def wait(self, wanted: int) -> None:
        """Sleep until `wanted` datagrams are due (at most WAIT_SECONDS)."""
        if self.rate:
            time.sleep(min(WAIT_SECONDS, max(0.0, wanted - self._credit) * self.bits
                           / self.rate))


def hear(sock: socket.socket, pace: ReceiverPace, key: bytes | None) -> None:
    """Every feedback waiting on the sender's socket into `pace`; anything else (not the
    test's, or without its key) is ignored."""
    expected = PACE_FEEDBACK.size + (len(key) if key else 0)
    while True:
        try:
            data = sock.recv(FEEDBACK_BYTES, socket.MSG_DONTWAIT)
        except OSError:  # nothing more waits, or the receiver is gone
            return
        if len(data) != expected or (key and not hmac.compare_digest(
                data[PACE_FEEDBACK.size:], key)):
            continue
        magic, dropped, read, clock_ns = PACE_FEEDBACK.unpack_from(data)
        if magic == PACE_FEEDBACK_MAGIC:
            pace.feedback(dropped, read, clock_ns, time.monotonic())


class Teller:
    """A receiver's side: after its reads, at most every PACE_FEEDBACK_SECONDS, it tells the
    sender its socket's drops and what it has read."""

    def __init__(self, sock: socket.socket, key: bytes | None) -> None:
        self.sock = sock
        self.key = key or b""
        self.next_at = 0.0

    def tell_if_due(self, now: float, read: int, drops: int) -> None:
        """`read`: bytes so far; `drops`: the socket's drops as its reads said (SO_RXQ_OVFL)."""
        if now < self.next_at:
            return
        self.next_at = now + PACE_FEEDBACK_SECONDS
        message = PACE_FEEDBACK.pack(PACE_FEEDBACK_MAGIC, drops, read,
                                     time.monotonic_ns()) + self.key
        with contextlib.suppress(OSError):  # the sender gone, or its socket full
            self.sock.send(message, socket.MSG_DONTWAIT)
