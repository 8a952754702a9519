"""DiffServ classes as a router's queueing policy sets them (Cisco's LLQ with CBWFQ; the
classes of RFC 4594; their table: model/diffserv.py): packets are sorted by their DSCP;
expedited forwarding (EF, VA) goes first, strictly, but is policed to PRIORITY_SHARE of
the link so it cannot starve the rest (what exceeds its token bucket, PRIORITY_BURST
seconds of that rate, is dropped); the other classes share what is left by deficit round
robin in proportion to their weights (WEIGHTS, percentages of the link); each class is a
drop-tail queue of `limit` packets of its own (a router's per-class queue limit: bulk
traffic filling its class's queue cannot take the buffer from another class). An empty
class's share goes to the busy ones (work conserving)."""

from __future__ import annotations

from collections import deque

from ....model.diffserv import PRIORITY, PRIORITY_SHARE, WEIGHTS, class_of, priority_burst
from .base import MTU_BYTES, Discipline, Packet, Settings


class Classes(Discipline):
    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.limit = settings.limit
        rate = settings.rate or 1e9
        self.fill = PRIORITY_SHARE * rate / 8  # the policer's bytes per second
        self.burst = priority_burst(rate, MTU_BYTES)
        self.tokens = self.burst
        self.filled_at: float | None = None
        self.policed = 0  # priority packets dropped by the policer
        self.queues: dict[str, deque[Packet]] = {name: deque() for name in
                                                  (PRIORITY, *WEIGHTS)}
        smallest = min(WEIGHTS.values())
        self.quantum = {name: weight / smallest * MTU_BYTES for name, weight in WEIGHTS.items()}
        self.deficit = dict.fromkeys(WEIGHTS, 0.0)
        self.active: deque[str] = deque()  # classes with packets, in round-robin order

    def _police(self, packet: Packet, now: float) -> bool:
        """True when the priority class may take the packet (its bucket holds its size)."""
        if self.filled_at is not None:
            self.tokens = min(self.burst, self.tokens + (now - self.filled_at) * self.fill)
        self.filled_at = now
        if self.tokens < packet.size:
            return False
        self.tokens -= packet.size
        return True

    def enqueue(self, packet: Packet, now: float) -> list[Packet]:
        name = class_of(packet.dscp)
        queue = self.queues[name]
        if len(queue) >= self.limit or (name == PRIORITY and not self._police(packet, now)):
            self.drops += 1
            self.policed += name == PRIORITY and len(queue) < self.limit
            return [packet]
        if not queue and name != PRIORITY:
            self.active.append(name)
            self.deficit[name] = self.quantum[name]
        queue.append(packet)
        self.packets += 1
        self.bytes += packet.size
        return []

    def _take(self, name: str) -> Packet:
        packet = self.queues[name].popleft()
        self.packets -= 1
        self.bytes -= packet.size
        return packet

    def dequeue(self, now: float) -> tuple[Packet | None, list[Packet]]:
        if self.queues[PRIORITY]:
            return self._take(PRIORITY), []
        while self.active:
            name = self.active[0]
            queue = self.queues[name]
            if queue[0].size > self.deficit[name]:
                self.deficit[name] += self.quantum[name]
                self.active.rotate(-1)
                continue
            packet = self._take(name)
            self.deficit[name] -= packet.size
            if not queue:
                self.active.popleft()
                self.deficit[name] = 0.0
            return packet, []
        return None, []

    def drain(self) -> list[Packet]:
        held = sorted((p for queue in self.queues.values() for p in queue),
                      key=lambda p: (p.arrival, p.id))
        for queue in self.queues.values():
            queue.clear()
        self.active.clear()
        self.packets = self.bytes = 0
        return held


def make(settings: Settings) -> Discipline:
    return Classes(settings)
