"""A link direction's bottleneck, run by the delay line when the lab's own discipline holds
its queue: packets wait in the discipline, the wire sends one at a time, at the link's rate
(a frame of `size` bytes takes size x 8 / rate: `Wire`) or at a trace's delivery
opportunities (`TraceWire`, Mahimahi's), and each then travels the link's delay (jitter
kept in order, as the own shaper's delay line keeps it).

A discrete-event simulation driven by the real clock: arrivals come with the kernel's
stamps, and the wire's departures are decided at their own moments (`free_at`), whenever
the caller gets round to it, so a late wake-up changes when a verdict is given, never what
the discipline saw. Sans-IO: the caller reads packets and gives verdicts."""

from __future__ import annotations

import bisect
import random
from collections import deque

from .... import ecn
from ...model.traces import PACKET_BYTES, Trace
from .aqm import Discipline, Packet

ETHERNET_HEADER = 14  # a frame's bytes beyond its IP packet, as the wire's rate counts them
FLOW_PORTS = (6, 17, 132)  # TCP, UDP, SCTP: ports after the IP header
ICMP = 1


class Wire:
    """A constant rate: a packet leaves as soon as the wire is free, and takes its size."""

    def __init__(self, rate: float) -> None:
        self.rate = rate  # bits/s

    def next_start(self, free_at: float) -> float:
        """When the next packet can leave the queue, the wire being free from `free_at`."""
        return free_at

    def send(self, start: float, size: int) -> float:
        """When a frame of `size` bytes that leaves the queue at `start` has been sent."""
        return start + size * 8 / self.rate


class TraceWire:
    """A trace's schedule from `epoch` on (seconds): a packet leaves the queue at a delivery
    opportunity and is sent once opportunities have carried all its bytes; several small
    packets share one (Mahimahi's LinkQueue). Sizes are IP packets', as Mahimahi counts."""

    def __init__(self, trace: Trace, epoch: float) -> None:
        self.moments = trace.opportunities
        self.period = trace.period_ms
        self.epoch = epoch
        self.rate = trace.mean_rate
        self.index = -1  # the opportunity in use: loop * len + position; -1: none yet
        self.left = 0  # its bytes not used yet

    def _moment(self, index: int) -> float:
        loop, position = divmod(index, len(self.moments))
        return self.epoch + (loop * self.period + self.moments[position]) / 1000

    def _first_at(self, when: float) -> int:
        """The first opportunity at or after `when` (a nanosecond's rounding forgiven: the
        moment of an opportunity, turned back into milliseconds, is that opportunity's)."""
        since = max(0.0, (when - self.epoch) * 1000 - 1e-6)
        loop = int(since // self.period)
        position = bisect.bisect_left(self.moments, since - loop * self.period)
        return loop * len(self.moments) + position

    def _usable(self, when: float) -> int:
        """The opportunity a packet ready at `when` can use: what is left of the one in use,
        if it is not past, else the next one not used yet."""
        if self.left and self.index >= 0 and self._moment(self.index) >= when:
            return self.index
        return max(self._first_at(when), self.index + 1)

    def next_start(self, free_at: float) -> float:
        return self._moment(self._usable(free_at))

    def send(self, start: float, size: int) -> float:
        usable = self._usable(start)
        if usable != self.index:
            self.index, self.left = usable, PACKET_BYTES
        remaining = max(1, size - ETHERNET_HEADER)
        while True:
            used = min(self.left, remaining)
            self.left -= used
            remaining -= used
            if not remaining:
                return self._moment(self.index)
            self.index, self.left = self.index + 1, PACKET_BYTES


class Bottleneck:
    def __init__(self, rate: float, discipline: Discipline, delay: float = 0.0,
                 jitter: float = 0.0, rng: random.Random | None = None,
                 wire: Wire | TraceWire | None = None) -> None:
        self.wire = wire or Wire(rate)
        self.discipline = discipline
        self.delay, self.jitter = delay, jitter
        self.rng = rng or random.Random()
        self.free_at = 0.0  # when the wire has sent what it holds
        self.last_release = 0.0
        self.dropped: list[Packet] = []  # dropped since the caller last took them
        self.sent: deque[tuple[float, Packet]] = deque()  # (release time, packet), in order

    def arrive(self, packets: list[Packet]) -> None:
        """Packets read from the queue, in arrival order (their stamps not decreasing)."""
        for packet in packets:
            self.run_until(packet.arrival)
            if self.discipline.packets == 0 and self.free_at < packet.arrival:
                self.free_at = packet.arrival  # an idle wire starts on it at once
            self.dropped += self.discipline.enqueue(packet, packet.arrival)

    def run_until(self, moment: float) -> None:
        """Every departure the wire makes by `moment` (all arrivals before it are known)."""
        discipline, wire = self.discipline, self.wire
        while discipline.packets:
            start = wire.next_start(self.free_at)
            if start > moment:
                break
            packet, dropped = discipline.dequeue(start)
            if dropped:
                self.dropped += dropped
            if packet is None:
                break
            self.free_at = wire.send(start, packet.size)
            discipline.sending(packet.size, self.free_at)
            wait = self.delay if not self.jitter else max(
                0.0, self.rng.gauss(self.delay, self.jitter))
            release = max(self.free_at + wait, self.last_release)
            self.last_release = release
            self.sent.append((release, packet))

    def due(self, now: float) -> list[Packet]:
        """The packets whose release time has come, in the order they left."""
        self.run_until(now)
        released = []
        sent = self.sent
        while sent and sent[0][0] <= now:
            released.append(sent.popleft()[1])
        return released

    def take_dropped(self) -> list[Packet]:
        dropped, self.dropped = self.dropped, []
        return dropped

    def next_event(self) -> float | None:
        """When something can next fall due: the first sent packet's release, or the wire's
        next departure's earliest release (its delay after the wire frees)."""
        times = []
        if self.sent:
            times.append(self.sent[0][0])
        if self.discipline.packets:
            times.append(self.wire.next_start(self.free_at)
                         + (self.delay if not self.jitter else 0.0))
        return min(times) if times else None


def packet_of(packet_id: int, arrival: float, length: int, header: bytes) -> Packet:
    """A queued IPv4 packet from its first bytes: frame size, ECN field, DSCP, flow key (the
    addresses and protocol, and the ports, or an ICMP echo's identifier) and host keys."""
    if len(header) < 20:  # only metadata (the queue was just switched): a full frame
        return Packet(packet_id, arrival)
    start = (header[0] & 0x0F) * 4
    protocol = header[9]
    key = header[9:10] + header[12:20]
    if protocol in FLOW_PORTS:
        key += header[start:start + 4]
    elif protocol == ICMP and header[start:start + 1] in (b"\x00", b"\x08"):
        key += header[start + 4:start + 6]
    return Packet(packet_id, arrival, length + ETHERNET_HEADER, hash(key), ecn.of(header[1]),
                  ecn.dscp_of(header[1]), hash(header[12:16]), hash(header[16:20]))
