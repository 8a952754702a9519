"""When has routing converged? Every adjacency that can form has formed (OSPF neighbours
Full, BGP sessions Established), the kernels' routes have stopped changing, and every host
reaches every other along them (or, after a failure that cuts the network, as many as can).

Reachability alone is not enough: BGP may first install a longer path it learnt earlier and
move to the best one a moment later, when the session that carries it comes up.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ...model.topology import Topology, TopologyError
from . import config, daemons, tables

POLL_SECONDS = 0.05
QUIET_SECONDS = 0.3  # the routes stayed the same this long: nothing is still on its way


@dataclass
class Converged:
    reachable: float | None  # seconds until every host reached every other (None: never)
    settled: float  # seconds until adjacencies were complete and the routes still
    routed: Topology  # the topology along the routes installed at the end
    unreachable: list[tuple[str, str]]


def expected_adjacencies(topology: Topology, down: set[str]) -> dict[str, dict[str, int]]:
    """Per router: how many OSPF neighbours are expected Full on each interface, and whether
    each BGP session is expected Established ('bgp ADDRESS': 1 or 0); none over a link that
    is down, none with a router whose every link is down."""
    links_of = {end.interface: link.name for link in topology.links
                for end in (link.a, link.b)}
    isolated = {r for r in topology.routers()
                if all(link.name in down for _, link in topology.endpoints_of(r))}
    expected: dict[str, dict[str, int]] = {}
    for router in topology.routers():
        wanted: dict[str, int] = {}
        if router in isolated:
            expected[router] = wanted
            continue
        for interface in config.interfaces(topology, router):
            cut = links_of[interface.end.interface] in down
            if interface.ospf in ("point-to-point", "broadcast"):
                wanted[interface.end.interface] = 0 if cut else len(
                    [n for n in interface.ospf_neighbours if n not in isolated])
            for address, _ in interface.ebgp_peers:
                wanted[f"bgp {address}"] = int(not cut and topology.owner_of(address)
                                               not in isolated)
        if topology.nodes[router].asn is not None:
            for peer in config.internal_peers(topology, router):
                wanted[f"bgp {peer}"] = int(topology.owner_of(peer) not in isolated)
        expected[router] = wanted
    return expected


def missing_adjacencies(lab: str, topology: Topology, down: set[str]) -> list[str]:
    """Adjacencies not yet as expected (one still up over a failed link counts too), as
    'r1: ospf on r1-eth1' or 'r2: bgp 10.0.0.1'."""
    missing = []
    for router, wanted in expected_adjacencies(topology, down).items():
        if not wanted:
            continue
        up = daemons.adjacencies(lab, router, topology)
        for key in sorted(set(wanted) | set(up)):
            if up.get(key, 0) != wanted.get(key, 0):
                missing.append(f"{router}: {'ospf on ' if not key.startswith('bgp') else ''}"
                               f"{key}")
    return missing


def wait(lab: str, topology: Topology, bound: float, down: set[str] | None = None,
         reachable: bool = False) -> Converged:
    """Poll until converged (and with `reachable`, until every host reaches every other);
    past `bound`, one line saying what is still missing."""
    down = down or set()
    started = time.monotonic()
    nodes = tables.forwarding_nodes(topology)
    last_tables: dict | None = None
    changed = started
    reachable_at: float | None = None
    complete_at: float | None = None  # since when every adjacency has been as expected
    while True:
        now_tables = tables.read(nodes)
        now = time.monotonic()
        if now_tables != last_tables:
            last_tables, changed = now_tables, now
        routed = tables.installed(topology, now_tables)
        cut = tables.unreachable(routed)
        if not cut and reachable_at is None:
            reachable_at = now - started
        quiet = now - changed >= QUIET_SECONDS
        missing = missing_adjacencies(lab, topology, down) if quiet else ["(routes changing)"]
        if missing:
            complete_at = None
        elif complete_at is None:
            complete_at = now
        # Quiet counts only once the adjacencies are complete: a neighbour that has just
        # reached Full has not yet had its routes computed, so the routes may be quiet
        # because nothing has happened yet.
        settled = complete_at is not None and now - complete_at >= QUIET_SECONDS
        if settled and not (reachable and cut):
            return Converged(reachable_at if not cut else None, changed - started, routed, cut)
        if now - started > bound:
            shown = ", ".join(f"{a}->{b}" for a, b in cut[:6]) or "none"
            raise TopologyError(
                f"routing did not converge within {bound:g} s: not up: "
                f"{', '.join(missing[:4])}; host pairs without a route: {shown} (simpleperf "
                "lab exec ROUTER -- vtysh -c 'show ip route' shows what the daemons have)")
        time.sleep(POLL_SECONDS)
