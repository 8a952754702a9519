"""Topologies as data: hosts, routers, switches and links, loaded from TOML and validated.

Nothing here touches the system. Every mistake is a TopologyError naming the node or link
and the field, raised before anything is created. Vocabulary follows Mininet: hosts,
switches, links with bw, delay, jitter, loss and max_queue_size. Delay is one-way and applies
to each direction; a link's base RTT is twice it.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ...description.options import is_congestion_name
from . import datafiles, routing, traces
from .errors import TopologyError
from .link_properties import MININET_NAMES, PROPERTIES, check_qdisc, parse_mininet, to_mininet
from .routing import Routing

__all__ = ["Endpoint", "Link", "Node", "Route", "Shaping", "Topology", "TopologyError"]

NODE_KINDS = ("hosts", "routers", "switches")
# A node is a namespace of that name and, if a switch, a bridge of it: a name an interface
# can carry (15 characters, Linux's IFNAMSIZ less one), as containerlab's files write them.
NODE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,14}")
NODE_NAME_RULE = "1-15 letters, digits, '-' or '_', starting with a letter"
# An interface's name inside its node (a_interface, b_interface: containerlab's eth1);
# without one a link end is NODE-ethN, Mininet's way.
INTERFACE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,14}")
INTERFACE_RULE = "1-15 letters, digits, '_', '.' or '-'"
LAB_NAME = re.compile(r"[a-z][a-z0-9-]{0,9}")
LINK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")
# Every key of a topology file and what it says, a table per table of the file: the parser
# takes these and refuses any other, and the documentation's file-format reference is made
# from them.
TOPOLOGY_KEYS = {
    "name": "the lab's name: 1-10 lowercase letters, digits or '-', starting with a letter "
            "(default: the file's name)",
    "description": "a line that `lab list` shows",
    "hosts": "the hosts, a table each: `h1 = {}` (keys below)",
    "routers": "the routers, a table each: `r1 = { asn = 65001 }`; they forward",
    "switches": "the switches (Linux bridges), a table each: `s1 = {}`",
    "links": "the links, `[[links]]`, a table each (keys below)",
    "routing": f"{' or '.join(repr(p) for p in routing.PROTOCOLS)}: routes from the links "
               "(the default), or FRR's daemons on every router (OSPF; BGP between `asn`s)",
    "multipath": f"{' or '.join(repr(m) for m in routing.MULTIPATH_MODES)}: how a router "
                 "spreads packets over equal-cost paths, a flow to a path by a hash (the "
                 "default) or packet by packet in turn",
    "timers": "the routing protocols' timers, `[timers]` (keys below); only with routing",
}
# A host's or router's TCP: `ecn` (net.ipv4.tcp_ecn: true asks for ECN on the connections
# it opens, false refuses it; unset, the kernel's default answers ECN only when asked) and
# `congestion` (net.ipv4.tcp_congestion_control: what its TCP senders run unless told).
HOST_KEYS = {
    "routes": "static routes: `[\"10.0.2.0/24 via 10.0.1.1\", \"default via 10.0.1.1\"]` "
              "(with static routing the lab adds the rest)",
    "ecn": "`true`: its TCP asks for ECN on the connections it opens; `false`: refuses it; "
           "unset, the kernel's default (answers when asked)",
    "congestion": "its TCP senders' congestion control unless told, e.g. `\"cubic\"` "
                  "(`net.ipv4.tcp_congestion_control`)",
}
ROUTER_KEYS = {
    **HOST_KEYS,
    "asn": "its autonomous system, 1..4294967295 (with `routing = \"ospf\"`: OSPF inside "
           "one, BGP between them)",
    "frr": "FRR configuration lines of your own, added after the lab's (with routing)",
}
NODE_KEYS: dict[str, dict[str, str]] = {"hosts": HOST_KEYS, "routers": ROUTER_KEYS,
                                        "switches": {}}
# A link's own keys; besides them it takes every link property by its Mininet name (bw,
# delay, ...: link_properties.PROPERTIES), for both directions.
LINK_KEYS = {
    "name": "the link's name in `lab link`, events and captures: 1-32 letters, digits, "
            "'_', '.' or '-' (default: `A-B`)",
    "a": "the node at one end",
    "b": "the node at the other end",
    "a_address": "a's address with its prefix length, `\"10.0.1.1/24\"` (none at a switch)",
    "b_address": "b's address with its prefix length (none at a switch)",
    "a_interface": "the interface's name in a (default `A-ethN`, Mininet's way; "
                   "containerlab's `eth1`)",
    "b_interface": "the interface's name in b (default `B-ethN`)",
    "a_to_b": "link properties for the direction from a to b alone, over the link's: "
              "`a_to_b = { bw = \"10M\" }`",
    "b_to_a": "link properties for the direction from b to a alone, over the link's",
    "cost": "its OSPF cost at both ends, 1..65535 (with routing)",
}
LINK_FIELDS = {*LINK_KEYS, *MININET_NAMES}
DATA_DIR = Path(__file__).parents[1] / "data" / "topologies"
# A lab is namespaces and processes on one machine: `lab up`, `status` and `down` take time
# in proportion to its size up to these (bench/lab_scale.py times them).
MAX_NODES = 1000
MAX_LINKS = 2000


@dataclass(frozen=True)
class Shaping:
    """What one direction of a link does to packets. None/0 means 'not limited'. A field
    per row of link_properties.PROPERTIES, which says how each is read and changed."""

    rate: float | None = None  # bits per second
    delay: float = 0.0  # one-way, seconds
    jitter: float = 0.0  # standard deviation of the one-way delay, seconds
    reorder: bool = False  # may jitter reorder packets?
    loss: float = 0.0  # probability, 0..1
    queue: int | None = None  # the queue's limit at the rate limiter, packets
    qdisc: str = "droptail"  # its discipline (disciplines.QDISCS)
    ecn: bool = False  # the discipline marks ECN-capable packets CE instead of dropping
    target: float | None = None  # AQM target delay, seconds (None: the kernel's default)
    interval: float | None = None  # CoDel's interval, seconds
    tupdate: float | None = None  # PIE's and DualPI2's update period, seconds
    step: float | None = None  # DualPI2's L4S marking threshold, seconds
    coupling: int | None = None  # DualPI2's coupling factor
    any_ect: bool = False  # DualPI2 classifies ECT(0) as L4S too
    flows: int | None = None  # fq_codel's and fq_pie's flow queues
    quantum: int | None = None  # bytes a flow queue sends per round
    trace: str | None = None  # a Mahimahi trace's path: it sets when the link sends, and
    # `rate` is then its mean (what theory assumes)

    @property
    def is_shaped(self) -> bool:
        return self.rate is not None or self.delay > 0 or self.jitter > 0 or self.loss > 0

    @property
    def needs_delay_line(self) -> bool:
        return self.delay > 0 or self.jitter > 0

    def describe(self) -> str:
        parts = []
        if self.trace is not None:
            parts.append(f"trace {Path(self.trace).stem} (mean {_format_rate(self.rate or 0)})")
        elif self.rate is not None:
            parts.append(f"{_format_rate(self.rate)}")
        if self.delay or self.jitter:
            parts.append(f"delay {self.delay * 1e3:g} ms one-way")
        if self.jitter:
            parts.append(f"jitter {self.jitter * 1e3:g} ms" + (" (may reorder)"
                                                               if self.reorder else ""))
        if self.loss:
            parts.append(f"loss {self.loss * 100:g}%")
        if self.queue is not None:
            parts.append(f"queue {self.queue} pkt")
        if self.qdisc != "droptail":
            tuned = [f"{name} {value * 1e3:g} ms" if isinstance(value, float)
                     else f"{name} {value}" for name, value in (
                         ("target", self.target), ("interval", self.interval),
                         ("tupdate", self.tupdate), ("flows", self.flows),
                         ("quantum", self.quantum)) if value is not None]
            parts.append(" ".join([self.qdisc, *(["ecn"] if self.ecn else []), *tuned]))
        return ", ".join(parts) or "unshaped"


@dataclass(frozen=True)
class Route:
    destination: ipaddress.IPv4Network
    via: ipaddress.IPv4Address

    def __str__(self) -> str:
        where = "default" if self.destination.prefixlen == 0 else str(self.destination)
        return f"{where} via {self.via}"


@dataclass(frozen=True)
class Node:
    name: str
    kind: str  # "host", "router" or "switch"
    routes: tuple[Route, ...] = ()
    asn: int | None = None  # its autonomous system, when BGP runs
    frr: str = ""  # a raw FRR configuration fragment for this router
    ecn: bool | None = None  # its TCP asks for ECN (None: the kernel's default)
    congestion: str | None = None  # its TCP's congestion control (None: the system's)

    @property
    def sysctls(self) -> list[str]:
        """The settings of its namespace that `ecn` and `congestion` make."""
        settings = [] if self.ecn is None else [f"net.ipv4.tcp_ecn={int(self.ecn)}"]
        if self.congestion is not None:
            settings.append(f"net.ipv4.tcp_congestion_control={self.congestion}")
        return settings


@dataclass(frozen=True)
class Endpoint:
    node: str
    interface: str  # Mininet style: h1-eth0, s1-eth1
    address: ipaddress.IPv4Interface | None


@dataclass(frozen=True)
class Link:
    name: str
    a: Endpoint
    b: Endpoint
    a_to_b: Shaping
    b_to_a: Shaping
    cost: int | None = None  # OSPF cost of both ends (FRR's default: from the bandwidth)

    @property
    def is_shaped(self) -> bool:
        return self.a_to_b.is_shaped or self.b_to_a.is_shaped

    def direction_from(self, node: str) -> Shaping:
        return self.a_to_b if node == self.a.node else self.b_to_a

    def other(self, node: str) -> Endpoint:
        return self.b if node == self.a.node else self.a


@dataclass(frozen=True)
class Topology:
    name: str
    description: str
    nodes: dict[str, Node]
    links: tuple[Link, ...]
    source: str = ""  # the TOML text it was read from, kept with results
    routing: Routing = Routing()

    @property
    def runs_daemons(self) -> bool:
        """Do its routers run FRR (a routing protocol, or a raw fragment)?"""
        return self.routing.dynamic or any(node.frr for node in self.nodes.values())

    def routers(self) -> list[str]:
        return [n.name for n in self.nodes.values() if n.kind == "router"]

    @property
    def routing_summary(self) -> str:
        """How its routers route, in a few words: "ospf inside each AS, BGP between them"."""
        if not self.routing.dynamic and self.runs_daemons:
            return "the routers' own FRR configuration"
        return (self.routing.protocol
                + (" inside each AS, BGP between them"
                   if any(self.nodes[r].asn for r in self.routers()) else "")
                + (", equal-cost paths taken packet by packet" if self.routing.per_packet
                   else ""))

    def adjacent_routers(self) -> list[tuple[str, str]]:
        """Pairs of routers that share a subnet (one link, or switches between them)."""
        pairs = []
        for segment in l2_segments(self):
            routers = sorted({e.node for e in segment if self.nodes[e.node].kind == "router"})
            pairs += [(a, b) for i, a in enumerate(routers) for b in routers[i + 1:]]
        return pairs

    def endpoints_of(self, node: str) -> list[tuple[Endpoint, Link]]:
        found = []
        for link in self.links:
            for end in (link.a, link.b):
                if end.node == node:
                    found.append((end, link))
        return found

    def owner_of(self, address: ipaddress.IPv4Address) -> str | None:
        for link in self.links:
            for end in (link.a, link.b):
                if end.address is not None and end.address.ip == address:
                    return end.node
        return None

    def address_of(self, node: str) -> ipaddress.IPv4Address:
        """The node's first address (what a user means by 'h4' as a destination)."""
        for end, _ in self.endpoints_of(node):
            if end.address is not None:
                return end.address.ip
        raise TopologyError(f"node {node} has no address")

    def hosts(self) -> list[str]:
        return [n.name for n in self.nodes.values() if n.kind == "host"]


def _format_rate(rate: float) -> str:
    for unit, factor in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if rate >= factor:
            return f"{rate / factor:g} {unit}"
    return f"{rate:g} bit/s"


# ---------------------------------------------------------------- loading and validation


def load(name_or_path: str) -> Topology:
    """A shipped topology by name ('portfolio'), or a TOML file by path."""
    text, path = datafiles.read(name_or_path, DATA_DIR, "topology", TopologyError)
    return parse(text, default_name=path.stem, origin=path)


def parse(text: str, default_name: str = "lab", origin: Path | None = None) -> Topology:
    return from_dict(datafiles.parse_toml(text, TopologyError, origin), default_name, text)


def from_dict(data: dict[str, Any], default_name: str = "lab", source: str = "") -> Topology:
    _only(data, set(TOPOLOGY_KEYS), "topology")
    routing_plan = routing.parse(data)
    name = datafiles.name(data.get("name", default_name), LAB_NAME, "topology name",
                          "1-10 lowercase letters, digits or '-', starting with a letter",
                          TopologyError)
    nodes: dict[str, Node] = {}
    raw_routes: dict[str, list[Any]] = {}
    for kind in NODE_KINDS:
        table = data.get(kind, {})
        if not isinstance(table, dict):
            raise TopologyError(f"[{kind}] must be a table of nodes, e.g. {kind}.h1 = {{}}")
        for node_name, spec in table.items():
            datafiles.name(node_name, NODE_NAME, "node name", NODE_NAME_RULE,
                           TopologyError)
            if node_name in nodes:
                raise TopologyError(f"node {node_name} is declared twice")
            spec = spec if spec is not None else {}
            if not isinstance(spec, dict):
                raise TopologyError(f"node {node_name}: must be a table")
            _only(spec, set(NODE_KEYS[kind]), f"node {node_name}")
            nodes[node_name] = Node(node_name, kind[:-1] if kind != "switches" else "switch",
                                    asn=routing.asn(spec.get("asn"), node_name, routing_plan),
                                    frr=routing.fragment(spec.get("frr"), node_name),
                                    **_tcp_settings(spec, f"node {node_name}"))
            raw_routes[node_name] = spec.get("routes", [])
    if not nodes:
        raise TopologyError("the topology has no nodes")
    if len(nodes) > MAX_NODES:
        raise TopologyError(f"the topology has {len(nodes)} nodes, at most {MAX_NODES} (a "
                            "namespace and its processes each, on one machine)")
    raw_links = data.get("links", [])
    if isinstance(raw_links, list) and len(raw_links) > MAX_LINKS:
        raise TopologyError(f"the topology has {len(raw_links)} links, at most {MAX_LINKS}")
    links = _links(raw_links, nodes, routing_plan)
    description = datafiles.text(data.get("description", ""), "description", TopologyError)
    topology = Topology(name, description, nodes, tuple(links), source, routing_plan)
    nodes = {n: replace(node, routes=_routes(n, raw_routes[n], topology))
             for n, node in nodes.items()}
    topology = replace(topology, nodes=nodes)
    _check_addresses(topology)
    if routing_plan.per_packet and not topology.runs_daemons:
        raise TopologyError("multipath = 'per-packet' spreads the equal-cost routes of routing "
                            "daemons: it needs routing = 'ospf' (static routes have one "
                            "gateway each)")
    if routing_plan.dynamic:
        topology = replace(topology, nodes=_default_gateways(topology))
        routing.check_autonomous_systems({r: nodes[r].asn for r in topology.routers()},
                                         topology.adjacent_routers())
    return topology


def _tcp_settings(spec: dict[str, Any], where: str) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    if "ecn" in spec:
        if not isinstance(spec["ecn"], bool):
            raise TopologyError(f"{where}: ecn must be true or false")
        settings["ecn"] = spec["ecn"]
    if "congestion" in spec:
        if not is_congestion_name(spec["congestion"]):
            raise TopologyError(f"{where}: congestion names a TCP congestion control, such "
                                f"as \"cubic\" or \"dctcp\", not {spec['congestion']!r}")
        settings["congestion"] = spec["congestion"]
    return settings


def _default_gateways(topology: Topology) -> dict[str, Node]:
    """With routing daemons, a host that names no routes sends everything to the first
    router on its subnet, as DHCP would have told it."""
    nodes = dict(topology.nodes)
    for segment in l2_segments(topology):
        routers = [e for e in segment if topology.nodes[e.node].kind == "router"]
        if not routers:
            continue
        gateway = routers[0].address
        assert gateway is not None
        for end in segment:
            node = nodes[end.node]
            if node.kind == "host" and not node.routes:
                nodes[end.node] = replace(node, routes=(
                    Route(ipaddress.IPv4Network("0.0.0.0/0"), gateway.ip),))
    return nodes


def _only(table: dict[str, Any], allowed: set[str], where: str) -> None:
    datafiles.only(table, allowed, where, TopologyError)


def _links(raw_links: Any, nodes: dict[str, Node], routing_plan: Routing) -> list[Link]:
    if not isinstance(raw_links, list):
        raise TopologyError("links must be an array of tables: [[links]]")
    counters: dict[str, int] = {}
    taken: dict[str, set[str]] = {}  # node: its interfaces' names (a switch's bridge too)
    links: list[Link] = []
    names: set[str] = set()
    for index, spec in enumerate(raw_links, start=1):
        if not isinstance(spec, dict):
            raise TopologyError(f"link {index}: must be a table")
        label = datafiles.name(spec.get("name", f"{spec.get('a', '?')}-{spec.get('b', '?')}"),
                               LINK_NAME, f"link {index}: name",
                               "1-32 letters, digits, '_', '.' or '-'", TopologyError)
        where = f"link {label}"
        _only(spec, LINK_FIELDS, where)
        ends = []
        for side in ("a", "b"):
            node = spec.get(side)
            if not isinstance(node, str) or node not in nodes:
                raise TopologyError(f"{where}: {side} = {node!r} is not a declared node")
            ends.append(node)
        if ends[0] == ends[1]:
            raise TopologyError(f"{where}: both ends are {ends[0]}")
        if label in names:
            raise TopologyError(f"{where}: two links have this name")
        names.add(label)
        endpoints = []
        for side, node in zip(("a", "b"), ends, strict=True):
            is_switch = nodes[node].kind == "switch"
            number = counters.get(node, 1 if is_switch else 0)
            counters[node] = number + 1
            address = _address(spec.get(f"{side}_address"), f"{where}: {side}_address",
                               is_switch, node)
            interface = _interface(spec.get(f"{side}_interface"), f"{node}-eth{number}",
                                   f"{where}: {side}_interface", node,
                                   taken.setdefault(node, {node} if is_switch else set()))
            endpoints.append(Endpoint(node, interface, address))
        both = reshape(spec, where, Shaping())
        a_to_b = reshape(spec.get("a_to_b", {}), f"{where} a_to_b", both)
        b_to_a = reshape(spec.get("b_to_a", {}), f"{where} b_to_a", both)
        links.append(Link(label, endpoints[0], endpoints[1], a_to_b, b_to_a,
                          routing.cost(spec.get("cost"), label, routing_plan)))
    return links


def _interface(value: Any, default: str, where: str, node: str, taken: set[str]) -> str:
    """A link end's interface name in its node: as given, else `default`; unique there."""
    if value is None:
        if not INTERFACE_NAME.fullmatch(default):
            raise TopologyError(f"{where} is missing: {node}'s name is too long for the lab's "
                                f"own interface names ({default}): give one (e.g. eth1)")
        name = default
    else:
        name = datafiles.name(value, INTERFACE_NAME, where, INTERFACE_RULE, TopologyError)
        if name == "lo":
            raise TopologyError(f"{where}: lo is every node's loopback")
    if name in taken:
        raise TopologyError(f"{where}: {node} has an interface {name} already")
    taken.add(name)
    return name


def _address(value: Any, where: str, is_switch: bool, node: str
             ) -> ipaddress.IPv4Interface | None:
    if value is None:
        if not is_switch:
            raise TopologyError(f"{where} is missing: {node} needs an address such as "
                                "'10.0.0.2/24'")
        return None
    if is_switch:
        raise TopologyError(f"{where}: {node} is a switch; switch ports have no address")
    try:
        address = ipaddress.IPv4Interface(value)
    except (ValueError, TypeError):
        raise TopologyError(f"{where} = {value!r} is not an IPv4 address with a prefix "
                            "length, such as '10.0.0.2/24'") from None
    if "/" not in str(value):
        raise TopologyError(f"{where} = {value!r} needs a prefix length, e.g. '{value}/24'")
    network = address.network
    if network.prefixlen < 31 and address.ip in (network.network_address,
                                                  network.broadcast_address):
        raise TopologyError(f"{where} = {value!r} is the network or broadcast address of "
                            f"{network}")
    return address


def reshape(spec: Any, where: str, base: Shaping) -> Shaping:
    """Mininet's link fields (bw, delay, jitter, loss, ...) in `spec`, over `base`."""
    if not isinstance(spec, dict):
        raise TopologyError(f"{where}: must be a table")
    if where.endswith(("a_to_b", "b_to_a")):
        _only(spec, set(MININET_NAMES), where)
    values = parse_mininet(spec, where)
    if values.get("qdisc", base.qdisc) != base.qdisc:
        # Another discipline starts from its own defaults, not the old one's tuning (ECN
        # stays asked for where the new one can mark).
        fresh = Shaping()
        base = replace(base, **{p.name: getattr(fresh, p.name) for p in PROPERTIES
                                if p.qdiscs and (p.name != "ecn"
                                                 or values["qdisc"] not in p.qdiscs)})
    if "trace" in values:
        if "rate" in values:
            raise TopologyError(f"{where}: trace and bw both set how fast the link sends: "
                                "give one")
        values["rate"] = traces.load(values["trace"], f"{where}: trace").mean_rate
    elif "rate" in values and base.trace is not None:
        raise TopologyError(f"{where}: the link's trace sets how fast it sends: bw cannot "
                            "change it")
    shaping = replace(base, **values)
    if shaping.queue is not None and shaping.rate is None:
        raise TopologyError(f"{where}: max_queue_size needs bw (a queue only forms behind a "
                            "rate limit)")
    if shaping.qdisc != "droptail" and shaping.rate is None:
        raise TopologyError(f"{where}: qdisc needs bw (a queue only forms behind a rate "
                            "limit)")
    check_qdisc(asdict(shaping), where)
    return shaping


def _routes(node: str, raw: Any, topology: Topology) -> tuple[Route, ...]:
    where = f"node {node}: routes"
    if not isinstance(raw, list) or not all(isinstance(r, str) for r in raw):
        raise TopologyError(f"{where} must be a list of strings such as "
                            "'10.0.1.0/24 via 10.0.0.1' or 'default via 10.0.0.1'")
    if raw and topology.nodes[node].kind == "switch":
        raise TopologyError(f"{where}: {node} is a switch and cannot route")
    connected = [end.address.network for end, _ in topology.endpoints_of(node) if end.address]
    routes: list[Route] = []
    for text in raw:
        match = re.fullmatch(r"\s*(\S+)\s+via\s+(\S+)\s*", text)
        if not match:
            raise TopologyError(f"{where}: '{text}' is not 'DESTINATION via GATEWAY'")
        destination = "0.0.0.0/0" if match.group(1) == "default" else match.group(1)
        try:
            network = ipaddress.IPv4Network(destination)
            gateway = ipaddress.IPv4Address(match.group(2))
        except ValueError as error:
            raise TopologyError(f"{where}: '{text}': {error}") from None
        if not any(gateway in subnet for subnet in connected):
            raise TopologyError(f"{where}: '{text}': gateway {gateway} is not on any subnet "
                                f"of {node} ({', '.join(map(str, connected)) or 'none'}), "
                                "so it cannot be reached")
        owner = topology.owner_of(gateway)
        if owner is None:
            raise TopologyError(f"{where}: '{text}': no node has address {gateway}")
        if owner == node:
            raise TopologyError(f"{where}: '{text}': {gateway} is {node}'s own address")
        if any(r.destination == network for r in routes):
            raise TopologyError(f"{where}: two routes for {network}")
        routes.append(Route(network, gateway))
    return tuple(routes)


def _check_addresses(topology: Topology) -> None:
    seen: dict[ipaddress.IPv4Address, str] = {}
    for link in topology.links:
        for end in (link.a, link.b):
            if end.address is None:
                continue
            if end.address.ip in seen:
                raise TopologyError(f"link {link.name}: address {end.address.ip} of {end.node} "
                                    f"is already used by {seen[end.address.ip]}")
            seen[end.address.ip] = end.node
    for segment in l2_segments(topology):
        addressed = [(end, end.address) for end in segment if end.address is not None]
        for end, address in addressed[1:]:
            first, first_address = addressed[0]
            if address.network != first_address.network:
                raise TopologyError(
                    f"{end.node} address {address} is outside the subnet "
                    f"{first_address.network} of {first.node}, on the same link "
                    "or switch")


def l2_segments(topology: Topology) -> list[list[Endpoint]]:
    """The addressed endpoints that share one broadcast domain (a link, or switches)."""
    segments: list[list[Endpoint]] = []
    switch_segment: dict[str, int] = {}
    for link in topology.links:
        ends = [link.a, link.b]
        switches = [e.node for e in ends if topology.nodes[e.node].kind == "switch"]
        joined = {switch_segment[s] for s in switches if s in switch_segment}
        if joined:
            target = min(joined)
            for other in sorted(joined - {target}, reverse=True):
                segments[target].extend(segments[other])
                segments[other] = []
                for name, seg in switch_segment.items():
                    if seg == other:
                        switch_segment[name] = target
        else:
            target = len(segments)
            segments.append([])
        segments[target].extend(e for e in ends if topology.nodes[e.node].kind != "switch")
        for s in switches:
            switch_segment[s] = target
    return [segment for segment in segments if segment]


def pair(**values: Any) -> Topology:
    """Two hosts joined by one link: a classic lab's two computers and its tc command.
    `values` by the link properties' names (rate="100M", queue=50, reorder=True), and
    a_to_b / b_to_a: one direction's own, by the same names."""
    one_way: dict[str, Any] = {side: to_mininet(values.pop(side))
                               for side in ("a_to_b", "b_to_a") if side in values}
    unknown = sorted(set(values) - {p.name for p in PROPERTIES})
    if unknown:
        raise TopologyError(f"pair: {unknown[0]} is not a link property "
                            f"({', '.join(p.name for p in PROPERTIES)})")
    link: dict[str, Any] = {"name": "h1-h2", "a": "h1", "a_address": "10.0.0.1/24",
                            "b": "h2", "b_address": "10.0.0.2/24", **to_mininet(values),
                            **one_way}
    # a queue that marks ECN is there to be seen: both hosts' TCP asks for it (the kernel's
    # default only answers a peer that asks, so nothing would be marked)
    marks = bool(values.get("ecn")) or any(
        bool(values_of.get("ecn")) for side in ("a_to_b", "b_to_a")
        if isinstance(values_of := link.get(side), dict))
    host: dict[str, Any] = {"ecn": True} if marks else {}
    data = {"name": "pair", "description": "two hosts joined by one shaped link",
            "hosts": {"h1": dict(host), "h2": dict(host)}, "links": [link]}
    return from_dict(data, "pair")
