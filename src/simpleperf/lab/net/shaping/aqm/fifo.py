"""Drop-tail: first in, first out, and a packet that finds the queue full is dropped."""

from __future__ import annotations

from collections import deque

from .base import Discipline, Packet, Settings


class Fifo(Discipline):
    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.queue: deque[Packet] = deque()

    def enqueue(self, packet: Packet, now: float) -> list[Packet]:
        if self.packets >= self.limit:
            self.drops += 1
            return [packet]
        self.queue.append(packet)
        self.packets += 1
        self.bytes += packet.size
        return []

    def dequeue(self, now: float) -> tuple[Packet | None, list[Packet]]:
        if not self.queue:
            return None, []
        packet = self.queue.popleft()
        self.packets -= 1
        self.bytes -= packet.size
        return packet, []

    def drain(self) -> list[Packet]:
        held = list(self.queue)
        self.queue.clear()
        self.packets = self.bytes = 0
        return held


def make(settings: Settings) -> Discipline:
    return Fifo(settings.limit)
