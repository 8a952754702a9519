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
