"""Flow queueing (RFC 8290), as Linux's fq_codel and fq_pie run it: packets are hashed by
their 5-tuple into `flows` queues, served by deficit round robin (`quantum` bytes a round),
new flows (a queue that was empty) ahead of old ones, so a sparse flow's packet waits for at
most one quantum of each busy flow; each queue has its own AQM (CoDel at dequeue or PIE at
enqueue). A full qdisc drops from the head of the flow holding the most bytes (up to 64
packets or half its bytes), not the arriving packet."""

from __future__ import annotations

import random
from collections import deque
from functools import partial

from . import codel, pie
from .base import MTU_BYTES, Discipline, Packet, Settings

FLOWS = 1024  # the kernel's defaults
DROP_BATCH = 64


class FlowQueue:
    __slots__ = ("queue", "bytes", "deficit", "listed", "codel", "pie")

    def __init__(self) -> None:
        self.queue: deque[Packet] = deque()
        self.bytes = 0
        self.deficit = 0
        self.listed = False  # on the new or the old list
        self.codel: codel.CodelState | None = None
        self.pie: pie.PieState | None = None


class FlowQueueing(Discipline):
    def __init__(self, settings: Settings, aqm: str, rng: random.Random | None = None) -> None:
        super().__init__()
        self.limit = settings.limit
        self.settings = settings
        self.aqm = aqm  # "codel" or "pie"
        self.quantum = settings.quantum or MTU_BYTES
        self.flow_count = settings.flows or FLOWS
        self.flows: dict[int, FlowQueue] = {}
        self.new_flows: deque[FlowQueue] = deque()
        self.old_flows: deque[FlowQueue] = deque()
        self.rng = rng or random.Random()
        self.salt = self.rng.getrandbits(32)  # the kernel's hash perturbation
        self.waking: set[FlowQueue] = set()  # PIE states not at rest: they are updated

    def _flow(self, packet: Packet) -> FlowQueue:
        index = hash((packet.flow, self.salt)) % self.flow_count
        flow = self.flows.get(index)
        if flow is None:
            flow = self.flows[index] = FlowQueue()
            settings = self.settings
            if self.aqm == "codel":
                flow.codel = codel.CodelState(settings.target or codel.TARGET,
                                              settings.interval or codel.INTERVAL, settings.ecn)
            else:
                flow.pie = pie.PieState(settings.target or pie.TARGET,
                                        settings.tupdate or pie.TUPDATE, settings.ecn,
                                        self.rng)
        return flow

    def _catch_up(self, now: float) -> None:
        for flow in list(self.waking):
            assert flow.pie is not None
            flow.pie.catch_up(now, flow.bytes)
            if flow.pie.at_rest and not flow.queue:
                self.waking.discard(flow)

    def enqueue(self, packet: Packet, now: float) -> list[Packet]:
        flow = self._flow(packet)
        if flow.pie is not None:
            self._catch_up(now)
            if flow.pie.next_update <= now:  # a flow at rest: its timer kept time
                flow.pie.next_update = now + flow.pie.tupdate
            self.waking.add(flow)
            if self.packets >= self.limit or not flow.pie.admit(packet, flow.bytes):
                self.drops += 1
                return [packet]
            if packet.marked:
                self.marks += 1
        flow.queue.append(packet)
        flow.bytes += packet.size
        self.packets += 1
        self.bytes += packet.size
        if not flow.listed:
            flow.listed = True
            flow.deficit = self.quantum
            self.new_flows.append(flow)
        if self.packets > self.limit:
            return self._drop_from_fattest()
        return []

    def _drop_from_fattest(self) -> list[Packet]:
        fattest = max(self.flows.values(), key=lambda f: f.bytes)
        threshold = fattest.bytes // 2
        dropped: list[Packet] = []
        freed = 0
        while fattest.queue and len(dropped) < DROP_BATCH and freed < threshold:
            packet = fattest.queue.popleft()
            fattest.bytes -= packet.size
            freed += packet.size
            dropped.append(packet)
        self.packets -= len(dropped)
        self.bytes -= freed
        self.drops += len(dropped)
        return dropped

    def _take_from(self, flow: FlowQueue) -> Packet | None:
        if not flow.queue:
            return None
        packet = flow.queue.popleft()
        flow.bytes -= packet.size
        self.packets -= 1
        self.bytes -= packet.size
        return packet

    def dequeue(self, now: float) -> tuple[Packet | None, list[Packet]]:
        if self.waking:
            self._catch_up(now)
        dropped: list[Packet] = []
        while True:
            head = self.new_flows if self.new_flows else self.old_flows
            if not head:
                return None, dropped
            flow = head[0]
            if flow.deficit <= 0:
                flow.deficit += self.quantum
                head.popleft()
                self.old_flows.append(flow)
                continue
            if flow.codel is not None:
                packet, lost = flow.codel.dequeue(partial(self._take_from, flow),
                                                  lambda: self.bytes, now)
                dropped += lost
                self.drops += len(lost)
            else:
                packet = self._take_from(flow)
                if packet is not None:
                    assert flow.pie is not None
                    flow.pie.left(packet, now, not flow.queue)
            if packet is None:
                head.popleft()
                if head is self.new_flows and self.old_flows:
                    self.old_flows.append(flow)  # a pass through the old flows: no starving
                else:
                    flow.listed = False
                continue
            if packet.marked and flow.codel is not None:
                self.marks += 1
            flow.deficit -= packet.size
            return packet, dropped

    def drain(self) -> list[Packet]:
        held = sorted((p for flow in self.flows.values() for p in flow.queue),
                      key=lambda p: (p.arrival, p.id))
        for flow in self.flows.values():
            flow.queue.clear()
            flow.bytes, flow.listed = 0, False
        self.new_flows.clear()
        self.old_flows.clear()
        self.packets = self.bytes = 0
        return held


def make_codel(settings: Settings) -> Discipline:
    return FlowQueueing(settings, "codel")


def make_pie(settings: Settings) -> Discipline:
    return FlowQueueing(settings, "pie")
