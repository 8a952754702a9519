"""UDP with a scalable response to congestion marks (--l4s, as iperf2's UDP L4S): the sender
marks its datagrams ECT(1), the L4S identifier (RFC 9331), so that a DualQ AQM such as
DualPI2 puts them in its low-latency queue and marks them CE instead of dropping them; the
receiver reads each datagram's ECN field and tells the sender how many arrived and how many
CE-marked (protocol/native.py: L4S_FEEDBACK); the sender keeps a window of datagrams in
flight, paced over the round trip, and moves it as DCTCP and TCP Prague move theirs: once a
round trip the marked fraction F smooths alpha (gain 1/16); a round trip with marks cuts
the window by alpha / 2, one without adds a datagram; the start grows it by what arrived
(doubling each round trip) until the first mark, or until a round trip's least delay has
grown past the least seen by HyStart++'s margin (RFC 9406: an eighth of it, 4 to 16 ms), as
a queue with no AQM (a receiver's socket buffer, say) fills; a loss halves it, as a classic
flow's would. -b is the ceiling of its rate (none without it).

`ScalableWindow` is the response alone (sans-IO); `send` and `receive` move the datagrams."""

from __future__ import annotations

import contextlib
import select
import socket
import sys
import threading
import time

from .. import ecn
from ..description.options import MAX_RATE  # the ceiling without -b
from ..description.testspec import TestSpec
from ..errors import SimpleperfError
from ..protocol.native import L4S_FEEDBACK, L4S_FEEDBACK_MAGIC, L4S_FEEDBACK_SECONDS
from ..stats import UdpReceiveAccount
from ..transport import stamping, tcp, udp
from ..transport.buffers import aligned
from . import udp_receive
from .pacing import wait_until
from .records import Stream

GAIN = 1 / 16  # alpha's smoothing, DCTCP's g
INITIAL_WINDOW = 10  # datagrams, as TCP's initial window (RFC 6928)
MIN_WINDOW = 2
MIN_ROUND_TRIP = 0.0001  # seconds: the shortest round trip the pacing counts with
# the round trip assumed until one is measured (TCP Prague's reference RTT): the first
# window is paced over it rather than sent at once, which a 1 ms step would mark at once
INITIAL_ROUND_TRIP = 0.025
PACING_GAIN = (2.0, 1.25)  # the pace, as a multiple of window / round trip: start, after
SILENCE_SECONDS = 0.2  # no feedback for this long or three round trips: a lost window
FEEDBACK_BYTES = 256
# HyStart++ (RFC 9406) ends the start once a round's least round trip exceeds the least seen
# by an eighth of it, kept within these bounds, judged on at least this many samples
DELAY_MARGIN = (0.004, 0.016)
DELAY_SAMPLES = 4
WAIT_SECONDS = 0.005  # the longest a sender waits for feedback before looking again


class ScalableWindow:
    """A sender's window (datagrams of `size` bytes) and pace (bits/s, below `ceiling`)."""

    def __init__(self, size: int, ceiling: float) -> None:
        self.bits = size * 8
        self.ceiling = ceiling or MAX_RATE
        self.window = float(INITIAL_WINDOW)
        self.alpha = 1.0
        self.starting = True
        self.round_trip: float | None = None  # smoothed, seconds
        self.acked = 0  # the highest datagram number the receiver has seen
        self.window_end = 0  # a round trip ends when feedback covers this datagram number
        self.counted = (0, 0, 0)  # received, CE-marked, highest: at the round's start
        self.received = 0  # at the last feedback
        self.heard = 0.0  # when feedback last came
        self.cuts = 0  # round trips that cut the window (marks or loss)
        self.least_round_trip = float("inf")  # the least sample seen
        self.round_least = float("inf")  # the least sample of this round trip
        self.round_samples = 0

    @property
    def rate(self) -> float:
        """The pace: the window over the round trip, a little faster so that the window,
        not the pace, limits it."""
        gain = PACING_GAIN[0] if self.starting else PACING_GAIN[1]
        return min(self.ceiling, gain * self.window * self.bits /
                   max(self.round_trip or INITIAL_ROUND_TRIP, MIN_ROUND_TRIP))

    def may_send(self, sent: int) -> bool:
        return sent - self.acked < self.window

    def feedback(self, received: int, marked: int, highest: int, sample: float | None,
                 sent: int, now: float) -> None:
        """What the receiver counted so far; `sample`: a round trip measured by it (None:
        none); `sent`: the highest number sent; `now`: seconds, any monotonic clock."""
        self.heard = now
        if sample is not None and sample >= 0:
            self.round_trip = sample if self.round_trip is None else \
                self.round_trip * 7 / 8 + sample / 8
            self.round_least = min(self.round_least, sample)
            self.round_samples += 1
        self.acked = max(self.acked, highest)
        before_received, before_marked, before_highest = self.counted
        # the start ends at its first mark or loss, at once (as TCP's slow start ends at its
        # first ECE or duplicate acknowledgements), not a round trip of growth later
        news = marked > before_marked or highest - received > before_highest - before_received
        # a window the sender does not fill does not grow (as Linux's tcp_is_cwnd_limited):
        # a sender held back by its own host would otherwise grow it without bound
        limited = sent - highest >= self.window / 2
        if self.starting and not news and limited:
            self.window += max(0, received - self.received)  # a datagram per datagram
        self.received = max(self.received, received)
        if highest < self.window_end and not (self.starting and news):
            return
        arrived = received - before_received
        fresh_marks = marked - before_marked
        if arrived > 0:
            self.alpha += GAIN * (fresh_marks / arrived - self.alpha)
        if (highest - before_highest) - arrived > 0:
            self._cut(0.5)  # a loss
        elif fresh_marks > 0:
            self._cut(1 - self.alpha / 2)
        elif self.starting and self._delay_grown():
            self.starting = False  # the window stays: the queue has begun to fill
        elif not self.starting and limited:
            self.window += 1
        self.window = min(self.window, self._largest())
        self.least_round_trip = min(self.least_round_trip, self.round_least)
        self.round_least, self.round_samples = float("inf"), 0
        self.counted = (received, marked, highest)
        self.window_end = sent + 1

    def _delay_grown(self) -> bool:
        """This round trip's least delay exceeds the least before it by HyStart++'s
        margin."""
        least = self.least_round_trip
        margin = min(max(least / 8, DELAY_MARGIN[0]), DELAY_MARGIN[1])
        return self.round_samples >= DELAY_SAMPLES and self.round_least >= least + margin

    def _largest(self) -> float:
        """Twice what the ceiling carries in a round trip: no use growing past it."""
        if self.round_trip is None or self.ceiling >= MAX_RATE:
            return float("inf")
        return max(float(INITIAL_WINDOW),
                   2 * self.ceiling * max(self.round_trip, MIN_ROUND_TRIP) / self.bits)

    def _cut(self, factor: float) -> None:
        self.starting = False
        self.cuts += 1
        self.window = max(float(MIN_WINDOW), self.window * factor)

    def silence(self, now: float, sent: int) -> None:
        """No feedback for a while: the window is taken as lost (halved, and nothing counted
        in flight), as a retransmission timeout takes TCP's."""
        quiet = max(SILENCE_SECONDS, 3 * (self.round_trip or 0.0))
        if now - self.heard >= quiet and sent > self.acked:
            self.heard = now
            self.acked = sent
            self._cut(0.5)


def mark_ect1(sock: socket.socket, tos: int) -> None:
    """Every datagram leaves with ECT(1) in the ECN bits, the DSCP of -S/--dscp kept."""
    tcp.set_tos(sock, ecn.with_field(tos, ecn.ECT1))


# The ECN field arrives with each read: IPv4's TOS byte (also on an IPv6 socket carrying
# IPv4), or IPv6's traffic class (an int).
TOS_ANCILLARY = {(socket.IPPROTO_IP, socket.IP_TOS), (socket.IPPROTO_IPV6, socket.IPV6_TCLASS)}


def ask_for_ecn(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    if sock.family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVTCLASS, 1)


def ecn_of(ancillary: list) -> int:
    for level, kind, data in ancillary:
        if (level, kind) in TOS_ANCILLARY and data:
            value = data[0] if level == socket.IPPROTO_IP else \
                int.from_bytes(data[:4], sys.byteorder)
            return ecn.of(value)
    return 0


def send(stream: Stream, spec: TestSpec, start: float, deadline: float | None,
         stop: threading.Event) -> None:
    """One datagram at a time, while the window allows, at its pace."""
    sock = stream.sock
    mark_ect1(sock, spec.tos)
    size = spec.length
    buffer = aligned(size, spec.repeating_payload)
    stamp = stamping.stamper(stream.header, size, stream.key)
    control = ScalableWindow(size, spec.rate)
    clock, wall = time.monotonic, time.time
    wait_until(start, stop)
    stream.first = control.heard = next_send = clock()
    number = 0
    feedback = bytearray(FEEDBACK_BYTES)
    while not stop.is_set():
        now = clock()
        if deadline is not None and now >= deadline:
            break
        if spec.num_bytes is not None and stream.num_bytes >= spec.num_bytes:
            break
        _read_feedback(sock, feedback, stream.key, control, number, now, wall())
        control.silence(now, number)
        open_window = control.may_send(number)
        if not open_window or now < next_send:
            wait = next_send - now if open_window else WAIT_SECONDS
            select.select([sock], [], [], min(wait, WAIT_SECONDS))
            continue
        now_wall = wall()
        seconds = int(now_wall)
        stamp(buffer, 1, seconds, int((now_wall - seconds) * 1e6), number + 1)
        try:
            sock.send(buffer)
        except BlockingIOError:
            continue
        except ConnectionRefusedError:
            raise SimpleperfError(udp.PORT_CLOSED) from None
        number += 1
        gap = control.bits / control.rate
        next_send = max(next_send, now - gap) + gap  # late: one datagram early, no burst
        stream.packets_sent = number
        stream.num_bytes = number * size
    stream.last = clock()


def _read_feedback(sock: socket.socket, data: bytearray, key: bytes | None,
                   control: ScalableWindow, sent: int, now: float, now_wall: float) -> None:
    """Every feedback datagram waiting, given to the response (others are ignored)."""
    while True:
        try:
            count = sock.recv_into(data, FEEDBACK_BYTES, socket.MSG_DONTWAIT)
        except (BlockingIOError, ConnectionRefusedError):
            return
        if count < L4S_FEEDBACK.size:
            continue
        magic, received, marked, highest, seconds, micros = L4S_FEEDBACK.unpack_from(data)
        end = L4S_FEEDBACK.size
        if magic != L4S_FEEDBACK_MAGIC or \
                (key is not None and bytes(data[end:end + len(key)]) != key):
            continue
        sample = now_wall - (seconds + micros * 1e-6) if seconds else None
        control.feedback(received, marked, highest, sample, sent, now)


def receive(stream: Stream, stop: threading.Event) -> None:
    """Every datagram accounted as usual (a key checked with a shared secret), its ECN field
    read (IP_RECVTOS), and feedback sent back at most every L4S_FEEDBACK_SECONDS, and at
    the latest that long after a datagram (a sender whose window is full waits for it)."""
    account = stream.account = UdpReceiveAccount(stream.delays)
    sock = stream.sock
    ask_for_ecn(sock)
    space = udp.ANCILLARY_SPACE + 2 * socket.CMSG_SPACE(4)
    buffer = aligned(udp.MAX_GSO_BYTES + 65536)
    header, key = stream.header, stream.key
    clock = time.monotonic
    received = datagrams = marked = 0
    stream.ce_marked = 0
    newest = (0, 0)
    told = 0.0
    untold = False
    while not stop.is_set():
        if untold:
            wait = told + L4S_FEEDBACK_SECONDS - clock()
            if wait <= 0 or not select.select([sock], [], [], wait)[0]:
                told, untold = clock(), False
                _tell(sock, datagrams, marked, account.highest, newest, key)
                continue
        try:
            count, ancillary, _, _ = sock.recvmsg_into([buffer], space)
        except (BlockingIOError, ConnectionRefusedError):
            continue
        segment, arrival, drops = udp.read_ancillary(ancillary, count)
        packets, moved = udp_receive.datagrams_of(account, buffer, count,
                                                  max(1, min(segment, count)), header, key,
                                                  arrival)
        lost_before = account.host_gap_begins(drops)
        account.feed_packets(packets)
        account.host_gap_ends(lost_before)
        datagrams += len(packets)
        if ecn_of(ancillary) == ecn.CE:
            marked += len(packets)
            stream.ce_marked = marked
        if packets:
            received += moved
            udp_receive.progress(stream, received, clock)
            sent_at = packets[-1][1]  # the newest's send time, echoed as an RTT sample
            newest = (int(sent_at), int((sent_at - int(sent_at)) * 1e6))
            now = clock()
            untold = True
            if now - told >= L4S_FEEDBACK_SECONDS:
                told, untold = now, False
                _tell(sock, datagrams, marked, account.highest, newest, key)


def _tell(sock: socket.socket, received: int, marked: int, highest: int,
          newest: tuple[int, int], key: bytes | None) -> None:
    message = L4S_FEEDBACK.pack(L4S_FEEDBACK_MAGIC, received, marked, highest, *newest)
    with contextlib.suppress(OSError):  # advisory: a sender that hears none halves its window
        sock.send(message + (key or b""))
