"""A link direction's bottleneck, run by the delay line when the lab's own discipline holds
its queue: packets wait in the discipline, the wire sends one at a time at the link's rate
(a frame of `size` bytes takes size x 8 / rate), and each then travels the link's delay
(jitter kept in order, as the own shaper's delay line keeps it).

A discrete-event simulation driven by the real clock: arrivals come with the kernel's
stamps, and the wire's departures are decided at their own moments (`free_at`), whenever
the caller gets round to it, so a late wake-up changes when a verdict is given, never what
the discipline saw. Sans-IO: the caller reads packets and gives verdicts."""

from __future__ import annotations

import random
from collections import deque

from .aqm import Discipline, Packet


class Bottleneck:
    def __init__(self, rate: float, discipline: Discipline, delay: float = 0.0,
                 jitter: float = 0.0, rng: random.Random | None = None) -> None:
        self.rate = rate  # bits/s
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
        discipline = self.discipline
        while self.free_at <= moment and discipline.packets:
            packet, dropped = discipline.dequeue(self.free_at)
            if dropped:
                self.dropped += dropped
            if packet is None:
                break
            self.free_at += packet.size * 8 / self.rate
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
            times.append(self.free_at + (self.delay if not self.jitter else 0.0))
        return min(times) if times else None


ETHERNET_HEADER = 14  # a frame's bytes beyond its IP packet, as the wire's rate counts them
FLOW_PORTS = (6, 17, 132)  # TCP, UDP, SCTP: ports after the IP header
ICMP = 1


def packet_of(packet_id: int, arrival: float, length: int, header: bytes) -> Packet:
    """A queued IPv4 packet from its first bytes: frame size, ECN field, and flow key (the
    addresses and protocol, and the ports, or an ICMP echo's identifier)."""
    if len(header) < 20:  # only metadata (the queue was just switched): a full frame
        return Packet(packet_id, arrival)
    start = (header[0] & 0x0F) * 4
    protocol = header[9]
    key = header[9:10] + header[12:20]
    if protocol in FLOW_PORTS:
        key += header[start:start + 4]
    elif protocol == ICMP and header[start:start + 1] in (b"\x00", b"\x08"):
        key += header[start + 4:start + 6]
    return Packet(packet_id, arrival, length + ETHERNET_HEADER, hash(key), header[1] & 0x03)
