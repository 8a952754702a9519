"""Turn a topology into system commands (a pure plan), and run the plan fast.

Layout. Every node is a network namespace named like the node (h1, r1, s1); a switch is a
Linux bridge inside its own namespace. A shaped link between two hosts or routers runs
through a hidden wire namespace (`<lab>-wire`) that routes it transparently:

    r1-eth1 ==veth== w1a [wire: loss+delay at ingress, route, rate+queue at egress] w1b
    w1b ==veth== r2-eth0

Why a routed middle and not shaping on r1-eth1 itself: packets there are still owned by
the sending socket, so TCP small queues would throttle the sender instead of the queue
filling; and a delay applied inside the receiver comes after its receive timestamp, so
ping would not see it. In the wire, packets are orphaned and the receiver stamps them after
the delay. Static neighbour entries and fixed MAC addresses replace ARP, and the TTL is
given back, so the middle is invisible (traceroute shows r1 then r2).

Every namespace is configured by one shell script (sysctl, ethtool, ip -batch,
iptables-restore, tc -batch), and the scripts run in parallel.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from typing import Any

from ..model.topology import Link, Shaping, Topology, TopologyError
from . import stages
from .shaping.nfqueue import CE_MARK
from .system import CommandError, run

WIRE_SUFFIX = "-wire"
FIRST_INDEX = 1000  # explicit ifindexes, above what the kernel hands out by itself
# Offloads. Senders hand the kernel 64 KB segments and receivers take aggregates (GRO), as
# real NICs let them: the per-packet cost of a 1 Gbit/s link otherwise exceeds two cores.
# The wire still sees what a real link carries: its rate limiter splits every aggregate into
# packets before they queue (tbf_segment), so queue sizes are in real packets. A direction
# whose loss or reordering must hit packets one by one gets them one by one instead: the
# sending interface segments in software and the wire port does not aggregate.
OFFLOADS_ON = "tso on gso on gro on tx-udp-segmentation on"
RECEIVE_AGGREGATED = "gro on"
SEND_PER_PACKET = "tso off gso off tx-udp-segmentation off"
RECEIVE_PER_PACKET = "gro off"
# Routing daemons. A nexthop on a link without carrier is not used (a failed link fails
# over, as on real routers); equal-cost paths are chosen per flow (addresses and ports);
# reverse-path filtering would drop the asymmetric paths that routing may choose.
ROUTING_SYSCTLS = ["net.ipv4.conf.all.ignore_routes_with_linkdown=1",
                   "net.ipv4.fib_multipath_hash_policy=1",
                   "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"]
# Routing daemons manage the routers' neighbour entries themselves (zebra replaces the
# lab's static ones), so the wire answers ARP for the far end of each of its links with
# its own port's address (proxy ARP, at once rather than after the usual random delay).
PROXY_ARP_SYSCTLS = ("net.ipv4.conf.{port}.proxy_arp=1", "net.ipv4.neigh.{port}.proxy_delay=0",
                     "net.ipv4.conf.{port}.rp_filter=0")
# OSPF's hellos and floods go to 224.0.0.5 and .6 with TTL 1: the wire namespace does not
# route multicast, so a shaped link between routers hands link-local multicast straight
# across (unicast, such as BGP and BFD, is routed and shaped like any other packet).
LINK_LOCAL_MULTICAST = "224.0.0.0/24"


# The wire gives back the hop its routing takes from the TTL. A packet that arrives with 255
# (the most there is: BFD and other GTSM protocols send it and accept nothing less) cannot
# go up by one, so it is marked and set back to 255 on its way out.
FULL_TTL_MARK = 0x255
TTL_RESTORE = [f"-A PREROUTING -m ttl --ttl-eq 255 -j MARK --set-mark {FULL_TTL_MARK}",
               "-A PREROUTING -j TTL --ttl-inc 1",
               f"-A POSTROUTING -m mark --mark {FULL_TTL_MARK} -j TTL --ttl-set 255"]


# A packet the own discipline marked comes back from its queue with CE_MARK (the verdict
# sets it): the ECN field is set to CE (the target fixes the checksum), the mark cleared,
# before anything else in mangle looks at marks.
CE_RULES = [f"-A PREROUTING -m mark --mark {CE_MARK:#x}/{CE_MARK:#x} -j ECN --ecn-ip-ect 3",
            f"-A PREROUTING -m mark --mark {CE_MARK:#x}/{CE_MARK:#x} -j MARK --set-xmark "
            f"0x0/{CE_MARK:#x}"]


@dataclass
class NamespacePlan:
    sysctls: list[str] = field(default_factory=list)
    offloads: dict[str, str] = field(default_factory=dict)  # interface: ethtool -K settings
    ip_first: list[str] = field(default_factory=list)  # lo, bridges, ports, addresses
    ip_then: list[str] = field(default_factory=list)  # neighbours, rules, routes
    iptables: list[str] = field(default_factory=list)  # raw PREROUTING rules
    ttl_restore: bool = False
    ce_rules: bool = False  # the own discipline's CE marks are set here
    tc: list[str] = field(default_factory=list)

    def script(self) -> str:
        lines = ["set -e"]
        if self.sysctls:
            lines.append("sysctl -qw " + " ".join(self.sysctls))
        for interface, settings in self.offloads.items():
            lines.append(f"ethtool -K {interface} {settings}")
        lines.append(_heredoc("ip -batch -", self.ip_first + self.ip_then))
        if self.iptables or self.ttl_restore or self.ce_rules:
            tables = []
            if self.iptables:
                tables += ["*raw", *self.iptables, "COMMIT"]
            if self.ttl_restore or self.ce_rules:
                tables += ["*mangle", *(CE_RULES if self.ce_rules else []),
                           *(TTL_RESTORE if self.ttl_restore else []), "COMMIT"]
            lines.append(_heredoc("iptables-restore", tables))
        if self.tc:
            lines.append(_heredoc("tc -batch -", self.tc))
        return "\n".join(lines) + "\n"


def _heredoc(command: str, body: list[str]) -> str:
    return f"{command} <<'SIMPLEPERF_EOF'\n" + "\n".join(body) + "\nSIMPLEPERF_EOF"


@dataclass
class Plan:
    lab: str
    backend: str
    root_batch: list[str]
    namespaces: dict[str, NamespacePlan]
    # For the delay line: namespace, queue, delay, jitter, reorder.
    delay_queues: list[dict[str, Any]]

    @property
    def namespace_names(self) -> list[str]:
        return list(self.namespaces)

    def delay_line_entries(self, created: float) -> list[dict[str, Any]]:
        """The delay lines' plan for a lab created at `created` (wall clock): every trace
        starts then, so results can tell what it offered when."""
        return [{**queue, "epoch": created} if queue.get("trace") else queue
                for queue in self.delay_queues]


def wire_namespace(lab: str) -> str:
    return lab + WIRE_SUFFIX


def _mac(link_index: int, role: int) -> str:
    return f"02:53:50:{link_index >> 8:02x}:{link_index & 0xFF:02x}:{role:02x}"


def plan(topology: Topology, backend: str) -> Plan:
    """Everything to run, without running anything. Raises TopologyError for what the
    chosen backend cannot build."""
    wire = wire_namespace(topology.name)
    routed = routed_links(topology)
    namespaces = {name: NamespacePlan() for name in topology.nodes}
    if routed:
        namespaces[wire] = NamespacePlan()
    root: list[str] = []  # after the namespaces exist (see execute)
    for name, space in namespaces.items():
        space.sysctls += ["net.ipv6.conf.all.disable_ipv6=1",
                          "net.ipv6.conf.default.disable_ipv6=1"]
        space.ip_first.append("link set lo up")
        kind = topology.nodes[name].kind if name in topology.nodes else "wire"
        if name in topology.nodes:
            space.sysctls += topology.nodes[name].sysctls
        if kind in ("router", "wire"):
            space.sysctls.append("net.ipv4.ip_forward=1")
        if topology.runs_daemons and kind != "wire":
            space.sysctls += ROUTING_SYSCTLS
        if kind == "switch":
            space.ip_first += [f"link add {name} type bridge stp_state 0",
                               f"link set {name} up"]
    delay_queues: list[dict[str, Any]] = []
    # Each veth end gets its own ifindex. Indexes are per namespace, so the first veth made
    # in two fresh namespaces would get the same one on both ends; the kernel then takes its
    # carrier change for a non-urgent event and a bridge port stays disabled for up to 1 s.
    indexes = iter(range(FIRST_INDEX, FIRST_INDEX + 4 * len(topology.links)))
    for link in topology.links:
        if link in routed:
            root += _routed_link(link, routed.index(link) + 1, wire, namespaces, backend,
                                 delay_queues, indexes)
            if topology.runs_daemons:
                _serve_routing_daemons(namespaces[wire], *_ports(routed.index(link) + 1))
        else:
            root.append(f"link add {link.a.interface} netns {link.a.node} index "
                        f"{next(indexes)} type veth peer name {link.b.interface} netns "
                        f"{link.b.node} index {next(indexes)}")
            if link.is_shaped:
                _shape_at_endpoints(topology, link, namespaces)
        for end in (link.a, link.b):
            space = namespaces[end.node]
            if end.address is None:
                space.ip_first += [f"link set {end.interface} master {end.node}",
                                   f"link set {end.interface} up"]
            else:
                space.offloads.setdefault(end.interface, OFFLOADS_ON)
                space.ip_first += [f"addr add {end.address} dev {end.interface}",
                                   f"link set {end.interface} up"]
    for node in topology.nodes.values():
        namespaces[node.name].ip_then += [f"route add {route}" for route in node.routes]
    return Plan(topology.name, backend, root, namespaces, delay_queues)


def routed_links(topology: Topology) -> list[Link]:
    """The links that run through the wire namespace, in the order that numbers their ports."""
    return [link for link in topology.links
            if link.is_shaped and _both_routable(topology, link)]


def delay_queue_directions(topology: Topology) -> dict[int, tuple[str, str]]:
    """Each delay line queue's number and the link direction it carries (link name,
    "a_to_b" or "b_to_a"), as _routed_link numbers them."""
    found = {}
    for index, link in enumerate(routed_links(topology), start=1):
        found[2 * index - 1] = (link.name, "a_to_b")
        found[2 * index] = (link.name, "b_to_a")
    return found


def wire_egress(topology: Topology) -> dict[tuple[str, str], tuple[str, str]]:
    """Where each routed link direction's kernel queue sits: (link, "a_to_b" or "b_to_a")
    -> (the wire namespace, the port it leaves by; the ifb behind the port it enters by,
    where the kernel's CAKE comes first: stages.cake_first). lab web reads the qdiscs
    there."""
    wire = wire_namespace(topology.name)
    found = {}
    for number, link in enumerate(routed_links(topology), start=1):
        port_a, port_b = _ports(number)
        for way, ingress, egress in (("a_to_b", port_a, port_b), ("b_to_a", port_b, port_a)):
            first = stages.cake_first(getattr(link, way))
            found[(link.name, way)] = (wire, ifb_of(ingress) if first else egress)
    return found


def kernel_queues(topology: Topology, backend: str, only: str | None = None
                  ) -> dict[str, str]:
    """The link directions (`link NAME a_to_b`) whose active queue discipline the kernel
    must run, and which: all of them with netem; with the own shaper, those its delay line
    does not (a discipline it lacks, or a link to a switch, where no delay line sits).
    `only`: one link's."""
    routed = routed_links(topology)
    return {f"link {link.name} {side}": shaping.qdisc for link in topology.links
            if only in (None, link.name)
            for side, shaping in (("a_to_b", link.a_to_b), ("b_to_a", link.b_to_a))
            if shaping.qdisc != "droptail"
            and not (link in routed and stages.runs_own(shaping, backend))}


def wire_ports(topology: Topology, link: Link) -> tuple[str, str] | None:
    """The wire namespace's ports of a routed link: towards a, towards b (None: the link is
    a plain veth pair)."""
    routed = routed_links(topology)
    if link not in routed:
        return None
    return _ports(routed.index(link) + 1)


def _ports(index: int) -> tuple[str, str]:
    return f"w{index}a", f"w{index}b"


def _both_routable(topology: Topology, link: Link) -> bool:
    return all(topology.nodes[end.node].kind != "switch" for end in (link.a, link.b))


def _shape_at_endpoints(topology: Topology, link: Link,
                        namespaces: dict[str, NamespacePlan]) -> None:
    """A link to a switch: rate and queue at each end's egress; nothing else is possible."""
    switch = next(e.node for e in (link.a, link.b) if topology.nodes[e.node].kind == "switch")
    for end, shaping in ((link.a, link.a_to_b), (link.b, link.b_to_a)):
        if shaping.delay or shaping.jitter or shaping.loss or shaping.trace:
            raise TopologyError(f"link {link.name}: delay, jitter, loss and traces need both "
                                f"ends to be hosts or routers, and {switch} is a switch: put "
                                "the slow link between routers")
        if shaping.rate is not None:
            namespaces[end.node].tc += [q.command("add") for q in
                                        stages.egress(end.interface, shaping)]


def _per_packet(shaping: Shaping, backend: str) -> bool:
    """Loss, reordering and the own discipline act on single packets, never on an aggregate
    of them."""
    return (shaping.loss > 0 or (shaping.jitter > 0 and shaping.reorder)
            or stages.runs_own(shaping, backend))


def _routed_link(link: Link, index: int, wire: str, namespaces: dict[str, NamespacePlan],
                 backend: str, delay_queues: list[dict[str, Any]], indexes) -> list[str]:
    a, b = link.a, link.b
    assert a.address is not None and b.address is not None
    port_a, port_b = _ports(index)
    mac_a, mac_port_a, mac_port_b, mac_b = (_mac(index, role) for role in (1, 2, 3, 4))
    root = [f"link add {a.interface} netns {a.node} address {mac_a} index {next(indexes)} "
            f"type veth peer name {port_a} netns {wire} address {mac_port_a} "
            f"index {next(indexes)}",
            f"link add {port_b} netns {wire} address {mac_port_b} index {next(indexes)} "
            f"type veth peer name {b.interface} netns {b.node} address {mac_b} "
            f"index {next(indexes)}"]
    namespaces[a.node].ip_then.append(
        f"neigh replace {b.address.ip} lladdr {mac_port_a} dev {a.interface} nud permanent")
    namespaces[b.node].ip_then.append(
        f"neigh replace {a.address.ip} lladdr {mac_port_b} dev {b.interface} nud permanent")
    for end, shaping in ((a, link.a_to_b), (b, link.b_to_a)):
        namespaces[end.node].offloads[end.interface] = (
            f"{SEND_PER_PACKET} {RECEIVE_AGGREGATED}" if _per_packet(shaping, backend)
            else OFFLOADS_ON)
    space = namespaces[wire]
    space.offloads[port_a] = (RECEIVE_PER_PACKET if _per_packet(link.a_to_b, backend)
                              else RECEIVE_AGGREGATED)
    space.offloads[port_b] = (RECEIVE_PER_PACKET if _per_packet(link.b_to_a, backend)
                              else RECEIVE_AGGREGATED)
    space.ip_first += [f"link set {port_a} up", f"link set {port_b} up"]
    space.ttl_restore = True
    directions = ((port_a, port_b, b.address, mac_b, link.a_to_b, 2 * index - 1),
                  (port_b, port_a, a.address, mac_a, link.b_to_a, 2 * index))
    for ingress, egress, far_end, far_mac, shaping, number in directions:
        if shaping.trace is not None and backend != "own":
            raise TopologyError(f"link {link.name}: a trace is followed by the own shaper's "
                                "delay line (netem cannot): use --shaper own")
        table = 1000 + number
        space.ip_then += [
            f"neigh replace {far_end.ip} lladdr {far_mac} dev {egress} nud permanent",
            f"rule add iif {ingress} table {table} pref {table}",
            f"route add default via {far_end.ip} dev {egress} onlink table {table}"]
        space.tc += [q.command("add") for q in stages.wire_stages(egress, shaping, backend)]
        if backend == "netem":
            netem_direction(space, ingress, shaping)
        else:
            space.ce_rules = True
            _own_direction(space, ingress, shaping, number, wire, delay_queues)
    return root


def _own_direction(space: NamespacePlan, ingress: str, shaping: Shaping, queue: int,
                   wire: str, delay_queues: list[dict[str, Any]]) -> None:
    if shaping.loss > 0:
        space.iptables.append(f"-A PREROUTING -i {ingress} -m statistic --mode random "
                              f"--probability {shaping.loss:.10f} -j DROP")
    entry = stages.delay_line_entry(wire, queue, shaping, "own")
    if entry is not None:
        space.iptables.append(f"-A PREROUTING -i {ingress} -j NFQUEUE --queue-num {queue}")
        delay_queues.append(entry)


def netem_direction(space: NamespacePlan, ingress: str, shaping: Shaping) -> None:
    """Delay, jitter and loss by netem, on an ifb that the wire port's ingress redirects to
    (the kernel's CAKE there instead where it comes first: stages.cake_first)."""
    ifb = ifb_of(ingress)
    ip_lines, tc_lines = stages.ingress_redirect(ingress, ifb, stages.ifb_stage(ifb, shaping))
    space.ip_first += ip_lines
    space.tc += tc_lines


def _serve_routing_daemons(space: NamespacePlan, port_a: str, port_b: str) -> None:
    """Proxy ARP on both ports; link-local multicast across, ahead of any other ingress
    filter (netem's redirect to its ifb), at priority 1."""
    if "net.ipv4.conf.all.rp_filter=0" not in space.sysctls:
        space.sysctls.append("net.ipv4.conf.all.rp_filter=0")
    for ingress, egress in ((port_a, port_b), (port_b, port_a)):
        space.sysctls += [rule.format(port=ingress) for rule in PROXY_ARP_SYSCTLS]
        ingress_qdisc = f"qdisc add dev {ingress} handle ffff: ingress"
        if ingress_qdisc not in space.tc:
            space.tc.append(ingress_qdisc)
        space.tc.append(f"filter add dev {ingress} parent ffff: prio 1 protocol ip u32 match "
                        f"ip dst {LINK_LOCAL_MULTICAST} action mirred egress redirect dev "
                        f"{egress}")


def ifb_of(ingress: str) -> str:
    """The ifb device that holds netem for what arrives at a wire port (w3a: ifb3a)."""
    return f"ifb{ingress[1:]}"


def create_namespaces(built: Plan) -> None:
    """The namespaces alone, first: the lab records what they are before anything else."""
    run(["ip", "-batch", "-"], stdin="".join(f"netns add {name}\n"
                                             for name in built.namespace_names))


def execute(built: Plan) -> None:
    """Create the links in the namespaces create_namespaces() made, then configure every
    namespace in parallel."""
    run(["ip", "-batch", "-"], stdin="\n".join(built.root_batch) + "\n")
    workers = {name: subprocess.Popen(["ip", "netns", "exec", name, "sh", "-c",
                                       space.script()],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for name, space in built.namespaces.items()}
    failures = []
    for name, worker in workers.items():
        _, err = worker.communicate()
        if worker.returncode != 0:
            detail = err.strip().splitlines()
            failures.append(f"{name}: {detail[-1] if detail else 'configuration failed'}")
    if failures:
        raise CommandError("configuring the lab failed: " + "; ".join(failures))
