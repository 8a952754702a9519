"""CoDel (RFC 8289), as Linux's codel_impl.h runs it.

A packet's sojourn time is measured when it leaves. Once sojourn times have stayed at or
above `target` for a whole `interval` (and more than one frame waits), CoDel drops (or, with
ECN, marks) one packet and enters the dropping state, where the next drop comes
interval / sqrt(count) later, until a sojourn time falls below the target. Re-entering soon
after leaving resumes near the previous rate (count = the drops of the last cycle)."""

from __future__ import annotations

import math
from collections.abc import Callable

from ....model.disciplines import target_of
from .base import MTU_BYTES, Discipline, Packet, Settings
from .fifo import Fifo

TARGET = target_of("codel")  # seconds: the kernel's default (model/disciplines.py)
INTERVAL = 0.100


class CodelState:
    """CoDel's control state over one queue (the whole qdisc, or one flow of FQ-CoDel)."""

    __slots__ = ("target", "interval", "ecn", "first_above_time", "drop_next", "count",
                 "lastcount", "dropping")

    def __init__(self, target: float, interval: float, ecn: bool) -> None:
        self.target, self.interval, self.ecn = target, interval, ecn
        self.first_above_time = 0.0  # 0: sojourn below target (or not yet above long)
        self.drop_next = 0.0
        self.count = 0
        self.lastcount = 0
        self.dropping = False

    def _should_drop(self, packet: Packet | None, now: float, backlog: int) -> bool:
        """backlog: bytes still queued after `packet` left."""
        if packet is None:
            self.first_above_time = 0.0
            return False
        if now - packet.arrival < self.target or backlog <= MTU_BYTES:
            self.first_above_time = 0.0  # went below: stay below for at least an interval
            return False
        if self.first_above_time == 0.0:
            self.first_above_time = now + self.interval
            return False
        return now > self.first_above_time

    def _control_law(self, t: float) -> float:
        return t + self.interval / math.sqrt(self.count)

    def dequeue(self, take: Callable[[], Packet | None], backlog: Callable[[], int],
                now: float) -> tuple[Packet | None, list[Packet]]:
        """The packet to send from the queue `take` pops (None: empty), and those dropped
        before it; `backlog()`: the bytes queued now."""
        dropped: list[Packet] = []
        packet = take()
        if packet is None:
            self.dropping = False
            return None, dropped
        drop = self._should_drop(packet, now, backlog())
        if self.dropping:
            if not drop:
                self.dropping = False
            while self.dropping and now >= self.drop_next:
                assert packet is not None
                self.count += 1
                if self.ecn and packet.mark():
                    self.drop_next = self._control_law(self.drop_next)
                    return packet, dropped
                dropped.append(packet)
                packet = take()
                if not self._should_drop(packet, now, backlog()):
                    self.dropping = False  # leave the dropping state
                else:
                    self.drop_next = self._control_law(self.drop_next)
        elif drop:
            if not (self.ecn and packet.mark()):
                dropped.append(packet)
                packet = take()
                self._should_drop(packet, now, backlog())
            self.dropping = True
            delta = self.count - self.lastcount
            # Re-entering soon after leaving: resume near the rate that controlled the queue.
            self.count = delta if delta > 1 and now - self.drop_next < 16 * self.interval else 1
            self.lastcount = self.count
            self.drop_next = self._control_law(now)
        return packet, dropped


class Codel(Fifo):
    def __init__(self, settings: Settings) -> None:
        super().__init__(settings.limit)
        self.state = CodelState(settings.target or TARGET, settings.interval or INTERVAL,
                                settings.ecn)

    def dequeue(self, now: float) -> tuple[Packet | None, list[Packet]]:
        packet, dropped = self.state.dequeue(self._take, lambda: self.bytes, now)
        self.drops += len(dropped)
        if packet is not None and packet.marked:
            self.marks += 1
        return packet, dropped


def make(settings: Settings) -> Discipline:
    return Codel(settings)
