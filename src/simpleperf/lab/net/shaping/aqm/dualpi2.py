"""DualPI2 (RFC 9332, the DualQ Coupled AQM), as the L4S team's Linux sch_dualpi2 runs it by
default.

Two queues share the buffer (`limit` packets together): L4S packets (ECT(1) and CE, or every
ECN-capable packet with `any_ect`) wait in the low-latency queue L, all others in the
classic queue C. One PI controller sets a base probability p' every `tupdate` from the
larger of the two queues' head sojourn times: p' += alpha x (delay - target) + beta x (delay
- last delay). The classic queue drops (or marks ECN-capable packets) with p'^2, which a
classic TCP's 1/sqrt(p) response turns into a rate that matches a scalable one's 1/p to
k x p' (the coupling): L packets are marked with probability k x p', and besides that every
L packet that waited longer than the `step` threshold (while L held more than one packet)
is marked by the native L4S AQM, so a scalable flow keeps L near 1 ms. On overload (k x p'
above 1) L packets are dropped as classic ones, to keep the delay.

The scheduler gives L priority with a weighted credit protecting C (c_protection: 10 % of
the link when both queues are backlogged). Drops and marks are decided as packets leave,
never with under two frames queued. Left out: the kernel's option to drop on arrival
(drop_early), a step threshold in packets, splitting GSO aggregates (the delay line sees
single packets)."""

from __future__ import annotations

import random
from collections import deque

from ..... import ecn
from ....model.disciplines import target_of
from .base import MTU_BYTES, Discipline, Packet, Settings
from .fifo import Fifo

TARGET = target_of("dualpi2")  # seconds: the kernel's default (model/disciplines.py)
TUPDATE = 0.016
STEP = 0.001  # the L queue's marking threshold
COUPLING = 2  # k: window fairness for equal RTTs
ALPHA = 0.16  # per second of delay error, per update
BETA = 3.2
C_PROTECTION = 10  # percent of the link the classic queue keeps when both are busy
MAX_CATCH_UP = 1000  # updates replayed at once after an idle spell
L4S_ECT1, L4S_ANY_ECT = ecn.ECT1, ecn.MASK  # ECN-field masks: what goes into the L queue


class DualPi2(Discipline):
    def __init__(self, settings: Settings, rng: random.Random | None = None) -> None:
        super().__init__()
        self.limit = settings.limit
        self.target = settings.target or TARGET
        self.tupdate = settings.tupdate or TUPDATE
        self.step = settings.step or STEP
        self.coupling = settings.coupling or COUPLING
        self.mask = L4S_ANY_ECT if settings.any_ect else L4S_ECT1
        self.rng = rng or random.Random()
        self.low, self.classic = Fifo(self.limit), Fifo(self.limit)
        self.steps: deque[bool] = deque()  # per L packet: was L building up when it came?
        self.wc, self.wl = C_PROTECTION, 100 - C_PROTECTION
        self.initial_credit = MTU_BYTES * (self.wc - self.wl)  # negative: L goes first
        self.credit = self.initial_credit
        self.prob = 0.0  # p', the base probability
        self.qdelay = 0.0
        self.next_update = self.tupdate
        self.step_marks = 0

    def is_l4s(self, packet: Packet) -> bool:
        return bool(packet.ecn & self.mask)

    # The PI controller (calculate_probability, on the kernel's timer)

    def _catch_up(self, now: float) -> None:
        if now < self.next_update:
            return
        steps = int((now - self.next_update) / self.tupdate) + 1
        for index in range(min(steps, MAX_CATCH_UP)):
            if self.prob == 0.0 and self.qdelay == 0.0 and not self.packets:
                break  # at rest: further updates change nothing
            self._update(self.next_update + index * self.tupdate)
        self.next_update += steps * self.tupdate

    def _update(self, at: float) -> None:
        """The queues are as they were at `at` (nothing happened since the last event)."""
        qdelay = max(self._sojourn(self.low, at), self._sojourn(self.classic, at))
        delta = ALPHA * (qdelay - self.target) + BETA * (qdelay - self.qdelay)
        self.prob = min(max(self.prob + delta, 0.0), 1.0)
        self.qdelay = qdelay

    @staticmethod
    def _sojourn(queue: Fifo, at: float) -> float:
        return max(0.0, at - queue.queue[0].arrival) if queue.queue else 0.0

    # Arrivals and departures

    def enqueue(self, packet: Packet, now: float) -> list[Packet]:
        self._catch_up(now)
        if self.packets >= self.limit:
            self.drops += 1
            return [packet]
        if self.is_l4s(packet):
            self.steps.append(self.low.packets > 1)  # only once a queue is building up
            self.low._admit(packet)
        else:
            self.classic._admit(packet)
        self.packets += 1
        self.bytes += packet.size
        return []

    def _pick(self) -> tuple[Packet | None, bool, int]:
        """The next packet by the credit scheduler: (packet, from L, credit change)."""
        backlog_c, backlog_l = self.classic.packets, self.low.packets
        if backlog_l and (not backlog_c or self.credit <= 0):
            packet = self.low._take()
            assert packet is not None
            return packet, True, self.wc * packet.size if backlog_c else 0
        if backlog_c:
            packet = self.classic._take()
            assert packet is not None
            return packet, False, -self.wl * packet.size if backlog_l else 0
        self.credit = self.initial_credit
        return None, False, 0

    def dequeue(self, now: float) -> tuple[Packet | None, list[Packet]]:
        self._catch_up(now)
        dropped: list[Packet] = []
        while True:
            packet, low, change = self._pick()
            if packet is None:
                return None, dropped
            step_ok = self.steps.popleft() if low else False
            self.packets -= 1
            self.bytes -= packet.size
            if self._must_drop(packet, low):
                self.drops += 1
                dropped.append(packet)
                continue
            if low and step_ok and now - packet.arrival > self.step:
                self.step_marks += 1
                self._mark(packet)
            self.credit += change
            return packet, dropped

    def _roll(self, probability: float) -> bool:
        return self.rng.random() < probability

    def _squared_roll(self) -> bool:
        """True with probability p'^2: two rolls, as the kernel makes them."""
        return self._roll(self.prob) and self._roll(self.prob)

    def _mark(self, packet: Packet) -> None:
        if not packet.marked and packet.mark():
            self.marks += 1

    def _must_drop(self, packet: Packet, low: bool) -> bool:
        """The coupled verdict (must_drop): marks as a side effect; True: drop."""
        if self.bytes < 2 * MTU_BYTES:
            return False
        coupled = self.prob * self.coupling
        overloaded = coupled > 1.0
        if low:
            if overloaded:
                if self._squared_roll():
                    return True  # overload: a classic drop keeps L's delay
                self._mark(packet)
            elif self._roll(coupled):
                self._mark(packet)
            return False
        if self._squared_roll():
            if packet.ecn_capable and not overloaded:
                self._mark(packet)
                return False
            return True
        return False

    def drain(self) -> list[Packet]:
        held = sorted(self.low.drain() + self.classic.drain(), key=lambda p: (p.arrival, p.id))
        self.steps.clear()
        self.packets = self.bytes = 0
        return held


def make(settings: Settings) -> Discipline:
    return DualPi2(settings)
