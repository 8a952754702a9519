"""Drop-tail: first in, first out, and a packet that finds the queue full is dropped. The
queue CoDel and PIE run over (they judge packets as this queue takes and gives them)."""

from __future__ import annotations

from collections import deque

from .base import Discipline, Packet, Settings


class Fifo(Discipline):
    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.queue: deque[Packet] = deque()

    @property
    def full(self) -> bool:
        return self.packets >= self.limit

    def _admit(self, packet: Packet) -> None:
        self.queue.append(packet)
        self.packets += 1
        self.bytes += packet.size

    def _take(self) -> Packet | None:
        if not self.queue:
            return None
        packet = self.queue.popleft()
        self.packets -= 1
        self.bytes -= packet.size
        return packet

    def enqueue(self, packet: Packet, now: float) -> list[Packet]:
        if self.full:
            self.drops += 1
            return [packet]
        self._admit(packet)
        return []

    def dequeue(self, now: float) -> tuple[Packet | None, list[Packet]]:
        return self._take(), []

    def drain(self) -> list[Packet]:
        held = list(self.queue)
        self.queue.clear()
        self.packets = self.bytes = 0
        return held


def make(settings: Settings) -> Discipline:
    return Fifo(settings.limit)
