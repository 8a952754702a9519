"""FRR configuration for every router of a routed topology: a pure function of the model.

One file per daemon, as FRR's daemons read them when each runs alone (not the integrated
frr.conf, which needs watchfrr and vtysh to hand it out). A router's raw `frr` fragment is
applied afterwards with vtysh, which knows which daemon takes which command.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from ...model.topology import Endpoint, Topology, l2_segments

# SPF runs at once on a change, then at most every 50 ms while changes keep coming, backing
# off to 1 s: a lab's few routers converge in milliseconds, not FRR's default 0/50/5000.
SPF_THROTTLE = "timers throttle spf 0 50 1000"
# A router may originate a new LSA at once after its last one (OSPF's MinLSInterval is 5 s)
# and accepts one as soon as it arrives (MinLSArrival, 1 s): a link that fails seconds after
# another change is announced without waiting out either.
LSA_TIMERS = ("timers throttle lsa all 0", "timers lsa min-arrival 0")
RETRANSMIT_SECONDS = 1  # an unacknowledged LSA is sent again after this (FRR: 5 s)
BFD_PROFILE = "lab"
BFD_MULTIPLIER = 3
COALESCE_MS = 0
EBGP_MULTIPATH = 8  # equal eBGP paths installed side by side (ECMP)


@dataclass
class Interface:
    """One addressed interface of a router and what runs on it."""

    end: Endpoint
    cost: int | None
    ospf: str | None  # "point-to-point", "broadcast", "passive", or None (not in OSPF)
    ebgp_peers: list[tuple[ipaddress.IPv4Address, int]] = field(default_factory=list)
    ospf_neighbours: list[str] = field(default_factory=list)  # routers of its AS beyond it


def interfaces(topology: Topology, router: str) -> list[Interface]:
    """The router's addressed interfaces, classified: OSPF towards routers of its own AS
    (point-to-point over a direct link), passive towards hosts, eBGP towards other ASes."""
    mine = topology.nodes[router].asn
    found = []
    for end, link in topology.endpoints_of(router):
        if end.address is None:
            continue
        others = [e for e in _segment_of(topology, end) if e.node != router]
        routers = [e for e in others if topology.nodes[e.node].kind == "router"]
        same_as = [e for e in routers if topology.nodes[e.node].asn == mine]
        ospf: str | None = None
        if topology.routing.protocol == "ospf":
            if same_as:
                direct = len(routers) == 1 and routers[0].node == link.other(router).node
                ospf = "point-to-point" if direct else "broadcast"
            elif not routers:
                ospf = "passive"
        peers = [(e.address.ip, topology.nodes[e.node].asn or 0) for e in routers
                 if topology.nodes[e.node].asn != mine and e.address is not None]
        found.append(Interface(end, link.cost, ospf, peers,
                               [e.node for e in same_as] if ospf != "passive" else []))
    return found


def _segment_of(topology: Topology, end: Endpoint) -> list[Endpoint]:
    for segment in l2_segments(topology):
        if end in segment:
            return segment
    return [end]


def router_id(topology: Topology, router: str) -> ipaddress.IPv4Address:
    """The router's first address inside its own routing domain: announced by OSPF, so
    iBGP peers reach it while any path inside the AS remains."""
    own = [i for i in interfaces(topology, router) if i.ospf is not None]
    chosen = (own or interfaces(topology, router))[0].end.address
    assert chosen is not None
    return chosen.ip


def daemons(topology: Topology, router: str) -> list[str]:
    """The FRR daemons a router runs, zebra first (the others connect to it)."""
    node = topology.nodes[router]
    wanted = ["zebra"]
    if node.frr:
        wanted.append("staticd")
    if topology.routing.protocol == "ospf":
        wanted.append("ospfd")
    if node.asn is not None:
        wanted.append("bgpd")
    if topology.routing.timers.bfd:
        wanted.append("bfdd")
    return wanted


def configs(topology: Topology, router: str) -> dict[str, str]:
    """Each daemon's configuration file for one router."""
    header = [f"hostname {router}", "log timestamp precision 6"]
    texts = {}
    for daemon in daemons(topology, router):
        body = {"ospfd": _ospf, "bgpd": _bgp, "bfdd": _bfd}.get(daemon)
        lines = header + (body(topology, router) if body else [])
        texts[daemon] = "\n".join(lines) + "\n"
    return texts


def _ospf(topology: Topology, router: str) -> list[str]:
    timers = topology.routing.timers
    lines = []
    for interface in interfaces(topology, router):
        if interface.ospf is None:
            continue
        lines += [f"interface {interface.end.interface}", " ip ospf area 0"]
        if interface.ospf == "passive":
            lines.append(" ip ospf passive")
        else:
            lines += [f" ip ospf hello-interval {timers.ospf_hello}",
                      f" ip ospf dead-interval {timers.ospf_dead}",
                      f" ip ospf retransmit-interval {RETRANSMIT_SECONDS}"]
            if interface.ospf == "point-to-point":
                lines.append(" ip ospf network point-to-point")
            if timers.bfd:
                lines += [" ip ospf bfd", f" ip ospf bfd profile {BFD_PROFILE}"]
        if interface.cost is not None:
            lines.append(f" ip ospf cost {interface.cost}")
        lines.append("exit")
    lines += ["router ospf", f" ospf router-id {router_id(topology, router)}", f" {SPF_THROTTLE}",
              *(f" {timer}" for timer in LSA_TIMERS)]
    return lines + ["exit"]


def _bgp(topology: Topology, router: str) -> list[str]:
    timers = topology.routing.timers
    mine = topology.nodes[router].asn
    own_id = router_id(topology, router)
    lines = [f"router bgp {mine}", f" bgp router-id {own_id}",
             # A lab announces everything it has; real networks filter eBGP by policy.
             " no bgp ebgp-requires-policy",
             f" timers bgp {timers.bgp_keepalive} {timers.bgp_hold}",
             # Updates leave at once, not gathered for FRR's default second.
             f" coalesce-time {COALESCE_MS}"]
    internal = internal_peers(topology, router)
    external = [peer for i in interfaces(topology, router) for peer in i.ebgp_peers]
    for address, asn in external:
        lines += _neighbour(address, asn, timers.bfd)
    for address in internal:
        lines += _neighbour(address, mine or 0, timers.bfd)
        lines.append(f" neighbor {address} update-source {own_id}")
    lines += [" address-family ipv4 unicast", "  redistribute connected",
              f"  maximum-paths {EBGP_MULTIPATH}"]
    lines += [f"  neighbor {address} next-hop-self" for address in internal]
    return lines + [" exit-address-family", "exit"]


def internal_peers(topology: Topology, router: str) -> list[ipaddress.IPv4Address]:
    """The iBGP peers of a router: every other router of its AS, by its router id."""
    mine = topology.nodes[router].asn
    return [router_id(topology, other) for other in topology.routers()
            if other != router and topology.nodes[other].asn == mine]


def _neighbour(address: ipaddress.IPv4Address, asn: int, bfd: bool) -> list[str]:
    # A session tries again 1 s after a failed connection, not 120 s: at start-up the
    # iBGP peer is unreachable until OSPF has converged.
    lines = [f" neighbor {address} remote-as {asn}", f" neighbor {address} timers connect 1",
             f" neighbor {address} advertisement-interval 0"]
    if bfd:
        lines.append(f" neighbor {address} bfd profile {BFD_PROFILE}")
    return lines


def _bfd(topology: Topology, router: str) -> list[str]:
    interval = round(topology.routing.timers.bfd_interval * 1000)
    return ["bfd", f" profile {BFD_PROFILE}", f"  detect-multiplier {BFD_MULTIPLIER}",
            f"  receive-interval {interval}", f"  transmit-interval {interval}", " exit",
            "exit"]
