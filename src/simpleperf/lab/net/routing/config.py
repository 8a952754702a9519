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
    """The FRR daemons a router runs, zebra first (the others connect to it): those its
    routing needs, and those its raw fragment configures (`router ospf`: ospfd)."""
    node = topology.nodes[router]
    wanted = ["zebra"]
    if node.frr:
        wanted.append("staticd")
    if topology.routing.protocol == "ospf" or _configures(node.frr, "router ospf"):
        wanted.append("ospfd")
    if node.asn is not None or _configures(node.frr, "router bgp"):
        wanted.append("bgpd")
    if topology.routing.timers.bfd or _configures(node.frr, "bfd"):
        wanted.append("bfdd")
    return wanted


def _configures(fragment: str, section: str) -> bool:
    """Does a raw fragment open this top-level section ('router ospf', 'bfd')?"""
    return any(line == section or line.startswith(section + " ")
               for line in fragment.splitlines())


# FRR's daemons file (/etc/frr/daemons), as FRR's packages and containers read it: every
# daemon yes or no, each bound to loopback.
FRR_DAEMONS = ("zebra", "bgpd", "ospfd", "ospf6d", "ripd", "ripngd", "isisd", "pimd", "ldpd",
               "nhrpd", "eigrpd", "babeld", "sharpd", "staticd", "pbrd", "bfdd", "fabricd")


def daemons_file(topology: Topology, router: str) -> str:
    """The daemons file that starts what `daemons` names (staticd always: the integrated
    configuration's static routes need it)."""
    running = {*daemons(topology, router), "staticd"}
    lines = [f"{name}={'yes' if name in running else 'no'}" for name in FRR_DAEMONS]
    lines += ["vtysh_enable=yes", 'zebra_options=" -A 127.0.0.1 -s 90000000"']
    lines += [f'{name}_options=" -A 127.0.0.1"' for name in FRR_DAEMONS[1:]]
    return "\n".join(lines) + "\n"


def integrated(topology: Topology, router: str) -> str:
    """The router's whole configuration as one frr.conf (what FRR's containers read): its
    addresses, then what each daemon's own file says, its static routes, its raw fragment."""
    lines = ["frr defaults traditional", f"hostname {router}", "log timestamp precision 6",
             "no ipv6 forwarding"]
    for end, _ in topology.endpoints_of(router):
        if end.address is not None:
            lines += [f"interface {end.interface}", f" ip address {end.address}", "exit"]
    for daemon in daemons(topology, router):
        lines += _body(topology, router, daemon)
    lines += [f"ip route {route.destination} {route.via}"
              for route in topology.nodes[router].routes]
    fragment = topology.nodes[router].frr.strip()
    return "\n".join(lines + ([fragment] if fragment else [])) + "\n"


def configs(topology: Topology, router: str) -> dict[str, str]:
    """Each daemon's configuration file for one router."""
    header = [f"hostname {router}", "log timestamp precision 6"]
    texts = {}
    for daemon in daemons(topology, router):
        texts[daemon] = "\n".join(header + _body(topology, router, daemon)) + "\n"
    return texts


def _body(topology: Topology, router: str, daemon: str) -> list[str]:
    """What the lab's routing configures in one daemon (nothing for a daemon that only a
    raw fragment configures, beyond OSPF's fast timers)."""
    if daemon == "ospfd":
        return _ospf(topology, router)
    if daemon == "bgpd" and topology.nodes[router].asn is not None:
        return _bgp(topology, router)
    if daemon == "bfdd" and topology.routing.timers.bfd:
        return _bfd(topology, router)
    return []


def _ospf(topology: Topology, router: str) -> list[str]:
    timers = topology.routing.timers
    lines = []
    raw = _configures(topology.nodes[router].frr, "router ospf")
    for interface in interfaces(topology, router):
        if interface.ospf is None:
            if raw:  # where its own configuration runs OSPF, the lab's timers (it may
                # set others: it is applied after)
                lines += [f"interface {interface.end.interface}",
                          *_ospf_timers(topology), "exit"]
            continue
        lines += [f"interface {interface.end.interface}", " ip ospf area 0"]
        if interface.ospf == "passive":
            lines.append(" ip ospf passive")
        else:
            lines += _ospf_timers(topology)
            if interface.ospf == "point-to-point":
                lines.append(" ip ospf network point-to-point")
            if timers.bfd:
                lines += [" ip ospf bfd", f" ip ospf bfd profile {BFD_PROFILE}"]
        if interface.cost is not None:
            lines.append(f" ip ospf cost {interface.cost}")
        lines.append("exit")
    lines += ["router ospf", f" ospf router-id {router_id(topology, router)}", f" {SPF_THROTTLE}",
              " log-adjacency-changes",  # the console's timeline reads them (routing/log.py)
              *(f" {timer}" for timer in LSA_TIMERS)]
    return lines + ["exit"]


def _ospf_timers(topology: Topology) -> list[str]:
    timers = topology.routing.timers
    return [f" ip ospf hello-interval {timers.ospf_hello}",
            f" ip ospf dead-interval {timers.ospf_dead}",
            f" ip ospf retransmit-interval {RETRANSMIT_SECONDS}"]


def _bgp(topology: Topology, router: str) -> list[str]:
    timers = topology.routing.timers
    mine = topology.nodes[router].asn
    own_id = router_id(topology, router)
    lines = [f"router bgp {mine}", f" bgp router-id {own_id}",
             # A lab announces everything it has; real networks filter eBGP by policy.
             " no bgp ebgp-requires-policy",
             f" timers bgp {timers.bgp_keepalive} {timers.bgp_hold}",
             # Updates leave at once, not gathered for FRR's default second.
             f" coalesce-time {COALESCE_MS}",
             " bgp log-neighbor-changes"]  # the console's timeline reads them
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
