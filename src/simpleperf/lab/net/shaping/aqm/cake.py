"""CAKE (Common Applications Kept Enhanced), as Linux's sch_cake runs it by default with its
own shaper at the link's rate: diffserv3 tins, triple-isolate, COBALT in every flow queue.

- Tins: a packet's DSCP picks one of three (best effort; bulk: CS1 and LE; voice: EF, VA,
  CS6, CS7 and TOS4), each with a threshold rate (the link's, 1/16 of it, 1/4 of it). The
  tin sent next is the highest whose own clock, advanced by what it sent at its threshold
  rate, is not ahead of now (so a tin below its threshold has priority), else the one whose
  clock comes first. On a link without a fixed rate (a trace) the tins share by weighted
  deficit round robin instead (1024 : 64 : 256), as sch_cake does unshaped.
- Flows: 1024 queues a tin, a flow's hash placed set-associatively (8 ways) so that
  colliding flows rarely share a queue; DRR++ with new (sparse), old (bulk) and decaying
  lists, a flow's quantum divided by the number of bulk flows its source host, or its
  destination host, has (triple-isolate: hosts first, then flows).
- COBALT: CoDel (target 5 ms, interval 100 ms, raised where a frame takes longer) that marks
  ECN-capable packets and drops the others, with BLUE beside it: a queue that overflows
  raises a drop probability by 1/256, an empty queue lowers it by 1/4096, at most once a
  target.
- A full buffer (`limit` frames of bytes) drops from the head of the longest queue.

Left out: the ACK filter, NAT lookups, washing DSCPs, overhead and ATM compensation,
autorate, ingress mode and the other diffserv and isolation modes; square roots are exact
rather than the kernel's fixed-point Newton steps."""

from __future__ import annotations

import math
import random
from collections import deque

from ....model.diffserv import CAKE_TINS, cake_tin_of
from ....model.disciplines import target_of
from .base import MTU_BYTES, Discipline, Packet, Settings

TARGET = target_of("cake")  # seconds: the kernel's default (model/disciplines.py)
INTERVAL = 0.100  # its "rtt"
QUEUES = 1024
WAYS = 8
P_INC, P_DEC = 1 / 256, 1 / 4096  # BLUE
# diffserv3: (threshold as a fraction of the rate, DRR weight unshaped) by tin, and the tin
# of a DSCP, as theory reads them (model/diffserv.py)
TINS = tuple((share, weight) for _, share, weight, _ in CAKE_TINS)
BEST_EFFORT, BULK, VOICE = range(len(TINS))
tin_of = cake_tin_of
NONE, SPARSE, SPARSE_WAIT, BULK_SET, DECAYING = range(5)


class Cobalt:
    """CoDel and BLUE over one flow queue (sch_cake's cobalt_vars and their functions)."""

    __slots__ = ("target", "interval", "mtu_time", "count", "drop_next", "blue_timer",
                 "p_drop", "dropping")

    def __init__(self, target: float, interval: float, mtu_time: float) -> None:
        self.target, self.interval, self.mtu_time = target, interval, mtu_time
        self.count = 0
        self.drop_next = 0.0
        self.blue_timer = 0.0
        self.p_drop = 0.0
        self.dropping = False

    def _control(self, t: float) -> float:
        return t + self.interval / math.sqrt(max(1, self.count))

    @property
    def at_rest(self) -> bool:
        return not self.p_drop and not self.count

    def queue_full(self, now: float) -> None:
        if now - self.blue_timer > self.target:
            self.p_drop = min(1.0, self.p_drop + P_INC)
            self.blue_timer = now
        self.dropping = True
        self.drop_next = now
        self.count = self.count or 1

    def queue_empty(self, now: float) -> None:
        if self.p_drop and now - self.blue_timer > self.target:
            self.p_drop = max(0.0, self.p_drop - P_DEC)
            self.blue_timer = now
        self.dropping = False
        if self.count and now >= self.drop_next:
            self.count -= 1
            self.drop_next = self._control(self.drop_next)

    def should_drop(self, packet: Packet, now: float, rng: random.Random) -> bool:
        """Mark or drop this packet that just left its queue: True to drop it."""
        sojourn = now - packet.arrival
        schedule = now - self.drop_next
        over_target = sojourn > self.target and sojourn > self.mtu_time * 4
        next_due = bool(self.count) and schedule >= 0
        drop = False
        if over_target:
            if not self.dropping:
                self.dropping = True
                self.drop_next = self._control(now)
            self.count = self.count or 1
        elif self.dropping:
            self.dropping = False
        if next_due and self.dropping:
            drop = not packet.mark()
            self.count += 1
            self.drop_next = self._control(self.drop_next)
            schedule = now - self.drop_next
        else:
            while next_due:
                self.count -= 1
                self.drop_next = self._control(self.drop_next)
                schedule = now - self.drop_next
                next_due = bool(self.count) and schedule >= 0
        if self.p_drop and rng.random() < self.p_drop:
            drop = True
        if not self.count:
            self.drop_next = now + self.interval
        elif schedule > 0 and not drop:
            self.drop_next = now
        return drop


class Flow:
    __slots__ = ("queue", "bytes", "deficit", "set", "cobalt", "source", "destination")

    def __init__(self, cobalt: Cobalt) -> None:
        self.queue: deque[Packet] = deque()
        self.bytes = 0
        self.deficit = 0.0
        self.set = NONE
        self.cobalt = cobalt
        self.source = 0  # indexes into the tin's hosts
        self.destination = 0


class Tin:
    def __init__(self, rate: float | None, share: float, weight: int, target: float,
                 interval: float) -> None:
        tin_rate = rate * share / 8 if rate else None  # bytes a second
        self.seconds_per_byte = 1 / tin_rate if tin_rate else 0.0
        self.flow_quantum = max(min(tin_rate / 4096, MTU_BYTES), 300) if tin_rate \
            else MTU_BYTES
        mtu_time = MTU_BYTES * self.seconds_per_byte
        self.target = max(mtu_time * 1.5, target)
        self.interval = max(interval + self.target - target, self.target * 2)
        self.mtu_time = mtu_time
        self.weight = weight
        self.deficit = 0
        self.time_next = 0.0
        self.backlog = 0
        self.flows: dict[int, Flow] = {}
        self.tags: dict[int, int] = {}
        self.source_tags: dict[int, int] = {}  # host slot -> tag, and its bulk flows
        self.destination_tags: dict[int, int] = {}
        self.source_bulk: dict[int, int] = {}
        self.destination_bulk: dict[int, int] = {}
        self.new_flows: deque[Flow] = deque()
        self.old_flows: deque[Flow] = deque()
        self.decaying: deque[Flow] = deque()
        self.sparse_count = self.bulk_count = 0

    def flow(self, slot: int) -> Flow:
        found = self.flows.get(slot)
        if found is None:
            found = self.flows[slot] = Flow(Cobalt(self.target, self.interval, self.mtu_time))
        return found

    def host_load(self, flow: Flow) -> int:
        return max(1, self.source_bulk.get(flow.source, 0),
                   self.destination_bulk.get(flow.destination, 0))

    def count_bulk(self, flow: Flow, change: int) -> None:
        self.source_bulk[flow.source] = self.source_bulk.get(flow.source, 0) + change
        self.destination_bulk[flow.destination] = \
            self.destination_bulk.get(flow.destination, 0) + change

    def advance(self, size: int, now: float) -> None:
        """The tin's clock, at its threshold rate (sch_cake's cake_advance_shaper)."""
        duration = size * self.seconds_per_byte
        if self.time_next < now:
            self.time_next += duration
        elif self.time_next < now + duration:
            self.time_next = now + duration


def _place(tags: dict[int, int], wanted: int, busy) -> int:
    """sch_cake's set-associative lookup: the slot of the way that holds `wanted`'s tag, else
    a free way of its set (not busy), else its own slot (a collision)."""
    reduced = wanted % QUEUES
    outer = reduced - reduced % WAYS
    ways = [outer + (reduced + i) % WAYS for i in range(WAYS)]
    for slot in ways:
        if tags.get(slot) == wanted:
            return slot
    for slot in ways:
        if not busy(slot):
            return slot
    return reduced


class Cake(Discipline):
    def __init__(self, settings: Settings, rng: random.Random | None = None) -> None:
        super().__init__()
        self.byte_limit = settings.limit * MTU_BYTES
        self.shaped = bool(settings.rate)
        target, interval = settings.target or TARGET, settings.interval or INTERVAL
        self.tins = [Tin(settings.rate, share, weight, target, interval)
                     for share, weight in TINS]
        self.current = 0  # the tin DRR serves (unshaped)
        self.rng = rng or random.Random()
        self.salt = self.rng.getrandbits(32)

    # Enqueue --------------------------------------------------------------------------

    def _tag(self, key: int) -> int:
        """A flow's or a host's 32-bit tag, perturbed as the kernel's hash is."""
        return hash((key, self.salt)) & 0xFFFFFFFF

    def _classify(self, tin: Tin, packet: Packet) -> Flow:
        """The packet's flow queue, placed set-associatively, and its hosts' slots."""
        wanted = self._tag(packet.flow)
        slot = _place(tin.tags, wanted, lambda s: tin.flows.get(s, None) is not None
                      and tin.flows[s].set != NONE)
        flow = tin.flow(slot)
        if tin.tags.get(slot) != wanted or flow.set == NONE:
            if flow.set == BULK_SET:  # a collision takes over a busy queue
                tin.count_bulk(flow, -1)
            tin.tags[slot] = wanted
            source, destination = self._tag(packet.source), self._tag(packet.destination)
            flow.source = _place(tin.source_tags, source,
                                 lambda s: tin.source_bulk.get(s, 0) > 0)
            flow.destination = _place(tin.destination_tags, destination,
                                      lambda s: tin.destination_bulk.get(s, 0) > 0)
            tin.source_tags[flow.source] = source
            tin.destination_tags[flow.destination] = destination
            if flow.set == BULK_SET:
                tin.count_bulk(flow, 1)
        return flow

    def enqueue(self, packet: Packet, now: float) -> list[Packet]:
        tin = self.tins[tin_of(packet.dscp)]
        if not tin.backlog and tin.time_next < now:
            tin.time_next = now
        flow = self._classify(tin, packet)
        flow.queue.append(packet)
        flow.bytes += packet.size
        tin.backlog += packet.size
        self.packets += 1
        self.bytes += packet.size
        if flow.set in (NONE, DECAYING):
            if flow.set == NONE:
                tin.new_flows.append(flow)
            else:
                tin.decaying.remove(flow)
                tin.new_flows.append(flow)
            flow.set = SPARSE
            tin.sparse_count += 1
            flow.deficit = tin.flow_quantum / tin.host_load(flow)
        elif flow.set == SPARSE_WAIT:
            flow.set = BULK_SET
            tin.sparse_count -= 1
            tin.bulk_count += 1
            tin.count_bulk(flow, 1)
        dropped = []
        while self.bytes > self.byte_limit:
            dropped.append(self._drop_longest(now))
        return dropped

    def _drop_longest(self, now: float) -> Packet:
        tin, flow = max(((t, f) for t in self.tins for f in t.flows.values() if f.queue),
                        key=lambda pair: pair[1].bytes)
        packet = flow.queue.popleft()
        flow.cobalt.queue_full(now)
        self._account(tin, flow, packet)
        self.drops += 1
        return packet

    def _account(self, tin: Tin, flow: Flow, packet: Packet) -> None:
        flow.bytes -= packet.size
        tin.backlog -= packet.size
        self.packets -= 1
        self.bytes -= packet.size

    # Dequeue --------------------------------------------------------------------------

    def _choose_tin(self, now: float) -> Tin | None:
        busy = [tin for tin in self.tins if tin.sparse_count + tin.bulk_count]
        if not busy:
            return None
        if self.shaped:  # the highest tin whose clock is not ahead, else the earliest
            due = [tin for tin in busy if tin.time_next <= now]
            return due[-1] if due else min(reversed(busy), key=lambda tin: tin.time_next)
        while True:  # unshaped: deficit round robin over the tins
            tin = self.tins[self.current]
            if tin.deficit >= 0 and tin.sparse_count + tin.bulk_count:
                return tin
            if tin.deficit <= 0:
                tin.deficit += tin.weight
            self.current = (self.current + 1) % len(self.tins)

    def dequeue(self, now: float) -> tuple[Packet | None, list[Packet]]:
        dropped: list[Packet] = []
        first = True
        for _ in range(100_000):  # (a bound: every pass below moves a flow along)
            tin = self._choose_tin(now) if self.packets else None
            if tin is None:
                return None, dropped
            lists = [tin.decaying] if first and tin.decaying else []
            head = next((q for q in (*lists, tin.new_flows, tin.old_flows, tin.decaying)
                         if q), None)
            if head is None:
                return None, dropped
            flow = head[0]
            first = False
            if flow.deficit <= 0:
                self._to_old(tin, flow, head)
                continue
            packet = self._take(tin, flow, now, dropped)
            if packet is None:
                continue
            if packet.marked:
                self.marks += 1
            tin.advance(packet.size, now)
            flow.deficit -= packet.size
            tin.deficit -= packet.size
            return packet, dropped
        return None, dropped

    def _to_old(self, tin: Tin, flow: Flow, head: deque[Flow]) -> None:
        """DRR++: a flow out of deficit moves to the bulk rotation with another quantum."""
        if flow.set == SPARSE:
            if flow.queue:
                tin.sparse_count -= 1
                tin.bulk_count += 1
                tin.count_bulk(flow, 1)
                flow.set = BULK_SET
            else:
                flow.set = SPARSE_WAIT
        flow.deficit += tin.flow_quantum / tin.host_load(flow)
        head.popleft()
        tin.old_flows.append(flow)

    def _take(self, tin: Tin, flow: Flow, now: float, dropped: list[Packet]
              ) -> Packet | None:
        """The next packet COBALT lets through from `flow` (those it drops go to
        `dropped`); None when the queue turned out empty (the flow then rests or decays)."""
        while flow.queue:
            packet = flow.queue.popleft()
            self._account(tin, flow, packet)
            if not flow.cobalt.should_drop(packet, now, self.rng) or not flow.queue:
                return packet  # (the last packet of a queue is never dropped)
            dropped.append(packet)
            self.drops += 1
        self._emptied(tin, flow, now)
        return None

    def _emptied(self, tin: Tin, flow: Flow, now: float) -> None:
        flow.cobalt.queue_empty(now)
        for chain in (tin.new_flows, tin.old_flows, tin.decaying):
            if flow in chain:
                chain.remove(flow)
                break
        if flow.set in (SPARSE, SPARSE_WAIT):
            tin.sparse_count -= 1
        elif flow.set == BULK_SET:
            tin.bulk_count -= 1
            tin.count_bulk(flow, -1)
        cobalt = flow.cobalt
        if not cobalt.at_rest or now < cobalt.drop_next:
            tin.decaying.append(flow)  # kept until its state has decayed to rest
            flow.set = DECAYING
        else:
            flow.set = NONE

    def drain(self) -> list[Packet]:
        held = sorted((p for tin in self.tins for flow in tin.flows.values()
                       for p in flow.queue), key=lambda p: (p.arrival, p.id))
        for tin in self.tins:
            for flow in tin.flows.values():
                flow.queue.clear()
                flow.bytes, flow.set = 0, NONE
            for chain in (tin.new_flows, tin.old_flows, tin.decaying):
                chain.clear()
            tin.sparse_count = tin.bulk_count = tin.backlog = 0
            tin.source_bulk.clear()
            tin.destination_bulk.clear()
        self.packets = self.bytes = 0
        return held


def make(settings: Settings) -> Discipline:
    return Cake(settings)
