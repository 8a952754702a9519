"""PIE (RFC 8033), as Linux's sch_pie runs it by default (the queue delay from each
packet's timestamp, not from a departure-rate estimate).

Every `tupdate` the drop probability moves by alpha x (delay - target) + beta x (delay -
last delay), both scaled down while the probability is small (auto-tuning), at most 2 % a
step once above 10 %, 2 % more when the delay passes 250 ms, decaying when the queue has
been empty two updates running. An arriving packet is dropped (or, with ECN and the
probability at most 10 %, marked) with that probability, de-randomised as the RFC says;
never during the burst allowance (150 ms after the queue was quiet), never while the delay
is under half the target and the probability under 20 %, never with under two frames
queued."""

from __future__ import annotations

import random

from ....model.disciplines import target_of
from .base import MTU_BYTES, Discipline, Packet, Settings
from .fifo import Fifo

TARGET = target_of("pie")  # seconds: the kernel's default (model/disciplines.py)
TUPDATE = 0.015
ALPHA = 0.125  # per second of delay error
BETA = 1.25
MAX_BURST = 0.150
ECN_MAX_PROBABILITY = 0.1  # mark instead of drop up to this probability
MAX_CATCH_UP = 1000  # updates replayed at once after an idle spell (the state is at rest)


class PieState:
    """PIE's control state over one queue (the whole qdisc, or one flow of FQ-PIE)."""

    __slots__ = ("target", "tupdate", "ecn", "prob", "qdelay", "qdelay_old", "burst_time",
                 "accu_prob", "dq_tstamp", "next_update", "rng")

    def __init__(self, target: float, tupdate: float, ecn: bool, rng: random.Random,
                 now: float = 0.0) -> None:
        self.target, self.tupdate, self.ecn, self.rng = target, tupdate, ecn, rng
        self.prob = 0.0
        self.qdelay = 0.0
        self.qdelay_old = 0.0
        self.burst_time = MAX_BURST
        self.accu_prob = 0.0
        self.dq_tstamp: float | None = None
        self.next_update = now + tupdate

    @property
    def at_rest(self) -> bool:
        """An update would leave this state as it is (a flow queue nobody used lately)."""
        return (self.prob == 0.0 and self.qdelay == 0.0 and self.qdelay_old == 0.0
                and self.burst_time == MAX_BURST and self.dq_tstamp is None)

    def catch_up(self, now: float, backlog: int) -> None:
        """The updates the kernel's timer would have made by `now`."""
        if now < self.next_update:
            return
        steps = int((now - self.next_update) / self.tupdate) + 1
        for _ in range(min(steps, MAX_CATCH_UP)):
            self.update(backlog)
        self.next_update += steps * self.tupdate

    def update(self, backlog: int) -> None:
        """One period's probability (pie_calculate_probability)."""
        qdelay, qdelay_old = self.qdelay, self.qdelay_old
        moves = not (qdelay == 0.0 and backlog != 0)  # tiny backlog: leave it this round
        alpha, beta = ALPHA, BETA
        if self.prob < 0.1:
            alpha, beta = alpha / 2, beta / 2
            power = 100
            while self.prob < 1 / power and power <= 1_000_000:
                alpha, beta = alpha / 4, beta / 4
                power *= 10
        delta = (qdelay - self.target) * alpha + (qdelay - qdelay_old) * beta
        if delta > 0.02 and self.prob >= 0.1:
            delta = 0.02  # at most 2 % a step
        if qdelay > 0.250:
            delta += 0.02
        prob = self.prob + delta
        if prob > 1.0:
            prob, moves = 1.0, False
        self.prob = max(prob, 0.0)
        if qdelay == 0.0 and qdelay_old == 0.0 and moves:
            self.prob -= self.prob / 64
        self.qdelay = qdelay
        if qdelay < self.target / 2 and qdelay_old < self.target / 2 and self.prob == 0.0:
            self.burst_time, self.dq_tstamp, self.accu_prob = MAX_BURST, None, 0.0
        self.qdelay_old = qdelay

    def drop_early(self, backlog: int) -> bool:
        """Should an arriving packet go (pie_drop_early); backlog: bytes queued."""
        if self.burst_time > 0:
            return False
        if self.qdelay < self.target / 2 and self.prob < 0.2:
            return False
        if backlog < 2 * MTU_BYTES:
            return False
        if self.prob == 0.0:
            self.accu_prob = 0.0
        else:
            self.accu_prob += self.prob
        if self.accu_prob < 0.85:
            return False
        if self.accu_prob >= 8.5:
            return True
        if self.rng.random() < self.prob:
            self.accu_prob = 0.0
            return True
        return False

    def admit(self, packet: Packet, backlog: int) -> bool:
        """True: queue the packet (perhaps marked); False: drop it."""
        if not self.drop_early(backlog):
            return True
        if self.ecn and self.prob <= ECN_MAX_PROBABILITY and packet.mark():
            return True
        self.accu_prob = 0.0
        return False

    def left(self, packet: Packet, now: float, emptied: bool) -> None:
        """A packet left the queue (pie_process_dequeue): its sojourn is the delay."""
        self.qdelay = 0.0 if emptied else now - packet.arrival
        gap = 0.0 if self.dq_tstamp is None else now - self.dq_tstamp
        self.dq_tstamp = now
        if gap > 0 and self.burst_time > 0:
            self.burst_time = max(0.0, self.burst_time - gap)


class Pie(Fifo):
    """sch_pie below the lab's rate (a tbf): the tbf takes the next frame out as soon as
    the one before has gone and holds it, peeked, until its tokens come, and sch_pie's
    backlog still counts it. So the backlog PIE judges by (its two-frame floor for early
    drops, its updates) is what waits and the frame on the wire; at 2 Mbit/s, where the
    15 ms target is two and a half frames, that frame decides many early drops."""

    def __init__(self, settings: Settings, rng: random.Random | None = None) -> None:
        super().__init__(settings.limit)
        self.state = PieState(settings.target or TARGET, settings.tupdate or TUPDATE,
                              settings.ecn, rng or random.Random())
        self._on_wire = (0, 0.0)  # the frame on the wire: its bytes, and until when

    def sending(self, size: int, until: float) -> None:
        self._on_wire = (size, until)

    def backlog(self, now: float) -> int:
        size, until = self._on_wire
        return self.bytes + (size if now < until else 0)

    def enqueue(self, packet: Packet, now: float) -> list[Packet]:
        backlog = self.backlog(now)
        self.state.catch_up(now, backlog)
        if self.full:  # the kernel's limit, before the early drop; it resets the count too
            self.state.accu_prob = 0.0
            self.drops += 1
            return [packet]
        if not self.state.admit(packet, backlog):
            self.drops += 1
            return [packet]
        if packet.marked:
            self.marks += 1
        self._admit(packet)
        return []

    def dequeue(self, now: float) -> tuple[Packet | None, list[Packet]]:
        self.state.catch_up(now, self.backlog(now))
        packet = self._take()
        if packet is not None:
            self.state.left(packet, now, not self.queue)
        return packet, []


def make(settings: Settings) -> Discipline:
    return Pie(settings)
