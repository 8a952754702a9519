"""MPTCP flows (mptcp = true) over every path the topology offers, not only the routed one.

A single-homed host's MPTCP connection opens a subflow to each address its peer announces,
and routing takes them all the same way unless told otherwise. So for each further path
theory.subflow_paths finds (sharing no link between routers with the earlier ones), the
target gets an address of its own for that path (free in the subnet the path reaches it by,
added as a /32), announces it (an MPTCP `signal` endpoint), and every node on that path
routes the address along it (a /32 route, which beats the routing protocol's prefixes and
which FRR leaves alone); both hosts accept that many subflows. What is done is undone after
the step; what a killed run leaves stays inside the lab's own namespaces until `lab down`.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from ..model import theory
from ..model.outcomes import FlowOutcome
from ..model.topology import Topology
from ..net.system import CommandError, run

MAX_SUBFLOWS = 8  # the kernel's limit on an MPTCP connection's extra subflows
ENDPOINT_ID = 100  # the first id of the endpoints made here (ids are a node's, 1-255)


@dataclass
class Steering:
    """What was changed in which node, to be undone in reverse order."""

    undo: list[tuple[str, list[str]]] = field(default_factory=list)
    limits: dict[str, tuple[int, int]] = field(default_factory=dict)  # node -> as before
    taken: set[ipaddress.IPv4Address] = field(default_factory=set)  # one endpoint each

    def restore(self) -> list[str]:
        """Undo everything, the last change first; what could not be undone, in words."""
        failed = []
        for node, command in reversed(self.undo):
            done = run(["ip", "-n", node, *command], check=False)
            if done.returncode != 0:
                failed.append(f"{node}: ip {' '.join(command)}: "
                              f"{(done.stderr.strip().splitlines() or ['failed'])[0]}")
        for node, (subflows, accepted) in self.limits.items():
            run(["ip", "-n", node, "mptcp", "limits", "set", "subflows", str(subflows),
                 "add_addr_accepted", str(accepted)], check=False)
        self.undo.clear()
        self.limits.clear()
        return failed


def steer(model: Topology, outcomes: list[FlowOutcome], down: frozenset[str]
          ) -> Steering | None:
    """Give every mptcp flow's further paths an address each and route it along its path;
    each outcome's `subflow_addresses` says which. None for a step without mptcp flows.
    CommandError (one line) on a failure, with what was done already undone."""
    if not any(outcome.flow.mptcp for outcome in outcomes):
        return None
    steering = Steering()
    try:
        for outcome in outcomes:
            if outcome.flow.mptcp:
                _steer_flow(model, outcome, down, steering)
    except CommandError:
        steering.restore()
        raise
    return steering


def undo(steering: Steering | None, say) -> None:
    """Undo a step's steering (if any), a warning for each change that would not go."""
    if steering is not None:
        for failure in steering.restore():
            say(f"  warning: could not undo an MPTCP path: {failure}")


def _steer_flow(model: Topology, outcome: FlowOutcome, down: frozenset[str],
                steering: Steering) -> None:
    flow = outcome.flow
    paths = theory.subflow_paths(model, flow.source, outcome.address, down)
    for node in (flow.source, flow.target):
        _allow_subflows(node, steering)
    for route in paths[1:]:
        entry, node = route.hops[-1]
        arrival = entry.other(node)
        if arrival.address is None:
            continue
        address = _free_address(model, arrival.address.network, steering.taken)
        if address is None:
            continue  # a subnet with no address to spare (a /30): this path stays unused
        steering.taken.add(address)
        ident = str(ENDPOINT_ID + len(steering.taken))
        _change(steering, flow.target, ["addr", "add", f"{address}/32", "dev", arrival.interface],
                ["addr", "del", f"{address}/32", "dev", arrival.interface])
        _change(steering, flow.target, ["mptcp", "endpoint", "add", str(address), "dev",
                                        arrival.interface, "id", ident, "signal"],
                ["mptcp", "endpoint", "delete", "id", ident])
        for hop_node, gateway in _gateways(model, route):
            _change(steering, hop_node, ["route", "replace", f"{address}/32", "via",
                                         str(gateway)],
                    ["route", "del", f"{address}/32", "via", str(gateway)])
        outcome.subflow_addresses.append(str(address))


def _allow_subflows(node: str, steering: Steering) -> None:
    if node in steering.limits:
        return
    shown = run(["ip", "-n", node, "mptcp", "limits", "show"]).stdout.split()
    values = dict(zip(shown[::2], shown[1::2], strict=False))
    steering.limits[node] = (int(values.get("subflows", 2)),
                             int(values.get("add_addr_accepted", 0)))
    run(["ip", "-n", node, "mptcp", "limits", "set", "subflows", str(MAX_SUBFLOWS),
         "add_addr_accepted", str(MAX_SUBFLOWS)])


def _change(steering: Steering, node: str, command: list[str], undo: list[str]) -> None:
    run(["ip", "-n", node, *command])
    steering.undo.append((node, undo))


def _free_address(model: Topology, network: ipaddress.IPv4Network,
                  taken: set[ipaddress.IPv4Address]) -> ipaddress.IPv4Address | None:
    """The highest address of `network` that no node has and no steering took."""
    used = {end.address.ip for link in model.links for end in (link.a, link.b)
            if end.address is not None} | taken
    last = int(network.broadcast_address) - (1 if network.prefixlen < 31 else 0)
    first = int(network.network_address) + (1 if network.prefixlen < 31 else 0)
    for number in range(last, max(first, last - 1024) - 1, -1):
        address = ipaddress.IPv4Address(number)
        if address not in used:
            return address
    return None


def _gateways(model: Topology, route: theory.Path) -> list[tuple[str, ipaddress.IPv4Address]]:
    """(node, next hop's address) for every forwarding node along the path but its last:
    where the path goes through switches, the next forwarding node's address on the link
    it arrives by."""
    found = []
    leaving: str | None = None
    for link, node in route.hops:
        if model.nodes[node].kind != "switch":
            leaving = node
        arrival = link.other(node)
        if model.nodes[arrival.node].kind == "switch" or leaving is None:
            continue
        if arrival.address is not None:
            found.append((leaving, arrival.address.ip))
    return found
