"""The lab's pure layers: topology files, validation, theory and build plans (no root)."""

from __future__ import annotations

import ipaddress
import math
import random
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simpleperf.lab.model import flows, link_properties, theory, topology
from simpleperf.lab.model.outcomes import FlowOutcome
from simpleperf.lab.model.theory import FRAME_BYTES
from simpleperf.lab.model.topology import TopologyError
from simpleperf.lab.net import build, stages
from simpleperf.lab.net.shaping import nfqueue
from simpleperf.lab.net.shaping.probe import Capabilities

PORTFOLIO_ADDRESSES = {
    "h1": ["10.0.0.2"], "h2": ["10.0.0.3"], "h3": ["10.0.0.4"],
    "r1": ["10.0.0.1", "10.0.1.1"], "r2": ["10.0.1.2", "10.0.2.1", "10.0.3.1"],
    "h7": ["10.0.2.2"], "r3": ["10.0.3.2", "10.0.4.1", "10.0.5.1", "10.0.6.1"],
    "h8": ["10.0.4.2"], "h4": ["10.0.5.2"], "h5": ["10.0.5.3"], "h6": ["10.0.5.4"],
    "r4": ["10.0.6.2", "10.0.7.1"], "h9": ["10.0.7.2"],
}


@pytest.fixture(scope="module")
def portfolio():
    return topology.load("portfolio")


def test_portfolio_matches_the_contract(portfolio):
    for node, addresses in PORTFOLIO_ADDRESSES.items():
        found = [str(end.address.ip) for end, _ in portfolio.endpoints_of(node)]
        assert found == addresses, node
        assert all(str(end.address.network).endswith("/24")
                   for end, _ in portfolio.endpoints_of(node))
    shaped = {link.name: link for link in portfolio.links if link.is_shaped}
    assert set(shaped) == {"L1", "L2", "L3"}
    for name, (a, b, rate, delay, queue) in {"L1": ("r1", "r2", 40e6, 0.010, 67),
                                             "L2": ("r2", "r3", 30e6, 0.020, 100),
                                             "L3": ("r3", "r4", 20e6, 0.010, 33)}.items():
        link = shaped[name]
        assert (link.a.node, link.b.node) == (a, b)
        for direction in (link.a_to_b, link.b_to_a):
            assert (direction.rate, direction.delay, direction.queue) == (rate, delay, queue)
    routes = {str(r) for r in portfolio.nodes["r2"].routes}
    assert routes == {"10.0.0.0/24 via 10.0.1.1", "10.0.4.0/24 via 10.0.3.2",
                      "10.0.5.0/24 via 10.0.3.2", "10.0.6.0/24 via 10.0.3.2",
                      "10.0.7.0/24 via 10.0.3.2"}
    assert {str(r) for r in portfolio.nodes["r3"].routes} == {
        "10.0.0.0/24 via 10.0.3.1", "10.0.1.0/24 via 10.0.3.1", "10.0.2.0/24 via 10.0.3.1",
        "10.0.7.0/24 via 10.0.6.2"}
    assert [str(r) for r in portfolio.nodes["h9"].routes] == ["default via 10.0.7.1"]


def test_mininet_interface_names(portfolio):
    names = {end.interface for link in portfolio.links for end in (link.a, link.b)}
    assert {"h1-eth0", "r1-eth0", "r1-eth1", "r3-eth3", "s1-eth1", "s2-eth4"} <= names


@pytest.mark.parametrize("source,target,rtt,bottleneck", [
    ("r1", "r2", 20, 40e6), ("r2", "r3", 40, 30e6), ("r3", "r4", 20, 20e6),
    ("h1", "h4", 60, 30e6), ("h7", "h9", 60, 20e6), ("h1", "h9", 80, 20e6),
    ("h1", "h2", 0, None),
])
def test_theory_paths(portfolio, source, target, rtt, bottleneck):
    assert theory.base_rtt(portfolio, source, target) * 1e3 == pytest.approx(rtt)
    assert theory.path(portfolio, source, target).bottleneck == bottleneck


def test_max_min_fair_shares_use_every_shared_link(portfolio):
    def shares(*pairs):
        paths = [theory.path(portfolio, a, b) for a, b in pairs]
        return [round(r / 1e6, 3) for r in theory.max_min_shares(paths)]

    assert shares(("h1", "h4"), ("h2", "h5")) == [15, 15]
    assert shares(("h1", "h4"), ("h2", "h5"), ("h3", "h6")) == [10, 10, 10]
    assert shares(("h1", "h4"), ("h7", "h9")) == [15, 15]  # 4c: both cross L2
    assert shares(("h1", "h4"), ("h8", "h9")) == [30, 20]  # 4d: no shared link
    assert shares(("h1", "h4"), ("h1", "h4"), ("h2", "h5"), ("h3", "h6")) == [7.5] * 4
    paths = [theory.path(portfolio, "h1", "h4"), theory.path(portfolio, "h2", "h5")]
    assert [r / 1e6 for r in theory.max_min_shares(paths, demands=[5e6, None])] == [5, 25]


def test_bounds():
    assert theory.window_bound(16_000, 0.1) == pytest.approx(1.28e6)
    assert theory.mathis_bound(1448, 0.1, 0.01) == pytest.approx(
        1448 * 8 / 0.1 * 1.31 / 0.1)
    assert theory.mathis_bound(1448, 0.1, 0) == math.inf


def test_pftk_adds_timeouts_below_mathis_and_meets_it_as_loss_vanishes():
    """Padhye et al.'s model at b = 1, T0 = RTT + 200 ms, worked by hand at 5 % loss and a
    10 ms RTT: 0.1826 RTTs of loss-driven window plus 0.21 x 0.411 x 0.05 x 1.08 s of
    timeouts a segment, 1.785 Mbit/s of 1448-byte segments, where Mathis et al. say 6.79."""
    assert theory.pftk_bound(1448, 0.01, 0.05) == pytest.approx(1.785e6, rel=0.002)
    assert theory.mathis_bound(1448, 0.01, 0.05) == pytest.approx(6.79e6, rel=0.002)
    ratios = [theory.pftk_bound(1448, 0.01, p) / theory.mathis_bound(1448, 0.01, p)
              for p in (1e-5, 1e-3, 1e-2, 0.1)]  # sqrt(3/2) / 1.31 as loss vanishes
    assert ratios == sorted(ratios, reverse=True) and ratios[-1] < 0.2
    assert ratios[0] == pytest.approx(math.sqrt(1.5) / 1.31, rel=0.01)
    assert theory.pftk_bound(1448, 0.01, 0) == math.inf


def test_tcp_both_ways_over_a_link_leaves_each_direction_less_the_others_acks():
    """RRUL's case: data one way shares the link direction with the ACKs of the data the
    other way, a 66-byte frame for every two 1514-byte ones (2.2 %); one way alone, all."""
    def predicted(*ends: tuple[str, str]) -> list[float]:
        outcomes = [FlowOutcome(flows.parse({"kind": "tcp", "from": a, "to": b}, "t"),
                                "10.0.0.2" if b == "h2" else "10.0.0.1") for a, b in ends]
        theory.predict(topology.pair(rate="20M", delay="10ms", queue=100), outcomes, "cubic")
        return [o.predicted or 0.0 for o in outcomes]
    whole = 20e6 * theory.TCP_GOODPUT
    assert predicted(("h1", "h2")) == [pytest.approx(whole)]
    both = predicted(("h1", "h2"), ("h2", "h1"))
    assert both == [pytest.approx(whole * (1 - 66 / 3028))] * 2
    four = predicted(("h1", "h2"), ("h1", "h2"), ("h2", "h1"), ("h2", "h1"))
    assert sum(four[:2]) == pytest.approx(whole * (1 - 66 / 3028))


def test_cubics_own_curve_sets_its_ceiling_on_long_paths_with_little_loss():
    """RFC 9438's average window, (0.4 x 3.7 / 1.2)^(1/4) RTT^(3/4) / p^(3/4): 187 segments
    at 100 ms and 0.01 %, above the 131 of Mathis et al.'s; at 10 ms and 1 %, one segment,
    where its TCP-friendly growth (Mathis et al.'s) sets the rate."""
    assert theory.cubic_response(1448, 0.1, 1e-4) == pytest.approx(21.7e6, rel=0.01)
    assert theory.loss_ceiling("cubic", 1448, 0.1, 1e-4) == pytest.approx(21.7e6, rel=0.01)
    assert theory.loss_ceiling("reno", 1448, 0.1, 1e-4) == pytest.approx(15.2e6, rel=0.01)
    assert theory.loss_ceiling("cubic", 1448, 0.01, 0.01) == theory.mathis_bound(
        1448, 0.01, 0.01)


def test_random_loss_ends_an_aimd_windows_climb_before_the_queue_does():
    """The window at which loss ends each climb: sqrt(2a / ((1 - b)(1 + b) p)) segments,
    Reno's 1.63 / sqrt(p) (its mean, 3/4 of it, Mathis et al.'s 1.22 / sqrt(p))."""
    assert theory.loss_window("reno", 0.01) == pytest.approx(16.33, abs=0.01)
    assert 0.75 * theory.loss_window("reno", 0.01) == pytest.approx(math.sqrt(1.5) * 10)
    assert theory.loss_window("cubic", 0.01) == pytest.approx(14.41, abs=0.01)
    assert theory.loss_window("bbr", 0.01) is None and theory.loss_window("reno", 0) is None
    # 100 Mbit/s, 10 ms and 1000 packets of queue: a 1 % loss, not the queue, sets the
    # start-up: slow start for 3.3 round trips to 50 segments (1 / 2p), four decreases 100
    # segments apart at 50, 35, 24.5 and 17 segments a 10 ms round trip (0.15 s), one climb
    # (0.08 s)
    def epoch(loss: str) -> float:
        outcome = FlowOutcome(flows.parse({"kind": "tcp", "from": "h1", "to": "h2"}, "t"),
                              "10.0.0.2")
        theory.predict(topology.pair(rate="100M", delay="5ms", loss=loss, queue=1000),
                       [outcome], "cubic", [4.0])
        assert outcome.epoch_seconds is not None
        return outcome.epoch_seconds
    assert epoch("1%") == pytest.approx(0.0332 + 0.1477 + 0.3 * 14.41 / (0.9 / 1.7) * 0.01,
                                        rel=0.01)
    assert epoch("0%") > 5  # CUBIC's climb back to a full queue of 1000 packets


BASE = """
name = "t"
[hosts]
a = { routes = ["default via 10.1.0.254"] }
b = {}
[routers]
r = {}
[[links]]
a = "a"
a_address = "10.1.0.1/24"
b = "r"
b_address = "10.1.0.254/24"
[[links]]
a = "r"
a_address = "10.2.0.254/24"
b = "b"
b_address = "10.2.0.1/24"
"""


@pytest.mark.parametrize("change,message", [
    (('b = "b"\nb_address = "10.2.0.1/24"', 'b = "zz"\nb_address = "10.2.0.1/24"'),
     "'zz' is not a declared node"),
    (("10.2.0.1/24", "10.1.0.1/24"), "already used by a"),
    (("10.2.0.1/24", "10.3.0.1/24"), "outside the subnet"),
    (("default via 10.1.0.254", "default via 10.9.0.1"), "not on any subnet of a"),
    (("default via 10.1.0.254", "default via 10.1.0.77"), "no node has address 10.1.0.77"),
    (("default via 10.1.0.254", "default to 10.1.0.254"), "is not 'DESTINATION via GATEWAY'"),
    (('b_address = "10.1.0.254/24"', 'b_address = "10.1.0.254/24"\nbw = "fast"'),
     "bw = 'fast' is not a rate"),
    (('b_address = "10.1.0.254/24"', 'b_address = "10.1.0.254/24"\ndelay = 10'),
     "delay = 10 needs a unit"),
    (('b_address = "10.1.0.254/24"', 'b_address = "10.1.0.254/24"\ndelay = "10 parsecs"'),
     "is not a time"),
    (('b_address = "10.1.0.254/24"', 'b_address = "10.1.0.254/24"\nloss = 120'),
     "from 0 to 100"),
    (('b_address = "10.1.0.254/24"', 'b_address = "10.1.0.254/24"\nmax_queue_size = 10'),
     "max_queue_size needs bw"),
    (('b_address = "10.1.0.254/24"', 'b_address = "10.1.0.254/24"\ndealy = "1ms"'),
     "unknown field 'dealy'"),
    (("10.2.0.1/24", "10.2.0.1"), "needs a prefix length"),
    (("10.2.0.1/24", "10.2.0.0/24"), "network or broadcast address"),
    (("[routers]", "[routers]\n\"bad name\" = {}"), "node name 'bad name'"),
    (("[routers]", "[routers]\nr-sixteen-chars1 = {}"), "node name 'r-sixteen-chars1'"),
    (('name = "t"', 'name = "t"\ncolour = "red"'), "unknown field 'colour'"),
    (("[[links]]", "[[links]"), "not valid TOML"),
])
def test_validation_names_the_mistake(change, message):
    text = BASE.replace(*change, 1)
    assert text != BASE
    with pytest.raises(TopologyError, match=message.replace("(", r"\(").replace("[", r"\[")):
        topology.parse(text)


def test_a_valid_file_parses_and_routes():
    model = topology.parse(BASE)
    assert theory.path(model, "a", "b").hops[0][0].name == "a-r"
    with pytest.raises(TopologyError, match="b has no route to 10.1.0.1"):
        theory.path(model, "b", "a")


def test_unknown_topology_name_lists_shipped_ones():
    with pytest.raises(TopologyError, match="shipped: .*portfolio"):
        topology.load("nonesuch")


def test_pair_options():
    model = topology.pair(rate="100M", delay="20ms", jitter="2ms", loss="1%", queue=100)
    (link,) = model.links
    assert link.a_to_b == link.b_to_a
    assert (link.a_to_b.rate, link.a_to_b.delay, link.a_to_b.jitter, link.a_to_b.loss,
            link.a_to_b.queue) == (100e6, 0.02, 0.002, 0.01, 100)
    with pytest.raises(TopologyError, match="max_queue_size needs bw"):
        topology.pair(queue=10)


def test_per_direction_overrides():
    text = BASE.replace('b_address = "10.1.0.254/24"',
                        'b_address = "10.1.0.254/24"\nbw = "10M"\ndelay = "5ms"\n'
                        '[links.b_to_a]\ndelay = "50ms"\nloss = 2', 1)
    link = topology.parse(text).links[0]
    assert (link.a_to_b.delay, link.a_to_b.loss) == (0.005, 0)
    assert (link.b_to_a.delay, link.b_to_a.loss, link.b_to_a.rate) == (0.05, 0.02, 10e6)


def test_own_plan_routes_shaped_links_through_the_wire(portfolio):
    plan = build.plan(portfolio, "own")
    assert set(plan.namespaces) == set(portfolio.nodes) | {"portfolio-wire"}
    wire = plan.namespaces["portfolio-wire"].script()
    assert "rule add iif w1a table 1001" in wire
    assert "route add default via 10.0.1.2 dev w1b onlink table 1001" in wire
    # L2, 30 Mbit/s: a bucket of one frame and 1600 bytes for late timers, and a peak rate
    # with an MTU that makes tbf cut aggregates into packets before the pfifo counts them.
    assert ("qdisc add dev w2b root handle 1: tbf rate 30000000bit burst 3114 peakrate "
            "300000000000bit mtu 3000 limit 1000000") in wire
    assert "qdisc add dev w2b parent 1:1 handle 10: pfifo limit 100" in wire
    assert "pfifo limit 100" in wire and "pfifo limit 33" in wire
    assert "-A PREROUTING -i w3b -j NFQUEUE --queue-num 6" in wire
    assert "TTL --ttl-inc 1" in wire
    assert [(q["queue"], q["delay"]) for q in plan.delay_queues] == [
        (1, 0.01), (2, 0.01), (3, 0.02), (4, 0.02), (5, 0.01), (6, 0.01)]
    r1 = plan.namespaces["r1"].script()
    assert "net.ipv4.ip_forward=1" in r1
    assert "neigh replace 10.0.1.2 lladdr 02:53:50:00:01:02 dev r1-eth1 nud permanent" in r1
    assert "ethtool -K r1-eth1 tso on gso on gro on tx-udp-segmentation on" in r1
    assert "ethtool -K w1a gro on" in wire  # no loss on L1: aggregates may enter the wire
    assert "link add s1 type bridge" in plan.namespaces["s1"].script()
    assert "ip_forward" not in plan.namespaces["h1"].script()


def test_netem_plan_and_loss_in_own_plan():
    model = topology.pair(rate="10M", delay="20ms", jitter="2ms", loss="1%", reorder=True)
    netem = build.plan(model, "netem").namespaces["pair-wire"].script()
    assert ("netem limit 1000000 delay 20000us 2000us distribution normal loss 1.000000%"
            in netem)
    assert "mirred egress redirect dev ifb1a" in netem
    own_plan = build.plan(model, "own")
    own = own_plan.namespaces["pair-wire"].script()
    assert "-m statistic --mode random --probability 0.0100000000 -j DROP" in own
    # Loss strikes packets, not aggregates: the sender segments, the wire does not merge.
    assert "ethtool -K w1a gro off" in own
    assert ("ethtool -K h1-eth0 tso off gso off tx-udp-segmentation off gro on"
            in own_plan.namespaces["h1"].script())
    # Jitter keeps order unless asked to reorder: netem then gets a rate (see build.py).
    in_order = build.plan(topology.pair(delay="20ms", jitter="2ms"), "netem")
    reordering = build.plan(topology.pair(delay="20ms", jitter="2ms", reorder=True), "netem")
    assert f"2000us distribution normal rate {stages.NETEM_IN_ORDER_RATE}" in (
        in_order.namespaces["pair-wire"].script())
    assert " rate " not in reordering.namespaces["pair-wire"].script().split("netem")[-1]


def test_delay_on_a_switch_link_is_refused_before_anything_is_built():
    text = BASE.replace('[[links]]\na = "a"', '[switches]\ns = {}\n[[links]]\na = "a"', 1)
    text += '[[links]]\na = "b"\nb = "s"\ndelay = "5ms"\n'
    text = text.replace('b = {}', 'b = {}', 1)
    with pytest.raises(TopologyError, match="s is a switch"):
        build.plan(topology.parse(text.replace('a = "b"\nb = "s"',
                                               'a = "b"\na_address = "10.2.0.9/24"\nb = "s"')),
                   "own")


@pytest.mark.parametrize("capabilities,wanted,expected,why", [
    (Capabilities(tbf=True, netem=True, ifb=True, nfqueue=True), "auto", "netem", "has netem"),
    (Capabilities(tbf=True, netem=False, ifb=True, nfqueue=True), "auto", "own", "no netem"),
    (Capabilities(tbf=True, netem=True, ifb=False, nfqueue=True), "auto", "own", "no ifb"),
    (Capabilities(tbf=True, netem=True, ifb=True, nfqueue=True), "own", "own", "--shaper"),
])
def test_backend_choice_says_why(capabilities, wanted, expected, why):
    backend, reason = capabilities.choose(wanted)
    assert backend == expected and why in reason


def test_impossible_backend_is_a_clear_error():
    with pytest.raises(ValueError, match="no netem qdisc"):
        Capabilities(tbf=True, netem=False, ifb=True, nfqueue=True).choose("netem")
    with pytest.raises(ValueError, match="neither netem nor NFQUEUE"):
        Capabilities(tbf=True, netem=False, ifb=False, nfqueue=False).choose("auto")


_values = st.one_of(st.none(), st.integers(-5, 10**7), st.text(max_size=12),
                    st.floats(allow_nan=True), st.booleans(),
                    st.lists(st.text(max_size=8), max_size=3))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(topology.LINK_FIELDS) + ["x"]), _values,
                       max_size=6),
       st.sampled_from(["hosts", "routers", "switches", "links", "name", "zz"]), _values)
def test_any_malformed_input_is_a_topology_error(link, key, value):
    data = {"hosts": {"a": {}, "b": {}}, "links": [dict(link)]}
    data[key] = value
    try:
        model = topology.from_dict(data)
    except TopologyError:
        return
    for link in model.links:
        for end in (link.a, link.b):
            assert end.address is None or isinstance(end.address, ipaddress.IPv4Interface)
            assert end.interface.startswith(f"{end.node}-eth")


def test_rate_limits_at_any_speed_keep_tbf_cutting_aggregates_into_packets():
    fast = build.plan(topology.pair(rate="1G"), "own").namespaces["pair-wire"].script()
    # 1 Gbit/s: one frame and 200 us (25,000 bytes), and the one peak rate.
    assert "tbf rate 1000000000bit burst 26514 peakrate 300000000000bit mtu 3000" in fast
    faster = build.plan(topology.pair(rate="40G"), "own").namespaces["pair-wire"].script()
    assert "tbf rate 40000000000bit burst 1001514 peakrate 300000000000bit" in faster


def test_the_peak_bucket_holds_one_frame_and_never_two():
    """tc turns the MTU into whole 64 ns ticks at the peak rate; the kernel turns that time
    back into the bytes above which tbf cuts an aggregate into packets."""
    ticks = int(stages.SEGMENTING_MTU * 8 / stages.PEAK_RATE / stages.TICK_SECONDS)
    assert ticks == 1
    peak_bucket = stages.PEAK_RATE / 8 * ticks * stages.TICK_SECONDS
    assert FRAME_BYTES <= peak_bucket < 2 * FRAME_BYTES
    assert stages.PEAK_RATE > link_properties.MAX_RATE


def test_a_busy_queue_is_read_only_as_often_as_its_delay_requires():
    from simpleperf.lab.net.shaping.delayline import DirectionQueue

    steady = DirectionQueue(1, delay=0.01, jitter=0.0, reorder=False)
    assert steady.unread_wait == 0.01  # nothing unread can fall due sooner
    assert DirectionQueue(2, delay=0.01, jitter=0.002, reorder=False).unread_wait == 0.0
    steady.stamped = False  # without kernel arrival times, reading late would delay packets
    assert steady.unread_wait == 0.0
    steady.stamped = True
    steady.admit([(5, 1.0, 0, b""), (6, 1.001, 0, b"")], random.Random(1))
    assert steady.next_release() == pytest.approx(1.010)
    assert steady.due(1.0099) == []
    assert steady.due(1.0109) == [nfqueue.verdict_up_to(1, 5)]  # each its own delay
    assert steady.due(1.011) == [nfqueue.verdict_up_to(1, 6)]
    assert steady.next_release() is None


def test_releases_due_close_together_share_one_wake_up_and_none_is_early():
    """Packets due within the grain of the next release wait for the last of them (one
    wake-up, where at 1 Gbit/s one falls due every 12 us); one due later is not waited for,
    and a lone packet is woken for at its own time."""
    from simpleperf.lab.net.shaping.delayline import DirectionQueue

    queue = DirectionQueue(1, delay=0.005, jitter=0.0, reorder=False)
    queue.admit([(n, t, 0, b"") for n, t in ((1, 1.0), (2, 1.0001), (3, 1.0002),
                                                (4, 1.0009))], random.Random(1))
    assert queue.wake_time(0.0003) == pytest.approx(1.0052)  # 1-3 at once, not 4
    assert queue.wake_time(0.0) == pytest.approx(1.005)
    assert queue.due(1.0052) == [nfqueue.verdict_up_to(1, 3)]
    assert queue.wake_time(0.0003) == pytest.approx(1.0059)  # alone: its own time


def test_a_packet_that_arrives_while_the_queues_are_drained_waits_its_whole_delay():
    """The wake-up's time is taken before the queues are read; a packet stamped after it
    (it arrived during the drain) must still leave a full delay after its own stamp, not
    after the wake-up (which released packets up to 1.4 ms early on a busy machine)."""
    import time

    from simpleperf.lab.net.shaping.delayline import DirectionQueue, QueueReader

    class Arriving(QueueReader):
        def batches(self, sock):
            yield [(7, time.time(), 0, b"")]  # the kernel stamped it just now

    queue = DirectionQueue(1, delay=0.005, jitter=0.0, reorder=False, sock=object())  # type: ignore[arg-type]
    woke = time.monotonic() - 0.002  # the wake-up, 2 ms before the read
    reader = Arriving()
    reader.read([queue], woke)
    ((release, packet),) = queue.in_order
    assert packet == 7 and release >= woke + 0.002 + 0.005 - 0.0002
    assert release <= time.monotonic() + 0.005  # and never past when it was read


def test_every_packet_of_a_read_leaves_its_own_delay_after_its_own_arrival():
    """A read holds many packets that arrived apart: none may wait for the last of them,
    and none may overtake an earlier one (here a jittered release)."""
    from simpleperf.lab.net.shaping.delayline import DirectionQueue

    steady = DirectionQueue(3, delay=0.005, jitter=0.0, reorder=False)
    steady.admit([(n, t, 0, b"") for n, t in ((10, 2.0), (11, 2.0002), (12, 2.0002),
                                                 (13, 2.0009))], random.Random(1))
    assert list(steady.in_order) == [(2.005, 10), (2.0052, 12), (2.0059, 13)]
    jittered = DirectionQueue(4, delay=0.005, jitter=0.0005, reorder=False)
    arrivals = [(n, 3.0 + n * 1e-3, 0, b"") for n in range(200)]
    jittered.admit(arrivals, random.Random(2))
    releases = [release for release, _ in jittered.in_order]
    assert releases == sorted(releases) and len(set(releases)) == len(releases)
    assert len(releases) > 150  # drawn per packet, not once for the read
    assert all(release >= 3.0 for release in releases)


@pytest.mark.parametrize("content,message", [
    (b'name = "lab"\n[hosts]\nh1 = {}\n\xff\xfe', "not UTF-8 text"),
    (b"x" * (2 << 20), "larger than"),
    (b'[hosts]\n"h1\\n" = {}\n', "node name"),
    (b'name = "zz\\n"\n[hosts]\nh1 = {}\n', "topology name"),
    (("[hosts]\n" + "h" * 10_000 + " = {}\n").encode(), "node name"),
    (b'[hosts]\nh1 = {}\nh2 = {}\n[[links]]\nname = "' + b"L" * 10_000 + b'"\na = "h1"\n'
     b'b = "h2"\n', "link 1: name"),
    (b'[hosts]\nh1 = {}\nh2 = {}\n[[links]]\nname = "L1\\n"\na = "h1"\nb = "h2"\n',
     "link 1: name"),
    (b'description = "two\\nlines"\n[hosts]\nh1 = {}\n', "description"),
    (("[hosts]\n" + "".join(f"h{i} = {{}}\n" for i in range(1001))).encode(),
     "1001 nodes, at most 1000"),
    (b"[hosts]\nh1 = {}\nh2 = {}\n" + b'[[links]]\na = "h1"\nb = "h2"\n' * 2001,
     "2001 links, at most 2000"),
])
def test_bad_topology_files_are_one_line_errors(tmp_path, content, message):
    path = tmp_path / "bad.toml"
    path.write_bytes(content)
    with pytest.raises(TopologyError) as caught:
        topology.load(str(path))
    assert message in str(caught.value)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 300


def test_a_device_that_never_ends_is_refused_not_read_to_the_end():
    """Only regular files are read: a device or a FIFO is refused before a byte of it."""
    with pytest.raises(TopologyError, match="/dev/zero: not a regular file"):
        topology.load("/dev/zero")


def test_a_malformed_file_is_named_in_its_error(tmp_path):
    from simpleperf.lab.model import experiment

    broken = tmp_path / "mine.toml"
    broken.write_text('name = "x\n[[')
    with pytest.raises(topology.TopologyError, match=f"^{re.escape(str(broken))}: not valid TOML"):
        topology.load(str(broken))
    with pytest.raises(experiment.ExperimentError,
                       match=f"^{re.escape(str(broken))}: not valid TOML"):
        experiment.load(str(broken))


def test_every_link_property_is_defined_once_and_reaches_every_way_in() -> None:
    """The property table is the one list: the model's fields, topology files (Mininet's
    names), `lab up pair` and `lab link set` flags, events and sweeps all follow it."""
    from dataclasses import fields

    from simpleperf.errors import UsageError
    from simpleperf.lab import commands
    from simpleperf.lab.model import events, experiment

    assert [f.name for f in fields(topology.Shaping)] == list(link_properties.NAMES)
    parser = commands.build_parser()
    for prop in link_properties.PROPERTIES:
        given = [prop.flag] + ([prop.example] if prop.example else [])
        rate = [] if prop.replaces == "rate" else ["--rate", "10M"]  # a trace: no bw
        value = getattr(parser.parse_args(["up", "pair", *rate, *given]), prop.name)
        expected = prop.parse(value, prop.name)
        assert expected not in (None, 0, False)  # the example shapes the link
        queue = {"qdisc": prop.qdiscs[0]} if prop.qdiscs else {}  # a parameter's discipline
        paired = topology.pair(**{"rate": "10M", **queue, prop.name: value}
                               if rate else {prop.name: value}).links[0]
        from_file = topology.reshape({"bw": "10M", **queue, prop.mininet: value} if rate
                                     else {prop.mininet: value}, "link x", topology.Shaping())
        assert getattr(paired.a_to_b, prop.name) == getattr(from_file, prop.name) == expected
        if prop.live:
            assert getattr(parser.parse_args(["link", "L1", "set", *given]), prop.name) == value
            assert prop.mininet in events.SET_FIELDS
        else:
            with pytest.raises(UsageError, match=f"unrecognized arguments: {prop.flag}"):
                parser.parse_args(["link", "L1", "set", *given])
            assert prop.mininet not in events.SET_FIELDS
        assert (prop.name in experiment.LINK_SWEEPS) == prop.sweep


def test_a_link_is_built_and_set_anew_from_the_same_stages() -> None:
    """Rate, then queue below it (chained by parent), then netem on the ifb: `lab up` adds
    these stages and `lab link set` replaces them, the same data with another verb."""
    model = topology.pair(rate="10M", queue=50, delay="20ms", loss="1%")
    shaping = model.links[0].a_to_b
    rate, queue = stages.egress("w1b", shaping)
    assert (rate.kind, rate.parent, queue.kind, queue.parent) == ("tbf", None, "pfifo", "1:1")
    assert queue.options == "limit 50"
    delay = stages.netem("ifb1a", shaping)
    assert delay is not None and "delay 20000us" in delay.options and "loss 1.0" in delay.options
    built = build.plan(model, "netem").namespaces["pair-wire"].tc
    for stage in (rate, queue, delay):
        assert stage.command("add") in built
        assert stage.command("replace") == stage.command("add").replace(" add ", " replace ", 1)
    assert stages.egress("w1b", topology.Shaping()) == ()
    assert stages.netem("ifb1a", topology.Shaping()) is None
    kept = stages.netem("ifb1a", topology.Shaping(), keep=True)
    assert kept is not None and kept.options == stages.NO_DELAY


@pytest.mark.parametrize("qdisc,options", [
    ("droptail", "pfifo limit 100"),
    ("codel", "codel limit 100 target 5000us interval 100000us ecn"),
    ("fq_codel", "fq_codel limit 100 flows 256 quantum 300 target 5000us interval 100000us ecn"),
    ("pie", "pie limit 100 target 15000us tupdate 15000us ecn"),
    ("fq_pie", "fq_pie limit 100 flows 256 quantum 300 target 15000us tupdate 15000us ecn"),
])
def test_each_queue_discipline_is_one_stage_below_the_rate(qdisc: str, options: str) -> None:
    """The queue stage under tbf: the kernel's discipline with the link's packet limit and
    the kernel's names for what the link tunes (what it leaves out keeps the default)."""
    tuning = {"codel": {"target": "5ms", "interval": "100ms"},
              "fq_codel": {"flows": 256, "quantum": 300, "target": "5ms", "interval": "100ms"},
              "pie": {"target": "15ms", "tupdate": "15ms"},
              "fq_pie": {"flows": 256, "quantum": 300, "target": "15ms", "tupdate": "15ms"}}
    spec = {"bw": "10M", "max_queue_size": 100, "qdisc": qdisc, **tuning.get(qdisc, {}),
            **({"ecn": True} if qdisc != "droptail" else {})}
    shaping = topology.reshape(spec, "link x", topology.Shaping())
    _, queue = stages.egress("w1b", shaping)
    assert (queue.parent, queue.handle) == ("1:1", "10:")
    assert f"{queue.kind} {queue.options}" == options
    assert qdisc in shaping.describe() or qdisc == "droptail"


def test_cake_runs_alone_at_the_root_with_its_own_shaper_at_the_link_rate() -> None:
    shaping = topology.reshape({"bw": "10M", "max_queue_size": 100, "qdisc": "cake",
                                "interval": "50ms"}, "link x", topology.Shaping())
    (root,) = stages.egress("w1b", shaping)
    assert root.command("add") == ("qdisc add dev w1b root handle 1: cake bandwidth "
                                   "10000000bit memlimit 151400 rtt 50000us")


def test_the_kernels_cake_on_a_routed_link_comes_first_and_netem_gives_each_frame_its_time(
        ) -> None:
    """On the lab's wire (netem shaper) CAKE sits on the ifb behind the ingress and netem
    at the egress after it, at the link's rate: CAKE's shaper sends a frame at the start of
    its time on the wire, so netem gives the frame that time, as a wire of the rate would
    (with the delay, jitter, in order, and loss). Other disciplines keep tbf and their queue
    at the egress and netem on the ifb; containerlab's export keeps CAKE at the sender's
    egress and puts that netem at the receiver's ingress, after it."""
    cake = topology.reshape({"bw": "2M", "delay": "10ms", "jitter": "1ms", "loss": 1,
                             "qdisc": "cake"}, "link x", topology.Shaping())
    (after,) = stages.wire_stages("w1b", cake, "netem")
    assert after.command("add") == ("qdisc add dev w1b root handle 1: netem limit 1000000 "
                                    "delay 10000us 1000us distribution normal rate "
                                    "2000000bit loss 1.000000%")
    ip_lines, tc_lines = stages.ingress_redirect("w1a", "ifb1a",
                                                 stages.ifb_stage("ifb1a", cake))
    assert ip_lines == ["link add ifb1a type ifb", "link set ifb1a up"]
    assert tc_lines[-1] == ("qdisc add dev ifb1a root handle 1: cake bandwidth 2000000bit "
                            "memlimit 1514000")
    assert stages.wire_stages("w1b", cake, "own") == ()  # the own CAKE, in the delay line
    exported = stages.receiver_stage("ifb1", cake)  # after the sender's CAKE
    assert exported is not None
    assert exported.command("add") == after.command("add").replace("w1b", "ifb1")
    assert [q.kind for q in stages.egress("eth1", cake)] == ["cake"]
    codel = replace(cake, qdisc="codel")
    assert [q.kind for q in stages.wire_stages("w1b", codel, "netem")] == ["tbf", "codel"]
    assert [q.kind for q in (stages.ifb_stage("ifb1a", codel),
                             stages.receiver_stage("ifb1", codel)) if q] == ["netem", "netem"]
    assert stages.ingress_redirect("w1a", "ifb1a", None) == ([], [])


def test_queue_discipline_mistakes_are_one_line_and_another_discipline_starts_afresh() -> None:
    for spec, message in (({"bw": "10M", "qdisc": "red"}, "qdisc must be one of droptail"),
                          ({"qdisc": "codel"}, "qdisc needs bw"),
                          ({"bw": "10M", "target": "5ms"}, "target applies to qdisc codel"),
                          ({"bw": "10M", "qdisc": "codel", "tupdate": "15ms"},
                           "tupdate applies to qdisc pie or fq_pie or dualpi2, and the queue is "
                           "codel"),
                          ({"bw": "10M", "qdisc": "pie", "target": "0s"}, "from 1us to 10s"),
                          ({"bw": "10M", "qdisc": "fq_codel", "flows": 0}, "from 1 to 65536"),
                          ({"bw": "10M", "ecn": True}, "ecn applies to qdisc codel")):
        with pytest.raises(TopologyError, match=message):
            topology.reshape(spec, "link x", topology.Shaping())
    codel = topology.reshape({"bw": "10M", "qdisc": "codel", "ecn": True, "target": "2ms",
                              "interval": "50ms"}, "link x", topology.Shaping())
    pie = topology.reshape({"qdisc": "pie"}, "link x", codel)  # lab link set --qdisc pie
    assert (pie.qdisc, pie.ecn, pie.target, pie.interval) == ("pie", True, None, None)
    tail = topology.reshape({"qdisc": "droptail"}, "link x", codel)
    assert (tail.qdisc, tail.ecn, tail.target) == ("droptail", False, None)


def test_a_discipline_the_kernel_lacks_is_named_before_anything_is_built() -> None:
    from simpleperf.lab.net import build

    kernel = Capabilities(tbf=True, netem=True, ifb=True, nfqueue=True,
                          aqm=frozenset({"fq_codel"}))
    model = topology.pair(rate="10M", qdisc="fq_codel")
    kernel.require_queues(build.kernel_queues(model, "netem"), "netem")  # it has that one
    codel = topology.pair(rate="10M", qdisc="codel")
    with pytest.raises(ValueError, match="link h1-h2 a_to_b: qdisc codel needs the kernel's "
                       "sch_codel, which this kernel lacks \\(it has fq_codel\\); --shaper "
                       "own runs codel, pie, fq_codel, fq_pie, dualpi2, cake itself"):
        kernel.require_queues(build.kernel_queues(codel, "netem"), "netem")
    # DualPI2 (Linux 6.17): the own shaper's where the kernel lacks it, as Debian's 6.1 does
    dual = topology.pair(rate="10M", qdisc="dualpi2", step="2ms", coupling=3)
    with pytest.raises(ValueError, match="qdisc dualpi2 needs the kernel's sch_dualpi2, "
                       "which this kernel lacks .*--shaper own runs .*dualpi2, cake itself"):
        kernel.require_queues(build.kernel_queues(dual, "netem"), "netem")
    assert build.kernel_queues(dual, "own") == {}
    from simpleperf.lab.net import stages
    (_, queue) = stages.egress("w1b", dual.links[0].a_to_b)
    assert queue.command("add") == ("qdisc add dev w1b parent 1:1 handle 10: dualpi2 limit "
                                    "1000 step_thresh 2000us coupling_factor 3 l4s_ect")
    # The own shaper runs codel and cake itself.
    assert build.kernel_queues(codel, "own") == {}
    assert build.kernel_queues(topology.pair(rate="10M", qdisc="cake"), "own") == {}


def test_hosts_and_routers_set_their_tcps_ecn_and_congestion_control() -> None:
    from simpleperf.lab.net import build

    data = {"name": "t", "hosts": {"h1": {"ecn": True, "congestion": "bbr"}, "h2": {}},
            "routers": {"r1": {"ecn": False}},
            "links": [{"a": "h1", "b": "r1", "a_address": "10.0.0.1/24",
                       "b_address": "10.0.0.2/24"},
                      {"a": "r1", "b": "h2", "a_address": "10.0.1.1/24",
                       "b_address": "10.0.1.2/24"}]}
    model = topology.from_dict(data, "t")
    assert model.nodes["h1"].sysctls == ["net.ipv4.tcp_ecn=1",
                                         "net.ipv4.tcp_congestion_control=bbr"]
    assert model.nodes["r1"].sysctls == ["net.ipv4.tcp_ecn=0"]
    assert model.nodes["h2"].sysctls == []
    plan = build.plan(model, "own")
    assert "net.ipv4.tcp_ecn=1" in plan.namespaces["h1"].sysctls
    assert not any("tcp_" in x for x in plan.namespaces["h2"].sysctls)
    for node, message in (({"ecn": "yes"}, "node h1: ecn must be true or false"),
                          ({"congestion": "no such!"}, "node h1: congestion names a TCP"),
                          ({"colour": "red"}, "node h1")):
        bad = {**data, "hosts": {"h1": node, "h2": {}}}
        with pytest.raises(TopologyError, match=message):
            topology.from_dict(bad, "t")


def test_flows_that_do_not_back_off_take_their_rate_first_in_a_queue_served_in_order(
        portfolio) -> None:
    """Through drop-tail (or CoDel, PIE) a paced UDP flow keeps sending what it sends and
    the TCP flows share the rest; flow queueing gives it only its max-min share."""
    paths = [theory.path(portfolio, "h1", "h4"), theory.path(portfolio, "h2", "h5"),
             theory.path(portfolio, "h3", "h6")]
    demands = [20e6, None, None]  # L2 is 30 Mbit/s
    fair = theory.max_min_shares(paths, demands)
    first = theory.max_min_shares(paths, demands, inelastic=[True, False, False])
    assert [round(r / 1e6, 3) for r in fair] == [10, 10, 10]
    assert [round(r / 1e6, 3) for r in first] == [20, 5, 5]
    over = theory.max_min_shares(paths, [40e6, 20e6, None], inelastic=[True, True, False])
    assert [round(r / 1e6, 3) for r in over] == [20, 10, 0]  # scaled to fit the link
    model = topology.pair(rate="10M", qdisc="fq_codel")
    udp = FlowOutcome(flows.parse({"kind": "udp", "from": "h1", "to": "h2", "rate": "8M"},
                                  "t"), "10.0.0.2")
    tcp = FlowOutcome(flows.parse({"kind": "tcp", "from": "h1", "to": "h2"}, "t"), "10.0.0.2")
    theory.predict(model, [udp, tcp], "cubic")
    assert udp.predicted is not None and udp.predicted < 5e6  # FQ: half the link at most
    for qdisc in ("droptail", "codel", "pie"):
        udp.predicted = tcp.predicted = None
        theory.predict(topology.pair(rate="10M", qdisc=qdisc), [udp, tcp], "cubic")
        assert udp.predicted == pytest.approx(8e6)
        assert tcp.predicted is not None and tcp.predicted < 2e6


def test_a_window_bound_uses_the_round_trips_the_flow_met():
    model = topology.pair(rate="10M", delay="10ms")
    web = FlowOutcome(flows.parse({"kind": "tcp", "from": "h1", "to": "h2", "window": "16K",
                                   "rtt_under_load": True}, "t"), "10.0.0.2")
    theory.predict(model, [web], "cubic")
    # the window less the half segment a delayed ACK holds at the receiver on average
    assert web.window_bound == pytest.approx(theory.window_bound(16_000 - 724, 0.020))
    web.rtts = [40.0, 40.0, 120.0, 120.0]  # pinged beside it under load
    theory.predict(model, [web], "cubic")
    harmonic = 4 / (2 / 0.040 + 2 / 0.120)  # 60 ms: the window moved at 1 / mean(1 / RTT)
    assert web.window_bound == pytest.approx(theory.window_bound(16_000 - 724, harmonic))
    assert web.predicted == pytest.approx(web.window_bound)
    # once it ran, the window its receiver advertised: Linux makes a 16,000-byte buffer
    # a window of 12 segments, 17,376 bytes (6.x scales it by its payload's share)
    web.advertised_window = 17_376
    theory.predict(model, [web], "cubic")
    assert web.window_bound == pytest.approx(theory.window_bound(17_376 - 724, harmonic))
    # no pings beside it: the least RTT its own TCP measured (never below the path's)
    web.rtts, web.own_rtt_ms = [], 20.7
    theory.predict(model, [web], "cubic")
    assert web.window_bound == pytest.approx(theory.window_bound(17_376 - 724, 0.0207))
    web.own_rtt_ms = 5.0
    theory.predict(model, [web], "cubic")
    assert web.window_bound == pytest.approx(theory.window_bound(17_376 - 724, 0.020))


WEIGHTS_FOR_TEST = ("control", "af4", "af3", "af2", "af1", "be", "scavenger")


def parsed(raw: dict) -> FlowOutcome:
    return FlowOutcome(flows.parse({"from": "h1", "to": "h2", **raw}, "t"), "10.0.0.2")


def test_diffserv_classes_give_priority_first_then_weighted_parts_of_the_rest() -> None:
    from simpleperf.lab.model import diffserv

    # The priority class first, to its cap; the rest by weight, what a class leaves to others.
    shares = diffserv.class_shares(10e6, {"priority": 5e6, "af4": 2e6, "af2": math.inf,
                                          "be": math.inf})
    assert shares["priority"] == pytest.approx(3e6)  # policed to 30 %
    assert shares["af4"] == pytest.approx(2e6)  # asks less than its 25/60 of 7M
    assert shares["af2"] == pytest.approx(5e6 * 15 / 35)  # the 5M left, 15 : 20
    assert shares["be"] == pytest.approx(5e6 * 20 / 35)
    assert sum(shares.values()) == pytest.approx(10e6)
    assert diffserv.class_shares(10e6, {"be": math.inf}) == {"be": 10e6}  # work conserving
    assert diffserv.priority_delay(10e6, 1514) == pytest.approx((75_000 + 1514) * 8 / 10e6)


@given(st.dictionaries(st.sampled_from(["priority", *WEIGHTS_FOR_TEST]),
                       st.one_of(st.just(math.inf), st.floats(0, 2e7)), min_size=1))
def test_class_shares_never_give_more_than_asked_nor_more_than_the_link(asked) -> None:
    from simpleperf.lab.model import diffserv

    shares = diffserv.class_shares(1e7, asked)
    assert sum(shares.values()) <= 1e7 * (1 + 1e-9)
    for name, share in shares.items():
        assert 0 <= share <= asked[name] * (1 + 1e-9)
    if any(math.isinf(v) for n, v in asked.items() if n != "priority"):
        assert sum(shares.values()) == pytest.approx(1e7)  # an elastic class takes the rest


def test_cake_tins_serve_each_up_to_its_threshold_then_share_what_is_left() -> None:
    from simpleperf.lab.model import diffserv

    # all three busy: voice its quarter, bulk its sixteenth, best effort the rest
    shares = diffserv.cake_tin_shares(16e6, {"voice": math.inf, "bulk": math.inf,
                                             "best-effort": math.inf})
    assert shares == pytest.approx({"voice": 4e6, "bulk": 1e6, "best-effort": 11e6})
    # best effort asks little: voice and bulk share what it leaves by their thresholds
    shares = diffserv.cake_tin_shares(16e6, {"voice": math.inf, "bulk": math.inf,
                                             "best-effort": 1e6})
    assert shares["best-effort"] == pytest.approx(1e6)
    assert shares["voice"] - 4e6 == pytest.approx(4 * (shares["bulk"] - 1e6))
    assert sum(shares.values()) == pytest.approx(16e6)
    assert diffserv.cake_tin_shares(16e6, {"bulk": math.inf}) == {"bulk": 16e6}  # alone
    assert [diffserv.cake_tin_of(d) for d in (0, 8, 1, 46, 40, 56)] == [0, 1, 1, 2, 0, 2]


@given(st.dictionaries(st.sampled_from(["voice", "bulk", "best-effort"]),
                       st.one_of(st.just(math.inf), st.floats(0, 2e7)), min_size=1))
def test_cake_tin_shares_never_give_more_than_asked_nor_more_than_the_link(asked) -> None:
    from simpleperf.lab.model import diffserv

    shares = diffserv.cake_tin_shares(1e7, asked)
    assert sum(shares.values()) <= 1e7 * (1 + 1e-9)
    for name, share in shares.items():
        assert 0 <= share <= asked[name] * (1 + 1e-9)
    if any(math.isinf(v) for v in asked.values()):
        assert sum(shares.values()) == pytest.approx(1e7)  # work conserving


def test_theory_shares_a_cake_link_by_tin_as_the_rrul_experiment_runs_it() -> None:
    """rrul over cake: the EF flow alone in the voice tin takes its quarter of the link, the
    BK flow alone in bulk its sixteenth, and best effort's BE and CS5 flows share the rest
    (the full rrul run measured 4.54, 1.21 and 6.23, 6.25 Mbit/s of a 20 Mbit/s link)."""
    model = topology.pair(rate="20M", delay="10ms", qdisc="cake")
    be, bk, cs5, ef = (parsed({"kind": "tcp", "dscp": dscp})
                       for dscp in ("BE", "CS1", "CS5", "EF"))
    theory.predict(model, [be, bk, cs5, ef], "cubic", [60.0] * 4)
    goodput = theory.TCP_GOODPUT
    assert ef.predicted == pytest.approx(20e6 / 4 * goodput)
    assert bk.predicted == pytest.approx(20e6 / 16 * goodput)
    assert be.predicted == cs5.predicted == pytest.approx(20e6 * 11 / 32 * goodput)
    assert bk.bottleneck is None and "CAKE tin best-effort" in str(be.bottleneck)


def test_theory_shares_a_classes_link_by_class_as_the_qos_experiment_runs_it() -> None:
    """The qos experiment's first step over `classes`: voice (EF) and video (AF41) take what
    they send; what is left goes 15 : 20 to the web flow's class (AF21, its 16 KB window
    would carry more) and the three bulk connections' (best effort), whose bottleneck is
    their class, shared with another best-effort flow when there is one; voice's queue
    bound is the priority class's, video's its class's queue drained at its part of the
    link."""
    model = topology.pair(rate="10M", delay="10ms", queue=200, qdisc="classes")
    voice = parsed({"kind": "udp", "rate": "64K", "length": 80, "dscp": "EF"})
    video = parsed({"kind": "udp", "rate": "2M", "length": 576, "dscp": "AF41"})
    bulk = parsed({"kind": "tcp", "parallel": 3})
    web = parsed({"kind": "tcp", "window": "16K", "dscp": "AF21"})
    theory.predict(model, [voice, video, bulk, web], "cubic", [30.0] * 4)
    assert voice.predicted == pytest.approx(64e3) and video.predicted == pytest.approx(2e6)
    rest = 10e6 - 64e3 / theory.udp_goodput_share(80) - 2e6 / theory.udp_goodput_share(576)
    assert web.window_bound > rest * 15 / 35
    assert web.predicted == pytest.approx(rest * 15 / 35 * theory.TCP_GOODPUT, rel=1e-6)
    assert bulk.predicted == pytest.approx(rest * 20 / 35 * theory.TCP_GOODPUT, rel=1e-6)
    assert bulk.no_theory is None and bulk.epoch_seconds is not None  # its class binds
    assert bulk.bottleneck is None  # alone in its class: no other flow's share to reach
    twin = parsed({"kind": "tcp"})
    theory.predict(model, [voice, bulk, twin], "cubic", [30.0] * 3)
    assert bulk.bottleneck == twin.bottleneck == "h1-h2 a to b (class be)"
    assert voice.full_queue_rtt - voice.base_rtt == pytest.approx(
        (75_000 + 1514) * 8 / 10e6 * 1e3)
    video_part = 2e6 / theory.udp_goodput_share(576)
    assert video.full_queue_rtt - video.base_rtt == pytest.approx(
        200 * 1514 * 8 / video_part * 1e3)


def test_a_ping_beside_load_is_judged_between_the_base_and_every_queue_full() -> None:
    from simpleperf.lab.model import verdicts

    ping = {"label": "p", "kind": "ping", "ok": True, "base_rtt_ms": 20.0,
            "rtt_median": 150.0, "loaded_rtt_ms": 400.0}
    assert not verdicts.flow_verdict(ping).within  # alone: the base RTT
    assert verdicts.flow_verdict(ping, loaded=True).within
    assert not verdicts.flow_verdict({**ping, "rtt_median": 450.0}, loaded=True).within
    assert not verdicts.flow_verdict({**ping, "rtt_median": 10.0}, loaded=True).within


def test_classes_with_the_kernel_are_an_htb_tree_as_the_own_classes_share_the_link() -> None:
    """`classes` where the kernel runs the queue (netem, a switch's port): htb at the root
    with the link rate, EF first (prio 0) policed to its share, the other aggregates' rates in
    proportion to the own discipline's weights and their quanta as its deficit round robin's,
    a pfifo each, and u32 filters for every DSCP of the own table, IPv4 and IPv6."""
    from simpleperf.lab.model import diffserv as classes
    from simpleperf.lab.net import build, stages

    model = topology.pair(rate="10M", qdisc="classes", queue=300)
    assert build.kernel_queues(model, "netem") == {"link h1-h2 a_to_b": "classes",
                                                   "link h1-h2 b_to_a": "classes"}
    assert build.kernel_queues(model, "own") == {}  # the delay line's own
    tree = stages.egress("w1b", model.links[0].a_to_b)
    lines = [stage.command("add") for stage in tree]
    assert lines[0] == "qdisc add dev w1b root handle 1: htb default 16"
    assert lines[1].startswith("class add dev w1b parent 1: classid 1:1 htb rate 10000000bit "
                               "ceil 10000000bit")
    assert lines[2].startswith("class add dev w1b parent 1:1 classid 1:10 htb rate 3000000bit "
                               "ceil 10000000bit prio 0")
    rates = {s.classid: int(re.search(r"rate (\d+)bit", s.options).group(1))
             for s in tree if isinstance(s, stages.TcClass) and s.classid != "1:1"}
    for name, weight in classes.WEIGHTS.items():
        assert rates[stages.CLASS_IDS[name]] == 7_000_000 * weight // 100
    assert sum(rates.values()) == 10_000_000  # the whole link, nothing over
    leaves = [s for s in tree if isinstance(s, stages.Qdisc) and s.kind == "pfifo"]
    assert len(leaves) == len(classes.WEIGHTS)
    assert {s.options for s in leaves} == {"limit 300"}
    # EF: policed by a token bucket of 200 ms of 3M, one frame's queue
    assert ("qdisc add dev w1b parent 1:10 handle 100: tbf rate 3000000bit burst 75000 "
            "limit 1514") in lines
    filters = [s for s in tree if isinstance(s, stages.Filter)]
    assert len(filters) == 2 * len(classes.CLASS_OF_DSCP)
    assert ("filter add dev w1b parent 1: protocol ip prio 1 u32 match ip dsfield 0xb8 0xfc "
            "flowid 1:10") in lines
    assert ("filter add dev w1b parent 1: protocol ipv6 prio 2 u32 match ip6 priority 0x20 "
            "0xfc flowid 1:17") in lines  # CS1, less than best effort
    assert stages.queue_runner(model.links[0].a_to_b, "netem", True).startswith(
        "classes: the kernel's htb")
    no_htb = Capabilities(tbf=True, netem=True, ifb=True, nfqueue=True, htb=False)
    with pytest.raises(ValueError, match="link h1-h2 a_to_b: qdisc classes needs the "
                       "kernel's htb qdisc and u32 filter, which this kernel lacks; "
                       "--shaper own runs its own"):
        no_htb.require_queues(build.kernel_queues(model, "netem"), "netem")
    Capabilities(tbf=True, netem=True, ifb=True, nfqueue=True, htb=True).require_queues(
        build.kernel_queues(model, "netem"), "netem")


def _campus_static() -> topology.Topology:
    """campus with static routes where OSPF would put them (r2's path preferred)."""
    text = topology.load("campus").source
    text = text.replace('routing = "ospf"', "").replace("cost = 10", "").replace(
        "cost = 30", "")
    routes = {"h1": "default via 10.10.1.1", "h4": "default via 10.10.2.1",
              "r1": "10.10.2.0/24 via 10.10.12.2", "r2": "10.10.1.0/24 via 10.10.12.1",
              "r3": "10.10.1.0/24 via 10.10.23.1"}
    for node, route in routes.items():
        text = text.replace(f"{node} = {{}}", f'{node} = {{ routes = ["{route}"] }}')
    text = text.replace('r2 = { routes = ["10.10.1.0/24 via 10.10.12.1"] }',
                        'r2 = { routes = ["10.10.1.0/24 via 10.10.12.1", '
                        '"10.10.2.0/24 via 10.10.23.2"] }')
    return topology.parse(text)


def test_an_mptcp_connection_gets_a_subflow_on_each_path_that_shares_no_core_link() -> None:
    model = _campus_static()
    first, second = theory.subflow_paths(model, "h1", "h4")
    assert [link.name for link, _ in first.hops][2:4] == ["C1", "C2"]  # the routed one
    assert "B1" in [link.name for link, _ in second.hops]
    assert not {"C1", "C2"} & {link.name for link, _ in second.hops}
    assert (first.bottleneck, second.bottleneck) == (100e6, 50e6)
    assert len(theory.subflow_paths(model, "h1", "h4", frozenset({"B1"}))) == 1
    assert len(theory.subflow_paths(model, "h1", "h2")) == 1  # one LAN: no second path
    assert len(theory.subflow_paths(topology.load("portfolio"), "h1", "h4")) == 1
    outcome = FlowOutcome(flows.parse({"kind": "tcp", "from": "h1", "to": "h4",
                                       "mptcp": True}, "flow"), "10.10.2.11")
    single = FlowOutcome(flows.parse({"kind": "tcp", "from": "h1", "to": "h4"}, "flow"),
                         "10.10.2.11")
    theory.predict(model, [outcome], "cubic")
    theory.predict(model, [single], "cubic")
    assert outcome.predicted == pytest.approx(150e6 * theory.TCP_GOODPUT)
    assert single.predicted == pytest.approx(100e6 * theory.TCP_GOODPUT)
    assert outcome.theory_path == "h1 r1 r2 r3 h4 + h1 r1 r3 h4"


@pytest.mark.parametrize(("table", "message"), [
    ({"kind": "tcp", "mptcp": "yes"}, "mptcp must be true or false"),
    ({"kind": "udp", "mptcp": True}, "mptcp only applies to tcp flows"),
    ({"kind": "tcp", "mptcp": True, "tool": "iperf3"},
     "mptcp needs a simpleperf server, not tool = 'iperf3'"),
])
def test_bad_mptcp_flows_are_one_line(table, message) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        flows.parse({"from": "h1", "to": "h4", **table}, "flow")


NAMED = """
name = "named"
[hosts]
PC1 = {}
client-2 = {}
[switches]
sw_1 = {}
[[links]]
a = "PC1"
a_interface = "eth1"
a_address = "10.0.0.1/24"
b = "sw_1"
b_interface = "e1"
[[links]]
a = "client-2"
a_address = "10.0.0.2/24"
b = "sw_1"
"""


def test_node_and_interface_names_as_containerlab_writes_them():
    """Names keep their case and their own interfaces (a namespace and an interface carry
    them); an end without a name is NODE-ethN, numbered as before."""
    model = topology.parse(NAMED)
    assert set(model.nodes) == {"PC1", "client-2", "sw_1"}
    ends = [(end.node, end.interface) for link in model.links for end in (link.a, link.b)]
    assert ends == [("PC1", "eth1"), ("sw_1", "e1"), ("client-2", "client-2-eth0"),
                    ("sw_1", "sw_1-eth2")]


@pytest.mark.parametrize(("change", "message"), [
    (('b_interface = "e1"', 'b_interface = "sw_1"'), "sw_1 has an interface sw_1 already"),
    (('a_interface = "eth1"', 'a_interface = "lo"'), "lo is every node's loopback"),
    (('a_interface = "eth1"', 'a_interface = "a-name-too-long-1"'),
     "a_interface 'a-name-too-long-1' must be 1-15"),
    (('a_interface = "eth1"', 'a_interface = "eth 1"'), "a_interface 'eth 1' must be"),
])
def test_interface_names_are_checked(change, message):
    text = NAMED.replace(*change)
    assert text != NAMED
    with pytest.raises(TopologyError, match=re.escape(message)):
        topology.parse(text)


def test_a_long_node_name_needs_its_interfaces_named():
    text = NAMED.replace("client-2", "client-twelve1")
    with pytest.raises(TopologyError, match=r"b_interface is missing|a_interface is missing: "
                                            r"client-twelve1's name is too long"):
        topology.parse(text)
    named = text.replace('a = "client-twelve1"', 'a = "client-twelve1"\na_interface = "eth1"')
    assert topology.parse(named).links[1].a.interface == "eth1"


def test_tcp_flows_beside_an_unresponsive_one_in_a_fifo_share_what_it_leaves():
    """A paced flow through a FIFO takes what it sends; the TCP flows beside it share the
    rest and are judged as sharers of that link (the paced one getting more is no reason
    to say the link limits none of them)."""
    model = topology.pair(rate="10M", delay="10ms", queue=200)
    video = FlowOutcome(flows.parse({"kind": "udp", "from": "h1", "to": "h2", "rate": "2M",
                                     "length": 576}, "t"), "10.0.0.2")
    bulk = FlowOutcome(flows.parse({"kind": "tcp", "from": "h1", "to": "h2",
                                    "parallel": 12}, "t"), "10.0.0.2")
    web = FlowOutcome(flows.parse({"kind": "tcp", "from": "h1", "to": "h2",
                                   "window": "16K"}, "t"), "10.0.0.2")
    theory.predict(model, [video, bulk, web], "cubic", [30.0] * 3)
    assert video.predicted == pytest.approx(2e6) and video.bottleneck is None
    assert bulk.bottleneck == web.bottleneck == "h1-h2 a to b"
    assert bulk.share_tolerance is not None


def test_a_paced_flow_above_its_share_in_fair_queueing_waits_for_its_own_queue():
    """fq_codel serves flows in turn: video at three times its share fills the queue with
    its own datagrams, each drained at its share, far past a FIFO's full queue; below its
    share it is bounded as a FIFO's full queue bounds it."""
    model = topology.pair(rate="10M", delay="10ms", queue=200, qdisc="fq_codel")
    video = FlowOutcome(flows.parse({"kind": "udp", "from": "h1", "to": "h2", "rate": "2M",
                                     "length": 576}, "t"), "10.0.0.2")
    bulk = FlowOutcome(flows.parse({"kind": "tcp", "from": "h1", "to": "h2",
                                    "parallel": 12}, "t"), "10.0.0.2")
    theory.predict(model, [video, bulk], "cubic")
    fifo = 200 * theory.FRAME_BYTES * 8 / 10e6 * 1e3
    assert video.predicted is not None and video.predicted < 1e6
    share = video.predicted / theory.udp_goodput_share(576)
    own = 200 * (576 + theory.UDP_FRAMING_BYTES) * 8 / share * 1e3
    assert video.full_queue_rtt == pytest.approx(20.0 + own)
    assert bulk.full_queue_rtt == pytest.approx(20.0 + fifo)
    slow = FlowOutcome(flows.parse({"kind": "udp", "from": "h1", "to": "h2", "rate": "200K",
                                    "length": 576}, "t"), "10.0.0.2")
    theory.predict(model, [slow, bulk], "cubic")
    assert slow.full_queue_rtt == pytest.approx(20.0 + fifo)


@pytest.mark.parametrize("qdisc", ["fq_codel", "cake", "fq_pie"])
def test_beside_fq_pie_a_flow_sharing_its_limit_with_one_above_its_share_is_not_judged(qdisc):
    """fq_codel and CAKE drop from the longest queue when full: video above its share loses
    its own packets and TCP keeps its share. fq_pie (as Linux's) drops whatever arrives:
    until PIE's probability for video catches up, TCP's arrivals are dropped too, so theory
    gives its goodput no verdict, and says so; below its share, video crowds no one."""
    model = topology.pair(rate="10M", delay="10ms", queue=100, qdisc=qdisc)
    for rate, crowded in (("6M", qdisc == "fq_pie"), ("2M", False)):
        video = FlowOutcome(flows.parse({"kind": "udp", "from": "h1", "to": "h2",
                                         "rate": rate, "label": "video"}, "t"), "10.0.0.2")
        bulk = FlowOutcome(flows.parse({"kind": "tcp", "from": "h1", "to": "h2"}, "t"),
                           "10.0.0.2")
        theory.predict(model, [video, bulk], "cubic")
        assert bulk.predicted is not None and video.no_theory is None
        assert (bulk.no_theory is not None) == crowded, (rate, bulk.no_theory)
        if crowded:
            assert "(fq_pie, as Linux's) with video" in bulk.no_theory


@pytest.mark.parametrize("qdisc, grouped", [("droptail", True), ("dualpi2", True),
                                            ("fq_codel", False)])
def test_an_l4s_flow_and_classic_tcp_in_one_queue_are_judged_on_their_total(qdisc, grouped):
    """How an L4S sender and CUBIC split a FIFO or DualPI2 follows their responses to marks
    and losses: no share is promised, only the total; fair queueing gives each its share."""
    model = topology.pair(rate="20M", delay="10ms", queue=200, qdisc=qdisc)
    classic = FlowOutcome(flows.parse({"kind": "tcp", "from": "h1", "to": "h2"}, "t"),
                          "10.0.0.2")
    scalable = FlowOutcome(flows.parse({"kind": "udp", "from": "h1", "to": "h2",
                                        "l4s": True}, "t"), "10.0.0.2")
    theory.predict(model, [classic, scalable], "cubic", [20.0, 20.0])
    if grouped:
        assert classic.bottleneck == scalable.bottleneck == "h1-h2 a to b"
        assert classic.share_tolerance is None and scalable.share_tolerance is None
    else:
        assert scalable.bottleneck is None and classic.share_tolerance is not None


def test_the_delay_line_counts_releases_it_made_late_and_says_so_in_a_file(tmp_path):
    """A release 20 ms or more after its time is a delay line that could not keep up (too
    many packets a second for this machine): the lab reads the count and judges no flow
    across that queue."""
    from simpleperf.lab.net.shaping import delayline

    queue = delayline.DirectionQueue(1, delay=0.005, jitter=0.0, reorder=False)
    queue.admit([(1, 1.0, 0, b""), (2, 1.001, 0, b"")], random.Random(1))
    queue.due(1.0061)  # on time, within the timer's grain
    assert queue.late == 0
    queue.admit([(3, 2.0, 0, b"")], random.Random(1))
    queue.due(2.005 + delayline.LATE_SECONDS + 0.001)
    assert queue.late == 1
    jittered = delayline.DirectionQueue(2, delay=0.005, jitter=0.002, reorder=True)
    jittered.admit([(9, 1.0, 0, b"")], random.Random(1))
    jittered.due(1.5)
    assert jittered.late == 1
    path = delayline.beside(str(tmp_path / "lab.delayline1.json"), delayline.LATE_SUFFIX)
    assert path.endswith("lab.delayline1.late")
    assert delayline.read_late(path) == {}
    delayline.write_counts(path, {1: queue.late, 2: 0})
    assert delayline.read_late(path) == {1: 1, 2: 0}
    Path(path).write_text("[1, 2")
    assert delayline.read_late(path) == {}


def test_what_theory_cannot_promise_a_transfer_is_not_judged_and_says_why():
    """An scp timed start to exit on a long path spends seconds in SSH's handshakes and a
    slow start; BBR on a path that loses packets at random is not Mathis's loss-based TCP."""
    def scp(delay: str, loss: str = "0%", congestion: str = "cubic") -> FlowOutcome:
        outcome = FlowOutcome(flows.parse({"kind": "scp", "from": "h1", "to": "h2",
                                           "size": "100M"}, "t"), "10.0.0.2")
        theory.predict(topology.pair(rate="100M", delay=delay, loss=loss), [outcome],
                       congestion)
        return outcome
    assert scp("0.5ms").no_theory is None and scp("5ms").no_theory is None
    # timed start to exit, its goodput includes its start-up: 8 handshakes, then a slow start
    # from 10 segments to the path's window (10 ms x 100 Mbit/s: 82 frames, 3 rounds more)
    near = scp("5ms")
    rate = 100e6 * theory.TCP_GOODPUT
    assert near.start_up_seconds == pytest.approx(
        (8 + 1 + math.log2(rate * 0.010 / (theory.FRAME_BYTES * 8) / 10)) * 0.010)
    assert near.predicted == pytest.approx(800e6 / (near.start_up_seconds + 800e6 / rate))
    assert 0.98 < near.predicted / rate < 0.99  # 0.12 s of start-up beside 8.4 s
    far = scp("50ms").no_theory
    assert far is not None and "start-up" in far and "8 handshake round trips" in far
    lossy = scp("5ms", "5%", "bbr")
    assert lossy.no_theory is not None and "bbr on a path that loses 5% of" in lossy.no_theory
    cubic = scp("5ms", "5%", "cubic")
    assert cubic.no_theory is None and cubic.mathis_bound is not None
