"""The routes the kernel forwards by, read back from every node, as the model's routes.

Theory follows these, not the topology file's intent: once the daemons have installed their
routes (or a link has failed and they have moved), `installed` gives a Topology whose nodes
carry exactly the routes their kernels use, and theory.path walks them hop by hop.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from dataclasses import dataclass, replace

from ...model import theory
from ...model.topology import Route, Topology, TopologyError
from . import perpacket

MAX_HOPS = 32  # a path longer than this is a routing loop
MAX_PATHS = 16  # of one flow spread packet by packet: enough to show, bounded in a grid


@dataclass(frozen=True)
class Installed:
    """One node's kernel routes by a gateway: destination, the gateways in use (several for
    an equal-cost multipath route), and who put it there (kernel, static, ospf, bgp)."""

    destination: ipaddress.IPv4Network
    gateways: tuple[ipaddress.IPv4Address, ...]
    protocol: str


def read(nodes: list[str]) -> dict[str, list[Installed]]:
    """Every node's routes via a gateway, read in parallel (`ip -json route`)."""
    readers = {node: subprocess.Popen(["ip", "-n", node, "-json", "route", "show",
                                       "table", "main"], stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True)
               for node in nodes}
    tables = {}
    for node, reader in readers.items():
        out, _ = reader.communicate()
        try:
            entries = json.loads(out) if reader.returncode == 0 and out.strip() else []
        except ValueError:
            entries = []
        tables[node] = parse(entries)
    return tables


def parse(entries: list[dict]) -> list[Installed]:
    """`ip -json route` entries as the kernel uses them: unicast routes by a gateway, a
    nexthop on a link without carrier left out (the lab sets ignore_routes_with_linkdown),
    and of several routes to one destination the one with the lowest metric."""
    best: dict[ipaddress.IPv4Network, tuple[int, Installed]] = {}
    for entry in entries:
        if entry.get("type", "unicast") != "unicast" or "linkdown" in entry.get("flags", []):
            continue
        hops = entry.get("nexthops") or [entry]
        gateways = tuple(ipaddress.IPv4Address(hop["gateway"]) for hop in hops
                         if "gateway" in hop and "linkdown" not in hop.get("flags", []))
        if not gateways:
            continue
        destination = entry.get("dst", "default")
        network = ipaddress.IPv4Network("0.0.0.0/0" if destination == "default"
                                        else destination)
        metric = int(entry.get("metric", 0))
        if network not in best or metric < best[network][0]:
            best[network] = (metric, Installed(network, gateways,
                                               str(entry.get("protocol", "boot"))))
    return [installed for _, installed in best.values()]


def installed(topology: Topology, tables: dict[str, list[Installed]]) -> Topology:
    """The topology with every node's routes replaced by what its kernel holds (of a
    multipath route, its first gateway: theory predicts one path per destination)."""
    nodes = dict(topology.nodes)
    for name, routes in tables.items():
        nodes[name] = replace(nodes[name], routes=tuple(
            Route(r.destination, r.gateways[0]) for r in routes))
    return replace(topology, nodes=nodes)


def forwarding_nodes(topology: Topology) -> list[str]:
    """The nodes with routing tables: hosts and routers (a switch only bridges)."""
    return [n.name for n in topology.nodes.values() if n.kind != "switch"]


def routed(topology: Topology) -> Topology:
    """The topology with the routes every node's kernel holds now, where daemons route it
    (theory follows them); as it is where the file's static routes are all there is."""
    if not topology.runs_daemons:
        return topology
    return installed(topology, read(forwarding_nodes(topology)))


def unreachable(topology: Topology) -> list[tuple[str, str]]:
    """Host pairs whose packets do not arrive along the topology's routes."""
    hosts = topology.hosts()
    missing = []
    for source in hosts:
        for target in hosts:
            if source == target:
                continue
            try:
                theory.path(topology, source, target)
            except TopologyError:
                missing.append((source, target))
    return missing


def flow_paths(topology: Topology, source: str, five_tuple: tuple[str, int, str, int, str]
               ) -> list[list[str]]:
    """The nodes that forward one flow from `source`, asked of each node's kernel with the
    flow's addresses and ports (`ip route get ... ipproto P sport S dport D`, arriving on
    the interface the previous hop sent it to): where equal-cost paths split, the kernel
    hashes these, so this is the path the flow's packets took; where a router spreads
    packets in turn (multipath = "per-packet"), every path its marks lead to. Each ends at
    the destination's owner, or where a node has no route."""
    local, local_port, remote, remote_port, protocol = five_tuple
    owner = topology.owner_of(ipaddress.IPv4Address(remote))
    query = [remote, "from", local, "ipproto", protocol, "sport", str(local_port), "dport",
             str(remote_port)]
    found: list[list[str]] = []
    pending: list[tuple[list[str], str | None]] = [([source], None)]
    while pending and len(found) < MAX_PATHS:
        path, arrived_on = pending.pop()
        node = path[-1]
        per_packet = (topology.routing.per_packet and topology.nodes[node].kind == "router")
        marks = range(1, perpacket.WAYS + 1) if per_packet else [None]
        hops = dict.fromkeys(_next_hop(topology, node, arrived_on, query, mark)
                             for mark in marks)
        for next_node, interface in hops:
            if next_node is None or len(path) > MAX_HOPS:  # no route, or a loop
                found.append(path)
            elif interface is None:  # on a subnet of this node: delivered
                found.append(path + [next_node] if next_node != node else path)
            elif next_node == owner:
                found.append(path + [next_node])
            else:
                pending.append((path + [next_node], interface))
    return sorted(found)


def _next_hop(topology: Topology, node: str, arrived_on: str | None, query: list[str],
              mark: int | None) -> tuple[str | None, str | None]:
    """Where `node` sends the flow: the next node and the interface it arrives on there;
    (the destination's owner, None) when it is on this node's subnet; (None, None) when
    the node has no route."""
    command = ["ip", "-n", node, "-json", "route", "get", *query]
    command += ["iif", arrived_on] if arrived_on else []
    command += ["mark", str(mark)] if mark is not None else []
    done = subprocess.run(command, capture_output=True, text=True)
    try:
        route = json.loads(done.stdout)[0] if done.returncode == 0 else {}
    except (ValueError, IndexError):
        route = {}
    gateway = route.get("gateway")
    next_node = topology.owner_of(ipaddress.IPv4Address(gateway or query[0]))
    if not route or next_node is None:
        return None, None
    if gateway is None:
        return next_node, None
    return next_node, next((end.interface for link in topology.links
                            for end in (link.a, link.b)
                            if end.node == next_node and end.address is not None
                            and str(end.address.ip) == gateway), None)
