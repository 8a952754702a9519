"""What theory predicts on a topology: paths, base RTT, bottlenecks, fair shares, bounds.

Pure functions over the Topology model; routes are looked up as the kernel would (longest
prefix, connected subnets first), so a prediction follows the packets' real path.
"""

from __future__ import annotations

import ipaddress
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from . import diffserv
from .disciplines import ARRIVAL_ORDER, SHARED_TAIL_DROP
from .responsiveness import predict_rpm
from .topology import Link, Shaping, Topology, TopologyError

if TYPE_CHECKING:  # theory fills outcomes in; `lab up` and `status` need only the paths
    from .outcomes import FlowOutcome

Hop = tuple[Link, str]  # a link and the node the packet leaves from

FRAME_BYTES = 1514  # a full-size Ethernet frame as tc counts it (no preamble, no FCS)
TCP_PAYLOAD_BYTES = 1448  # of a full frame: less Ethernet 14, IP 20, TCP 20, timestamps 12
TCP_GOODPUT = TCP_PAYLOAD_BYTES / FRAME_BYTES  # of a link's rate, what TCP's payload gets
ACK_FRAME_BYTES = 66  # a pure ACK as tc counts it: Ethernet 14, IP 20, TCP 20, timestamps 12
SEGMENTS_PER_ACK = 2  # Linux's delayed ACK: one for every two full segments, in bulk
ACK_SHARE = ACK_FRAME_BYTES / (SEGMENTS_PER_ACK * FRAME_BYTES)  # of the way out, on the way back
UDP_FRAMING_BYTES = 42  # around each datagram: Ethernet 14, IP 20, UDP 8
DEFAULT_DATAGRAM_BYTES = 1470  # a lab UDP flow's datagrams unless the flow says
# Congestion controls whose throughput falls with loss as Mathis et al. describe.
LOSS_BASED = {"reno", "cubic", "bic", "htcp", "highspeed", "scalable", "westwood", "hybla",
              "illinois"}
# Flows that share a drop-tail queue and answer each loss by multiplying their window by BETA
# (AIMD) converge to equal shares, the gap between them shrinking by BETA every congestion
# epoch (Chiu and Jain, 1989). Per algorithm: BETA and the window's growth per round trip
# in segments between losses (CUBIC's TCP-friendly region, RFC 9438: 3(1-b)/(1+b)).
AIMD = {"reno": (0.5, 1.0), "cubic": (0.7, 3 * 0.3 / 1.7)}
CUBIC_C = 0.4  # RFC 9438: the cubic growth's constant, segments per second cubed
INITIAL_WINDOW = 10  # segments (RFC 6928, Linux's)
# Mathis et al.'s constant where packets are lost at random, as a lab's links lose them:
# sqrt(3/2) = 1.22 holds where each loss comes at the window's peak, and random losses, some
# early in a climb, leave the window higher on average (their simulations: 1.31; Reno with one
# decrease a round trip that lost any, simulated here at p = 0.1 %: 1.30)
MATHIS_C = 1.31
LINUX_MIN_RTO = 0.2  # s: the floor of Linux's retransmission timeout (TCP_RTO_MIN)
# A transfer timed start to exit is judged where its start-up is at most this part of it
# (theory adds the start-up to its time; slow start's real length varies with when it ends,
# and by this much the tolerance's headroom, THROUGHPUT_HIGH - 1, can take it)
STARTUP_SHARE = 0.05


@dataclass(frozen=True)
class Path:
    hops: tuple[Hop, ...]
    # The DiffServ class of the path's packets: on a link direction that runs `classes`
    # they use that class's part of the link, the resource (link, "a_to_b/af4"); likewise
    # their CAKE tin where it runs `cake`, (link, "a_to_b#bulk").
    klass: str | None = None
    tin: str | None = None

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
        """(link name, direction) pairs this path's packets use, in order (the direction
        with the path's class where the link direction runs DiffServ classes)."""
        found = []
        for link, node in self.hops:
            direction = "a_to_b" if node == link.a.node else "b_to_a"
            qdisc = link.direction_from(node).qdisc
            if self.klass is not None and qdisc == "classes":
                direction = f"{direction}{CLASS_MARK}{self.klass}"
            elif self.tin is not None and qdisc == "cake":
                direction = f"{direction}{TIN_MARK}{self.tin}"
            found.append((link.name, direction))
        return found


CLASS_MARK = "/"  # between a direction and a class in a resource's name
TIN_MARK = "#"  # between a direction and a CAKE tin


def direction_of(part: str) -> str:
    """The link direction of a resource's second part, without its class or tin."""
    return part.split(CLASS_MARK)[0].split(TIN_MARK)[0]


def class_capacities(paths: Sequence[Path], demands: Sequence[float | None]
                     ) -> dict[tuple[str, str], float]:
    """Every shaped link direction's rate; a direction that runs DiffServ classes split
    into its classes' parts, as diffserv.class_shares gives them to what the paths through
    it ask (a path without a demand asks all it can get)."""
    capacities: dict[tuple[str, str], float] = {}
    classed: dict[tuple[str, str, str], dict[str, float]] = {}
    rates: dict[tuple[str, str, str], float] = {}
    for flow, demand in zip(paths, demands, strict=True):
        for (link, node), resource in zip(flow.hops, flow.resources(), strict=True):
            rate = link.direction_from(node).rate
            if rate is None:
                continue
            mark = CLASS_MARK if CLASS_MARK in resource[1] else (
                TIN_MARK if TIN_MARK in resource[1] else None)
            if mark is None:
                capacities[resource] = rate
                continue
            direction, name = resource[1].split(mark)
            asked = classed.setdefault((resource[0], direction, mark), {})
            asked[name] = asked.get(name, 0.0) + (math.inf if demand is None else demand)
            rates[(resource[0], direction, mark)] = rate
    for (link_name, direction, mark), asked in classed.items():
        divide = diffserv.class_shares if mark == CLASS_MARK else diffserv.cake_tin_shares
        for name, share in divide(rates[(link_name, direction, mark)], asked).items():
            capacities[(link_name, f"{direction}{mark}{name}")] = share
    return capacities


def _route(topology: Topology, node: str, destination: ipaddress.IPv4Address
           ) -> ipaddress.IPv4Address | None:
    """The next hop for `destination` from `node`; None means it is on a connected subnet."""
    best: tuple[int, int, ipaddress.IPv4Address | None] | None = None
    for end, _ in topology.endpoints_of(node):
        if end.address is not None and destination in end.address.network:
            candidate: tuple[int, int, ipaddress.IPv4Address | None] = (
                end.address.network.prefixlen, 1, None)
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
    hops = _breadth_first(topology, start, target, ("switch",), lambda node, end, _: (
        node != start or (end.address is not None and end.address.network == network)))
    if hops is None:
        raise TopologyError(f"{start} cannot reach {target} on {network}")
    return hops


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


MAX_SUBFLOW_PATHS = 4  # of one MPTCP connection: its first path and up to three more


def subflow_paths(topology: Topology, source: str, destination: ipaddress.IPv4Address | str,
                  down: frozenset[str] = frozenset()) -> list[Path]:
    """The paths an MPTCP connection's subflows take (mptcp = true): the routed path to
    `destination`, then each further path from `source` to the destination's owner that
    shares none of the earlier paths' links between forwarding nodes (the hosts' own
    access links may be shared), fewest hops first, over links not `down`. One path where
    the topology offers no second."""
    if isinstance(destination, str) and destination in topology.nodes:
        destination = topology.address_of(destination)
    found = [path(topology, source, destination)]
    owner = topology.owner_of(ipaddress.IPv4Address(destination))
    assert owner is not None  # path() found it
    used = _interior_links(topology, found[0])
    while len(found) < MAX_SUBFLOW_PATHS:
        hops = _fewest_hops(topology, source, owner, used | set(down))
        interior = _interior_links(topology, Path(tuple(hops or ())))
        if not interior:  # none, or one through no router: the same as the first
            break
        found.append(Path(tuple(hops or ())))
        used |= interior
    return found


def _interior_links(topology: Topology, route: Path) -> set[str]:
    """The path's links but those of its first and last layer-3 hop (a host's access)."""
    forwarding = [i for i, (link, node) in enumerate(route.hops)
                  if topology.nodes[node].kind != "switch"]
    if len(forwarding) < 2:
        return set()
    first_end = forwarding[1]  # the hops before the second forwarding node's are access
    last_start = forwarding[-1]
    return {link.name for link, _ in route.hops[first_end:last_start]}


def _fewest_hops(topology: Topology, source: str, target: str, avoid: set[str]
                 ) -> list[Hop] | None:
    """Fewest hops from `source` to `target` over links not in `avoid`, forwarding only
    through routers and switches (a host does not forward)."""
    return _breadth_first(topology, source, target, ("router", "switch"),
                          lambda _, __, link: link.name not in avoid)


def _breadth_first(topology: Topology, start: str, target: str, through: tuple[str, ...],
                   usable: Callable[[str, Any, Any], bool]) -> list[Hop] | None:
    """The fewest links from `start` to `target`, over the links `usable(node, its end,
    link)` allows, forwarded only by nodes of the kinds `through`; None: no way."""
    queue: deque[tuple[str, list[Hop]]] = deque([(start, [])])
    seen = {start}
    while queue:
        node, hops = queue.popleft()
        for end, link in topology.endpoints_of(node):
            if not usable(node, end, link):
                continue
            other = link.other(node).node
            if other in seen:
                continue
            route = hops + [(link, node)]
            if other == target:
                return route
            if topology.nodes[other].kind in through:
                seen.add(other)
                queue.append((other, route))
    return None


def path_nodes(topology: Topology, source: str, route: Path) -> str:
    """The forwarding nodes a path crosses, as words: "h1 r1 r2 r3 h4"."""
    nodes = [source] + [link.other(node).node for link, node in route.hops]
    return " ".join(n for n in nodes if topology.nodes[n].kind != "switch")


def base_rtt(topology: Topology, a: str, b: str) -> float:
    """Round-trip time with empty queues: the one-way delays out and back."""
    return path(topology, a, b).one_way_delay + path(topology, b, a).one_way_delay


def max_min_shares(paths: Sequence[Path], demands: Sequence[float | None] | None = None,
                   capacities: dict[tuple[str, str], float] | None = None,
                   inelastic: Sequence[bool] | None = None) -> list[float]:
    """Max-min fair rates (bits/s) by water-filling over every shaped link direction the flows
    share. A flow with a demand (e.g. a paced UDP flow) never gets more than it asks for;
    a flow on no shaped link gets infinity. An `inelastic` flow (with a demand) is served
    first: it does not back off, and a queue shared first come first served carries what it
    sends (scaled down where such flows alone exceed a link); the others share the rest."""
    demands = list(demands) if demands is not None else [None] * len(paths)
    if capacities is None:
        capacities = {}
        for flow in paths:
            for (link, node), resource in zip(flow.hops, flow.resources(), strict=True):
                rate = link.direction_from(node).rate
                if rate is not None:
                    capacities[resource] = rate
    if inelastic is not None and any(inelastic):
        return _inelastic_first(paths, demands, capacities, list(inelastic))
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
            demand = demands[i]
            if demand is not None:
                increments.append(demand - rates[i])
        if not increments:
            for i in active:
                rates[i] = _or_infinite(demands[i])
            break
        step = max(0.0, min(increments))
        for i in active:
            rates[i] += step
        for resource in remaining:
            remaining[resource] -= step * sum(1 for i in active if resource in uses[i])
        frozen = {i for i in active
                  if rates[i] >= _or_infinite(demands[i]) - 1e-6
                  or any(remaining[r] <= 1e-6 for r in uses[i])}
        active -= frozen
    return rates


def _or_infinite(demand: float | None) -> float:
    return math.inf if demand is None else demand


def _inelastic_first(paths: Sequence[Path], demands: list[float | None],
                     capacities: dict[tuple[str, str], float], inelastic: list[bool]
                     ) -> list[float]:
    fixed = [i for i, flag in enumerate(inelastic) if flag and demands[i] is not None]
    load = {r: sum(demands[i] or 0.0 for i in fixed if r in paths[i].resources())
            for r in capacities}
    rates = [0.0] * len(paths)
    remaining = dict(capacities)
    for i in fixed:
        scale = min([1.0] + [capacities[r] / load[r] for r in paths[i].resources()
                             if r in capacities and load[r] > 0])
        rates[i] = (demands[i] or 0.0) * scale
        for r in paths[i].resources():
            if r in remaining:
                remaining[r] = max(0.0, remaining[r] - rates[i])
    others = [i for i in range(len(paths)) if i not in fixed]
    shared = max_min_shares([paths[i] for i in others], [demands[i] for i in others],
                            remaining)
    for i, rate in zip(others, shared, strict=True):
        rates[i] = rate
    return rates


def window_bound(window_bytes: float, rtt: float) -> float:
    """A window-limited flow cannot exceed window / RTT (bits/s)."""
    return window_bytes * 8 / rtt


# A receiver acknowledges every second full segment (delayed ACKs, RFC 5681 4.2), so in a
# window-limited TCP flow the segment after an acknowledged pair waits for its partner
# before its bytes leave the window: half a segment of it on average, counted against the
# window and not in flight. On campus's 4 ms path a 16 KB window moved 0.93-0.97 x window /
# RTT and 0.97-1.01 x (window - this) / RTT.
ACK_HELD_BYTES = TCP_PAYLOAD_BYTES / 2


def tcp_window_bound(window_bytes: float, rtt: float) -> float:
    """window_bound of a TCP connection whose receiver advertises `window_bytes`: the
    window less what waits at the receiver for a delayed ACK (ACK_HELD_BYTES)."""
    return window_bound(max(window_bytes - ACK_HELD_BYTES, 0.0), rtt)


def mathis_bound(mss_bytes: float, rtt: float, loss: float) -> float:
    """Mathis et al.: throughput <= (MSS / RTT) * (C / sqrt(p)) (bits/s), C = MATHIS_C: an
    AIMD flow that never waits out a timeout (a ceiling: CUBIC's TCP-friendly region, which
    sets its rate on such a path, matches Reno's average by its choice of growth)."""
    if loss <= 0:
        return math.inf
    return mss_bytes * 8 / rtt * MATHIS_C / math.sqrt(loss)


def pftk_bound(mss_bytes: float, rtt: float, loss: float) -> float:
    """Padhye, Firoiu, Towsley and Kurose (1998): Mathis et al.'s bound with the timeouts of a
    loss-based TCP on a path that drops at random (bits/s): MSS / (RTT sqrt(2bp/3) + T0
    min(1, 3 sqrt(3bp/8)) p (1 + 32 p^2)), b = 1 (Linux grows its window by the segments an
    ACK covers, RFC 3465), T0 Linux's first timeout, RTT + its 200 ms floor. Its timeouts
    are Reno's, which SACK, RACK and tail-loss probes spare a Linux sender most of: the least
    theory expects, where Mathis et al.'s is the most."""
    if loss <= 0:
        return math.inf
    timeout = rtt + LINUX_MIN_RTO
    seconds = (rtt * math.sqrt(2 * loss / 3)
               + timeout * min(1.0, 3 * math.sqrt(3 * loss / 8)) * loss * (1 + 32 * loss ** 2))
    return mss_bytes * 8 / seconds


def cubic_response(mss_bytes: float, rtt: float, loss: float) -> float:
    """CUBIC's average rate on a path that loses `loss` of its packets where its own curve,
    not its TCP-friendly region, sets it (RFC 9438 section 5.1, bits/s): a window of
    (C (3 + b) / (4 (1 - b)))^(1/4) RTT^(3/4) / p^(3/4) segments a round trip."""
    if loss <= 0:
        return math.inf
    beta = AIMD["cubic"][0]
    window = ((CUBIC_C * (3 + beta) / (4 * (1 - beta))) ** 0.25
              * rtt ** 0.75 / loss ** 0.75)
    return float(mss_bytes * 8 * window / rtt)


def loss_ceiling(congestion: str, mss_bytes: float, rtt: float, loss: float) -> float:
    """The most a loss-based TCP carries on a path that drops `loss` of its packets at
    random: Mathis et al.'s bound, and for CUBIC its own curve's where that is more (long
    round trips, little loss)."""
    bound = mathis_bound(mss_bytes, rtt, loss)
    if congestion == "cubic":
        bound = max(bound, cubic_response(mss_bytes, rtt, loss))
    return bound


def loss_window(congestion: str, loss: float) -> float | None:
    """Segments at which an AIMD flow's window peaks on a path that drops `loss` of its
    packets at random (Mathis et al.'s, decrease b and growth a a round trip:
    sqrt(2a / ((1 - b)(1 + b) p))); None for no loss or an algorithm that is not AIMD."""
    if congestion not in AIMD or loss <= 0:
        return None
    beta, growth = AIMD[congestion]
    return math.sqrt(2 * growth / ((1 - beta) * (1 + beta) * loss))


def datagram_bytes(length: int | None) -> int:
    return length or DEFAULT_DATAGRAM_BYTES


def udp_goodput_share(datagram: int) -> float:
    """The share of a link's rate a UDP flow of `datagram`-byte payloads gets as goodput."""
    return datagram / (datagram + UDP_FRAMING_BYTES)


def congestion_epoch(congestion: str, window: float, rtt: float) -> float | None:
    """Seconds from one loss to the next (a congestion epoch) of an AIMD flow whose window
    peaks at `window` segments at round trip `rtt`: its climb back from BETA x window; None
    for an algorithm that is not AIMD (BBR paces to a model of the path instead)."""
    if congestion not in AIMD or window <= 0 or rtt <= 0:
        return None
    beta, growth = AIMD[congestion]
    epoch = (1 - beta) * window / growth * rtt  # the additive climb back to the peak
    if congestion == "cubic":  # CUBIC's own curve climbs back in K seconds, if faster
        epoch = min(epoch, ((1 - beta) * window / CUBIC_C) ** (1 / 3))
    return float(epoch)


def loss_start_up(congestion: str, loss: float, rtt: float, path_window: float,
                  full_window: float) -> float | None:
    """Seconds from an AIMD flow's start until random loss (`loss`), not its start, sets its
    window: slow start from INITIAL_WINDOW until its first loss, some 1/p segments on (its
    window then half that), or the queue's overflow (`full_window` segments, the path's
    `path_window` and its queue) sooner; then a decrease every 1/p segments, sent at the
    window's rate or the path's, down to loss_window; then one climb (congestion_epoch).
    None for an algorithm that is not AIMD."""
    peak = loss_window(congestion, loss)
    if peak is None or rtt <= 0 or path_window <= 0:
        return None
    beta = AIMD[congestion][0]
    window = min(1 / (2 * loss), full_window)
    seconds = rtt * (1 + math.log2(max(window / INITIAL_WINDOW, 1.0)))
    while window > peak:
        seconds += (1 / loss) / (min(window, path_window) / rtt)
        window *= beta
    return seconds + (congestion_epoch(congestion, peak, rtt) or 0.0)


def share_tolerance(congestion: str, epochs: float | None) -> float | None:
    """What is left of an AIMD flow's starting gap to its fair share, averaged over `epochs`
    congestion epochs: the gap shrinks by BETA each epoch (Chiu and Jain), so its mean is
    (1 - BETA**n) / ((1 - BETA) n) of the first, capped at 1 (no promise). The first gap is
    slow start's doing: its first losses can leave a flow with nothing (a gap of 1 below) or
    with the whole link (N / k - 1 above, for k of N connections); verdicts.share_bounds.
    None: no theory (not AIMD)."""
    if epochs is None or congestion not in AIMD:
        return None
    beta = AIMD[congestion][0]
    if epochs <= 1:
        return 1.0
    return float(min(1.0, (1 - beta ** epochs) / ((1 - beta) * epochs)))


def met_rtt(outcome: FlowOutcome) -> float:
    """The round trip (seconds) a window-limited flow's bound uses: the path's base RTT, or,
    once it ran, the RTTs pinged beside it (a standing queue lengthens them, and a window
    moves once per round trip it meets; their harmonic mean: the flow's average rate is the
    window times the time-average of 1 / RTT, which pings spread evenly in time sample),
    else its own TCP's least RTT (TCP_INFO's min_rtt: the hosts' and the shaper's own time
    to answer is in it, half a millisecond beside a 4 ms path; the least, as a window / RTT
    bound wants, where the smoothed RTT holds delayed acknowledgements)."""
    base = (outcome.base_rtt or 0.0) / 1e3
    seen = [rtt / 1e3 for rtt in outcome.rtts if rtt > 0]
    if not seen:  # no pings beside it: its own TCP's least RTT, once it ran
        return max(base, (outcome.own_rtt_ms or 0.0) / 1e3)
    return max(base, len(seen) / sum(1 / rtt for rtt in seen))


def predict(topology: Topology, outcomes: Sequence[FlowOutcome], congestion: str,
            seconds: Sequence[float] | None = None, down: frozenset[str] = frozenset()
            ) -> None:
    """Theory beside every flow of a step: base RTT (and with every forward queue full),
    its max-min fair share of every shaped link the step's flows share (water-filling) as
    goodput, and the window and Mathis bounds. `congestion`: the hosts' default; `seconds`:
    each flow's duration, for what theory promises of flows that share a bottleneck. An
    MPTCP flow's connections each have a subflow on every path subflow_paths finds (not
    `down`), each its own congestion control (Linux couples none), so each a share."""
    paths: list[Path] = []
    owners: list[int] = []
    demands: list[float | None] = []
    inelastic: list[bool] = []
    ways: dict[int, tuple[Path, Path]] = {}  # each routed flow's forward and back paths
    for index, outcome in enumerate(outcomes):
        flow = outcome.flow
        found = _ways(topology, outcome)
        if found is None:
            continue  # no theory for an address the topology does not route: it just runs
        forward, backward = ways[index] = found
        source = topology.nodes.get(flow.source)
        _predict_flow(outcome, forward, backward, flow.congestion or (
            source.congestion if source is not None and source.congestion else congestion))
        if flow.spec.responsiveness and outcome.base_rtt is not None:
            outcome.rpm_theory = predict_rpm(outcome.base_rtt, [
                (s, None if s.rate is None or s.queue is None
                 else s.queue * FRAME_BYTES * 8 / s.rate) for s in forward.shaping()])
        if not flow.spec.loads_path:
            continue  # no demand theory can know
        routes = [forward]
        if flow.mptcp:
            routes += subflow_paths(topology, flow.source, outcome.address, down)[1:]
            outcome.theory_path = " + ".join(path_nodes(topology, flow.source, r) for r in routes)
        share = udp_goodput_share(datagram_bytes(flow.length))
        demand = None  # as much as its share
        if flow.spec.paced and outcome.rate is not None:
            demand = outcome.rate / share
        elif flow.spec.tcp and flow.window and outcome.window_bound:
            # a window a trip (an MPTCP connection's window spread over its subflows)
            demand = outcome.window_bound / TCP_GOODPUT / flow.parallel / len(routes)
        # a paced flow through queues that serve in arrival order takes what it sends (an
        # l4s one backs off: its rate is a ceiling); flow queueing shares max-min
        unresponsive = flow.spec.paced and not flow.l4s and all(
            s.qdisc in ARRIVAL_ORDER for s in forward.shaping())
        for _ in range(flow.parallel):
            for route in routes:
                paths.append(route)
                owners.append(index)
                demands.append(demand)
                inelastic.append(unresponsive)
    capacities = class_capacities(paths, demands) if paths else {}
    for index, (forward, backward) in ways.items():
        _queued_rtts(outcomes[index], forward, backward, capacities)
    if not paths:
        return
    shares = max_min_shares(paths, demands, capacities, inelastic=inelastic)
    acked = _less_acks(paths, owners, shares, outcomes, ways, capacities)
    if acked != capacities:  # the way back carries the ACKs of TCP flows the other way
        capacities = acked
        shares = max_min_shares(paths, demands, capacities, inelastic=inelastic)
    binding = _binding(paths, shares, capacities, inelastic)
    above: list[int] = []  # paced flows above their share
    for index, outcome in enumerate(outcomes):
        mine = [share for owner, share in zip(owners, shares, strict=True) if owner == index]
        if mine and all(math.isfinite(s) for s in mine):
            efficiency = (TCP_GOODPUT if not outcome.flow.spec.paced
                          else udp_goodput_share(datagram_bytes(outcome.flow.length)))
            bounds = [sum(mine) * efficiency, outcome.window_bound, outcome.mathis_bound]
            outcome.predicted = _with_start_up(outcome, min(b for b in bounds if b is not None))
            if _over_its_share(outcome, ways.get(index), min(mine), capacities):
                above.append(index)
    _beside_a_full_shared_queue(outcomes, above, ways)
    losses = {index: forward.loss for index, (forward, _) in ways.items()}
    _shared(topology, outcomes, owners, shares, binding, capacities, congestion, seconds,
            losses)


def _ways(topology: Topology, outcome: FlowOutcome) -> tuple[Path, Path] | None:
    """A flow's paths: the way its data goes (its DiffServ class or CAKE tin where the
    way's links sort by them; an rpm download's load, `to` to `from`) and the way back;
    None for an address the topology does not route."""
    flow = outcome.flow
    try:
        forward = path(topology, flow.source, outcome.address)
        backward = path(topology, flow.target, str(topology.address_of(flow.source)))
    except TopologyError:
        return None
    if any(s.qdisc == "classes" for s in forward.shaping()):
        forward = replace(forward, klass=diffserv.class_of(flow.dscp or 0))
    if any(s.qdisc == "cake" for s in forward.shaping()):
        tin = diffserv.CAKE_TINS[diffserv.cake_tin_of(flow.dscp or 0)][0]
        forward = replace(forward, tin=tin)
    if flow.spec.responsiveness and flow.direction == "download":
        return backward, forward  # the load's way: `to` sends
    return forward, backward


def _less_acks(paths: Sequence[Path], owners: list[int], shares: Sequence[float],
               outcomes: Sequence[FlowOutcome], ways: dict[int, tuple[Path, Path]],
               capacities: dict[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    """The capacities less what the ACKs of the TCP flows at these `shares` take on the way
    back (ACK_FRAME_BYTES for every SEGMENTS_PER_ACK full frames): where flows go both ways
    over a link, as in RRUL, each direction carries the other's ACKs beside its own data."""
    load: dict[tuple[str, str], float] = {}
    for share, owner in zip(shares, owners, strict=True):
        if not outcomes[owner].flow.spec.tcp or not math.isfinite(share) or owner not in ways:
            continue
        for resource in ways[owner][1].resources():
            if resource in capacities:
                load[resource] = load.get(resource, 0.0) + share * ACK_SHARE
    return {resource: capacity - load.get(resource, 0.0)
            for resource, capacity in capacities.items()}


def _queued_rtts(outcome: FlowOutcome, forward: Path, backward: Path,
                 capacities: dict[tuple[str, str], float],
                 own: tuple[float, float] | None = None) -> None:
    """The RTT with every forward queue full, and with every queue both ways full; `own`:
    see _full_queues."""
    if outcome.base_rtt is None:
        return
    outcome.full_queue_rtt = outcome.base_rtt + _full_queues(forward, capacities, own) * 1e3
    outcome.loaded_rtt = outcome.full_queue_rtt + _full_queues(backward, capacities) * 1e3


def _over_its_share(outcome: FlowOutcome, ways: tuple[Path, Path] | None, share: float,
                    capacities: dict[tuple[str, str], float]) -> bool:
    """A paced flow that sends more than its share (bits/s on the wire) through a queue
    that serves flows in turn (fq_codel, fq_pie, cake) is not drained at the link's rate:
    its own packets fill the queue (its overflow drops the longest flow's, its own), each
    served at its share, so its bound is the whole queue of its datagrams at its share
    (video at three times its share waits three times a FIFO's full queue, and loses two
    thirds of what it sends). Whether it is above its share."""
    flow = outcome.flow
    if ways is None or not flow.spec.paced or flow.l4s or outcome.rate is None or share <= 0:
        return False
    frame = datagram_bytes(flow.length) + UDP_FRAMING_BYTES
    if outcome.rate / udp_goodput_share(datagram_bytes(flow.length)) <= share * 1.001:
        return False  # within its share: it waits a round, as a FIFO's full queue bounds
    _queued_rtts(outcome, *ways, capacities, (frame, share))
    return True


def _beside_a_full_shared_queue(outcomes: Sequence[FlowOutcome], above: list[int],
                                ways: dict[int, tuple[Path, Path]]) -> None:
    """Flows that share a queue which serves flows in turn but drops whatever arrives when
    full (fq_pie) with a paced flow above its share: that flow's packets fill the shared
    limit until PIE's drop probability for it catches up (seconds: it grows a step each
    15 ms update), and the others' arrivals are dropped meanwhile, so their goodput is not
    their share; theory gives them none, saying why."""
    for index in above:
        queues = [(shaping.qdisc, resource) for shaping, resource in zip(
            ways[index][0].shaping(), ways[index][0].resources(), strict=True)
            if shaping.qdisc in SHARED_TAIL_DROP]
        crowded = {resource for _, resource in queues}
        names = ", ".join(sorted({qdisc for qdisc, _ in queues}))
        for other, (forward, _) in ways.items():
            outcome = outcomes[other]
            if other == index or outcome.no_theory or not crowded & set(forward.resources()):
                continue
            outcome.no_theory = (
                f"it shares a queue that drops whatever arrives when full ({names}, as "
                f"Linux's) with {outcomes[index].flow.label}, paced above its share: its "
                "packets fill the shared limit until PIE's drop probability for it catches "
                "up, and this flow's arrivals are dropped meanwhile, so its goodput is not "
                "the share theory gives")


def _full_queues(way: Path, capacities: dict[tuple[str, str], float],
                 own: tuple[float, float] | None = None) -> float:
    """Seconds a packet waits in every full queue of `way`: each drained at its link's rate;
    where the way crosses DiffServ classes, its class's queue drained at the class's part
    of the link (at least what theory gives it there), or for the priority class the
    policer's burst drained first. `own` (frame bytes, share in bits/s): a flow above its
    share, whose queue in a discipline that serves flows in turn is its own frames
    drained at its share."""
    queues = 0.0
    for shaping, resource in zip(way.shaping(), way.resources(), strict=True):
        if shaping.rate is None or shaping.queue is None:
            continue
        # (a CAKE tin's flows are served in turn: its full queue drains at the link's rate)
        name = resource[1].split(CLASS_MARK)[1] if CLASS_MARK in resource[1] else None
        if own is not None and shaping.qdisc not in ARRIVAL_ORDER:
            queues += max(shaping.queue * own[0] * 8 / own[1],
                          shaping.queue * FRAME_BYTES * 8 / shaping.rate)
        elif name == diffserv.PRIORITY:
            queues += diffserv.priority_delay(shaping.rate, FRAME_BYTES)
        elif name is not None and capacities.get(resource, 0.0) > 0:
            queues += shaping.queue * FRAME_BYTES * 8 / capacities[resource]
        else:
            queues += shaping.queue * FRAME_BYTES * 8 / shaping.rate
    return queues


def _binding(paths: Sequence[Path], shares: Sequence[float],
             capacities: dict[tuple[str, str], float],
             inelastic: Sequence[bool] | None = None) -> list[tuple[str, str] | None]:
    """The link direction (or class of one) that limits each path's share: a full one on
    which no other path gets more (max-min's bottleneck), leaving out the `inelastic` ones
    (a paced flow through a FIFO takes what it sends, and the rest share what it leaves);
    None where none limits it."""
    fixed = inelastic or [False] * len(paths)
    used = {r: sum(s for p, s in zip(paths, shares, strict=True) if r in p.resources())
            for r in capacities}
    found: list[tuple[str, str] | None] = []
    for flow, share, own in zip(paths, shares, fixed, strict=True):
        full = [r for r in flow.resources() if r in capacities and math.isfinite(share)
                and not own and used[r] >= capacities[r] * (1 - 1e-6)
                and all(s <= share * (1 + 1e-6) or other
                        for p, s, other in zip(paths, shares, fixed, strict=True)
                        if r in p.resources())]
        found.append(min(full, key=lambda r: capacities[r]) if full else None)
    return found


def _shared(topology: Topology, outcomes: Sequence[FlowOutcome], owners: list[int],
            shares: list[float], binding: list[tuple[str, str] | None],
            capacities: dict[tuple[str, str], float], congestion: str,
            seconds: Sequence[float] | None, losses: dict[int, float]) -> None:
    """For tcp flows: the congestion epoch on their bottleneck (the first is start-up: slow
    start, its overshoot and the climb back, of which theory promises no goodput), from a
    window that peaks with the queue full or, where the path's random loss (`losses`, by
    flow) ends it sooner, at loss_window with no queue; and for
    those that share it with another flow of the step, which link it is and how close to
    its share theory can promise the flow comes in its duration."""
    links = {link.name: link for link in topology.links}
    for index, outcome in enumerate(outcomes):
        mine = [i for i, owner in enumerate(owners) if owner == index]
        if not outcome.flow.spec.share_judged or not mine or binding[mine[0]] is None:
            continue
        resource = binding[mine[0]]
        assert resource is not None
        others = {owners[i] for i, r in enumerate(binding) if r == resource} - {index}
        link = links[resource[0]]
        direction = direction_of(resource[1])
        shaping = link.a_to_b if direction == "a_to_b" else link.b_to_a
        algorithm = outcome.flow.congestion or congestion
        capacity = capacities.get(resource, shaping.rate or 0.0)  # a class: its part
        share = shares[mine[0]]  # one connection's
        queue_seconds = (shaping.queue or 0) * FRAME_BYTES * 8 / capacity if capacity else 0.0
        rtt = (outcome.base_rtt or 0.0) / 1e3 + queue_seconds
        window = share * rtt / (FRAME_BYTES * 8)  # segments at the peak, queue full
        loss = losses.get(index, 0.0)
        lossy = loss_window(algorithm, loss)
        if lossy is not None and lossy < window:  # random loss ends each climb first
            base = (outcome.base_rtt or 0.0) / 1e3
            outcome.epoch_seconds = loss_start_up(algorithm, loss, base,
                                                  share * base / (FRAME_BYTES * 8), window)
        else:
            outcome.epoch_seconds = congestion_epoch(algorithm, window, rtt)
        if seconds is not None and outcome.epoch_seconds is not None:
            outcome.epochs = seconds[index] / outcome.epoch_seconds
        if others:  # not alone on its bottleneck: a share to converge to
            outcome.bottleneck = _named(resource)
            outcome.share_tolerance = share_tolerance(algorithm, outcome.epochs)
    _beside_l4s(outcomes, owners, binding, links)


def _named(resource: tuple[str, str]) -> str:
    direction = direction_of(resource[1])
    named = f"{resource[0]} {direction.replace('_', ' ')}"
    if CLASS_MARK in resource[1]:
        return named + f" (class {resource[1].partition(CLASS_MARK)[2]})"
    if TIN_MARK in resource[1]:
        return named + f" (CAKE tin {resource[1].partition(TIN_MARK)[2]})"
    return named


def _beside_l4s(outcomes: Sequence[FlowOutcome], owners: list[int],
                binding: list[tuple[str, str] | None], links: dict[str, Link]) -> None:
    """An L4S flow (--l4s: it answers CE marks as DCTCP does, and a loss by halving) and the
    classic TCP flows on its bottleneck: theory promises no flow its share (how they split
    the link follows each sender's response to marks and to losses, and the queues each
    waits in; RFC 9332's coupling aims at about equal rates for Reno and DCTCP at equal
    RTTs), so they are judged on their total, as one transfer. Not where the queue serves
    flows in turn (fq_codel, fq_pie, cake): that scheduler gives each its share."""
    for index, outcome in enumerate(outcomes):
        if not outcome.flow.l4s:
            continue
        mine = [i for i, owner in enumerate(owners) if owner == index]
        resource = binding[mine[0]] if mine else None
        if resource is None:
            continue
        link = links[resource[0]]
        shaping = link.a_to_b if resource[1].startswith("a_to_b") else link.b_to_a
        if shaping.qdisc not in ARRIVAL_ORDER:
            continue
        others = {owners[i] for i, r in enumerate(binding) if r == resource} - {index}
        if not any(outcomes[other].flow.spec.tcp for other in others):
            continue
        for member in (index, *others):
            if outcomes[member].flow.spec.tcp or outcomes[member].flow.l4s:
                outcomes[member].bottleneck = _named(resource)
                outcomes[member].share_tolerance = None


def _predict_flow(outcome: FlowOutcome, forward: Path, backward: Path,
                  congestion: str) -> None:
    """One flow's RTTs, its UDP rate when set by the path, and its TCP bounds (and the
    congestion control they assume, which the flow runs)."""
    flow = outcome.flow
    if flow.spec.tcp:
        outcome.congestion = congestion
    if flow.spec.paced and isinstance(flow.rate, float | int):
        outcome.rate = float(flow.rate)
    outcome.base_rtt = (forward.one_way_delay + backward.one_way_delay) * 1e3
    outcome.base_one_way = forward.one_way_delay * 1e3
    if flow.spec.paced and flow.rate == "auto":
        bottleneck = forward.bottleneck or 1e9
        outcome.rate = 0.9 * bottleneck * udp_goodput_share(datagram_bytes(flow.length))
    rtt = outcome.base_rtt / 1e3
    if flow.spec.window_cap is not None and rtt > 0:
        outcome.window_bound = window_bound(flow.spec.window_cap, rtt)
    if flow.spec.tcp and rtt > 0:
        if flow.window:  # the window the kernel made of the buffer asked for, once known
            window = outcome.advertised_window or flow.window
            outcome.window_bound = flow.parallel * tcp_window_bound(window, met_rtt(outcome))
        if forward.loss > 0 and congestion in LOSS_BASED:
            met = met_rtt(outcome)  # a loss-limited window seldom fills a queue
            outcome.mathis_bound = flow.parallel * loss_ceiling(
                congestion, TCP_PAYLOAD_BYTES, met, forward.loss)
            outcome.pftk_bound = flow.parallel * pftk_bound(TCP_PAYLOAD_BYTES, met,
                                                            forward.loss)
            lossy = loss_window(congestion, forward.loss)
            if lossy is not None:
                outcome.loss_epoch_seconds = congestion_epoch(congestion, lossy, met)
        elif forward.loss > 0:
            outcome.no_theory = (
                f"{congestion} on a path that loses {forward.loss * 100:g}% of its packets at "
                "random: theory's bound there (Mathis et al.) is a loss-based TCP's, and "
                f"{congestion} keeps its rate through random loss by a model of its own")
        _start_up(outcome, forward, rtt)


def _with_start_up(outcome: FlowOutcome, moving: float) -> float:
    """A transfer's goodput timed from its program's start to its exit: its bits over its
    start-up (_start_up's) and its moving at `moving` bits/s; `moving` for other flows."""
    moved = outcome.flow.spec.bytes_moved(outcome.flow)
    if not moved or not outcome.start_up_seconds or moving <= 0:
        return moving
    return moved * 8 / (outcome.start_up_seconds + moved * 8 / moving)


def _start_up(outcome: FlowOutcome, forward: Path, rtt: float) -> None:
    """A transfer of a fixed size (scp, http), timed from its program's start to its exit,
    spends its handshakes and a slow start to the path's window before it moves at its
    share: (handshakes + 1 + log2(window / 10 segments)) round trips, which theory adds to
    its time (_with_start_up). Slow start's real length varies (it may end early), so where
    the start-up is more than STARTUP_SHARE of the whole, the goodput cannot be judged within
    the tolerance, and the flow is not, saying why."""
    flow = outcome.flow
    moved = flow.spec.bytes_moved(flow)
    if not moved or not forward.bottleneck:
        return
    rate = forward.bottleneck * TCP_GOODPUT
    window = rate * rtt / (FRAME_BYTES * 8)
    start_up = (flow.spec.handshakes + 1 + math.log2(max(1.0, window / INITIAL_WINDOW))) * rtt
    whole = start_up + moved * 8 / rate
    outcome.start_up_seconds = start_up
    if start_up > STARTUP_SHARE * whole:
        outcome.no_theory = (
            f"a transfer of {moved / 1e6:g} MB whose start-up ({flow.spec.handshakes} "
            f"handshake round trips and a slow start to the path's window, {start_up:.2f} s "
            f"at least) is {start_up / whole:.0%} of it at this RTT: more than the "
            f"{STARTUP_SHARE:.0%} the tolerance can take, and theory's share is of the moving")
