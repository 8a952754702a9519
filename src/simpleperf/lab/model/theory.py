"""What theory predicts on a topology: paths, base RTT, bottlenecks, fair shares, bounds.

Pure functions over the Topology model; routes are looked up as the kernel would (longest
prefix, connected subnets first), so a prediction follows the packets' real path.
"""

from __future__ import annotations

import ipaddress
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from .topology import Link, Shaping, Topology, TopologyError

Hop = tuple[Link, str]  # a link and the node the packet leaves from


@dataclass(frozen=True)
class Path:
    hops: tuple[Hop, ...]

    def shaping(self) -> list[Shaping]:
        return [link.direction_from(node) for link, node in self.hops]

    @property
    def one_way_delay(self) -> float:
        return sum(s.delay for s in self.shaping())

    @property
    def bottleneck(self) -> float | None:
        rates = [s.rate for s in self.shaping() if s.rate is not None]
        return min(rates) if rates else None

    @property
    def loss(self) -> float:
        return 1 - math.prod(1 - s.loss for s in self.shaping())

    def resources(self) -> list[tuple[str, str]]:
        """(link name, direction) pairs this path's packets use, in order."""
        return [(link.name, "a_to_b" if node == link.a.node else "b_to_a")
                for link, node in self.hops]


def _route(topology: Topology, node: str, destination: ipaddress.IPv4Address
           ) -> ipaddress.IPv4Address | None:
    """The next hop for `destination` from `node`; None means it is on a connected subnet."""
    best: tuple[int, int, ipaddress.IPv4Address | None] | None = None
    for end, _ in topology.endpoints_of(node):
        if end.address is not None and destination in end.address.network:
            candidate = (end.address.network.prefixlen, 1, None)
            best = max(best, candidate, key=lambda c: c[:2]) if best else candidate
    for route in topology.nodes[node].routes:
        if destination in route.destination:
            candidate = (route.destination.prefixlen, 0, route.via)
            best = max(best, candidate, key=lambda c: c[:2]) if best else candidate
    if best is None:
        raise TopologyError(f"{node} has no route to {destination}")
    return best[2]


def _layer2_hops(topology: Topology, start: str, target: str,
                 network: ipaddress.IPv4Network) -> list[Hop]:
    """Links from `start` to `target` on the subnet `network`, through switches only."""
    queue: deque[tuple[str, list[Hop]]] = deque([(start, [])])
    seen = {start}
    while queue:
        node, hops = queue.popleft()
        for end, link in topology.endpoints_of(node):
            if node == start and (end.address is None or end.address.network != network):
                continue
            other = link.other(node).node
            if other in seen:
                continue
            path = hops + [(link, node)]
            if other == target:
                return path
            if topology.nodes[other].kind == "switch":
                seen.add(other)
                queue.append((other, path))
    raise TopologyError(f"{start} cannot reach {target} on {network}")


def path(topology: Topology, source: str, destination: ipaddress.IPv4Address | str) -> Path:
    """The hops a packet takes from node `source` to an address (or a node's address)."""
    if isinstance(destination, str) and destination in topology.nodes:
        destination = topology.address_of(destination)
    destination = ipaddress.IPv4Address(destination)
    owner = topology.owner_of(destination)
    if owner is None:
        raise TopologyError(f"no node has address {destination}")
    hops: list[Hop] = []
    node = source
    for _ in range(64):
        if node == owner:
            return Path(tuple(hops))
        gateway = _route(topology, node, destination)
        target_ip = gateway or destination
        target = topology.owner_of(target_ip)
        assert target is not None  # validated: every gateway is some node's address
        subnet = next(end.address.network for end, _ in topology.endpoints_of(node)
                      if end.address is not None and target_ip in end.address.network)
        hops.extend(_layer2_hops(topology, node, target, subnet))
        if target != owner and topology.nodes[target].kind != "router":
            raise TopologyError(f"packets from {source} to {destination} reach {target}, "
                                "which is not a router and does not forward")
        node = target
    raise TopologyError(f"routing loop from {source} to {destination}")


def base_rtt(topology: Topology, a: str, b: str) -> float:
    """Round-trip time with empty queues: the one-way delays out and back."""
    return path(topology, a, b).one_way_delay + path(topology, b, a).one_way_delay


def max_min_shares(paths: Sequence[Path], demands: Sequence[float | None] | None = None,
                   capacities: dict[tuple[str, str], float] | None = None) -> list[float]:
    """Max-min fair rates (bits/s) by water-filling over every shaped link direction the flows
    share. A flow with a demand (e.g. a paced UDP flow) never gets more than it asks for;
    a flow on no shaped link gets infinity."""
    demands = list(demands) if demands is not None else [None] * len(paths)
    if capacities is None:
        capacities = {}
        for flow in paths:
            for (link, node), resource in zip(flow.hops, flow.resources(), strict=True):
                rate = link.direction_from(node).rate
                if rate is not None:
                    capacities[resource] = rate
    uses = [{r for r in flow.resources() if r in capacities} for flow in paths]
    rates = [0.0] * len(paths)
    active = set(range(len(paths)))
    remaining = dict(capacities)
    while active:
        increments = []
        for resource, capacity in remaining.items():
            users = [i for i in active if resource in uses[i]]
            if users:
                increments.append(capacity / len(users))
        for i in active:
            if demands[i] is not None:
                increments.append(demands[i] - rates[i])
        if not increments:
            for i in active:
                rates[i] = math.inf if demands[i] is None else demands[i]
            break
        step = max(0.0, min(increments))
        for i in active:
            rates[i] += step
        for resource in remaining:
            remaining[resource] -= step * sum(1 for i in active if resource in uses[i])
        frozen = {i for i in active
                  if (demands[i] is not None and rates[i] >= demands[i] - 1e-6)
                  or any(remaining[r] <= 1e-6 for r in uses[i])}
        active -= frozen
    return rates


def window_bound(window_bytes: float, rtt: float) -> float:
    """A window-limited flow cannot exceed window / RTT (bits/s)."""
    return window_bytes * 8 / rtt


def mathis_bound(mss_bytes: float, rtt: float, loss: float) -> float:
    """Mathis et al.: throughput <= (MSS / RTT) * (C / sqrt(p)), C = sqrt(3/2) (bits/s)."""
    if loss <= 0:
        return math.inf
    return mss_bytes * 8 / rtt * math.sqrt(1.5) / math.sqrt(loss)
