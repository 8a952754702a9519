"""What the page draws, from the lab's model and its interfaces' counters: pure functions,
the numbers in the units the JSON results carry (bits a second, seconds, packets)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..model import link_properties
from ..model.topology import Link, Shaping, Topology
from .counters import Counters
from .qdiscs import QdiscStats


def topology_view(lab: str, model: Topology, shaper: str, down: list[str]) -> dict[str, Any]:
    """A lab as the page draws it: its nodes by role, its links with each direction's
    properties (every row of the link property table) and whether they are down."""
    return {"lab": lab, "description": model.description, "shaper": shaper,
            "nodes": [{"id": name, "kind": node.kind} for name, node in model.nodes.items()],
            "links": [_link(link, link.name in down) for link in model.links]}


def _link(link: Link, down: bool) -> dict[str, Any]:
    return {"name": link.name, "a": link.a.node, "b": link.b.node,
            "a_interface": link.a.interface, "b_interface": link.b.interface, "down": down,
            "a_to_b": _direction(link.a_to_b), "b_to_a": _direction(link.b_to_a)}


def _direction(shaping: Shaping) -> dict[str, Any]:
    properties = {name: getattr(shaping, name) for name in link_properties.NAMES}
    return {"described": shaping.describe(), "properties": properties}


@dataclass(frozen=True)
class Reading:
    """Every lab namespace's interface counters, and the root qdisc of each interface,
    at one time (monotonic seconds)."""

    at: float
    counters: dict[str, dict[str, Counters]]  # namespace -> interface -> counters
    queues: dict[str, dict[str, QdiscStats]] = field(default_factory=dict)  # ... root qdisc
    # the own shaper's queues: lab -> (link, way) -> packets, bytes, drops, marks so far
    own: dict[str, dict[tuple[str, str], dict[str, int]]] = field(default_factory=dict)

    def of(self, node: str, interface: str) -> Counters | None:
        return self.counters.get(node, {}).get(interface)

    def queue(self, node: str, interface: str) -> QdiscStats | None:
        return self.queues.get(node, {}).get(interface)


def link_rates(model: Topology, before: Reading, after: Reading,
               egress: dict[tuple[str, str], tuple[str, str]] | None = None
               ) -> list[dict[str, Any]]:
    """Each link's throughput each way between two readings (bits a second, from what
    the sending end's interface sent), its queue now (packets and bytes, and the seconds
    it takes to drain at the direction's rate: the own shaper's
    discipline where it runs the direction, else the root qdisc where the direction leaves
    the lab's wire (`egress`: build.wire_egress) or its sending end) and the
    packets dropped (and with the own shaper marked CE) meanwhile; None where an end was
    not read both times."""
    seconds = after.at - before.at
    rates = []
    for link in model.links:
        row: dict[str, Any] = {"name": link.name}
        for way, sender, receiver in (("a_to_b", link.a, link.b), ("b_to_a", link.b, link.a)):
            sent = _delta(before.of(sender.node, sender.interface),
                          after.of(sender.node, sender.interface))
            got = _delta(before.of(receiver.node, receiver.interface),
                         after.of(receiver.node, receiver.interface))
            if sent is None or seconds <= 0:
                row[way] = None
                continue
            row[way] = {"bits_per_second": sent.tx_bytes * 8 / seconds,
                        "packets_per_second": sent.tx_packets / seconds,
                        "dropped": sent.tx_dropped + (got.rx_dropped if got else 0)}
            own = after.own.get(model.name, {}).get((link.name, way))
            own_before = before.own.get(model.name, {}).get((link.name, way))
            where = (egress or {}).get((link.name, way), (sender.node, sender.interface))
            queue, earlier = after.queue(*where), before.queue(*where)
            if own is not None:  # the own shaper's discipline runs this direction's queue
                row[way].update(qdisc=getattr(link, way).qdisc, queue_packets=own["packets"],
                                queue_bytes=own["bytes"], marked=0)
                if own_before is not None and own["drops"] >= own_before["drops"]:
                    row[way]["dropped"] += own["drops"] - own_before["drops"]
                    row[way]["marked"] = max(0, own["marks"] - own_before["marks"])
            elif queue is not None:  # the sending end's queue: now, and what it dropped
                row[way].update(qdisc=queue.kind, queue_packets=queue.queue_packets,
                                queue_bytes=queue.queue_bytes)
                if earlier is not None and earlier.kind == queue.kind and \
                        queue.drops >= earlier.drops:
                    row[way]["dropped"] += queue.drops - earlier.drops
            _queue_delay(row[way], getattr(link, way))
        rates.append(row)
    return rates


def _queue_delay(way: dict[str, Any], shaping: Shaping) -> None:
    """How long the queue takes to drain at the direction's rate (seconds): what a packet
    arriving behind it waits."""
    if way.get("queue_bytes") is not None and shaping.rate:
        way["queue_delay"] = way["queue_bytes"] * 8 / shaping.rate


def _delta(first: Counters | None, second: Counters | None) -> Counters | None:
    """What an interface counted between two readings (None if either is missing or the
    interface was made anew in between: its counters went back)."""
    if first is None or second is None or second.tx_bytes < first.tx_bytes or \
            second.rx_bytes < first.rx_bytes:
        return None
    return Counters(*(getattr(second, name) - getattr(first, name)
                      for name in Counters.__dataclass_fields__))
