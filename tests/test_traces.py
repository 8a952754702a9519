"""Trace-driven links: Mahimahi's format read as is (and refused in one line when it is not
one), the shipped traces and their generator, and the wire that follows a trace."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simpleperf.lab.model import topology, traces
from simpleperf.lab.model.errors import TopologyError
from simpleperf.lab.net import build
from simpleperf.lab.net.shaping import aqm
from simpleperf.lab.net.shaping.bottleneck import Bottleneck, TraceWire


def write(tmp_path: Path, text: str | bytes) -> str:
    path = tmp_path / "link.trace"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(path)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 5000), min_size=1, max_size=300).map(sorted).filter(
    lambda moments: moments[-1] > 0))
def test_any_non_decreasing_list_of_milliseconds_is_a_trace(moments):
    parsed = traces.parse("".join(f"{m}\n" for m in moments).encode(), "t")
    assert parsed == tuple(moments)
    trace = traces.Trace("t", parsed)
    assert trace.mean_rate == pytest.approx(len(moments) * 1500 * 8 / (moments[-1] / 1000))
    bins = trace.capacity(100)
    assert sum(rate * 0.1 for _, rate in bins) == pytest.approx(len(moments) * 1500 * 8)


@pytest.mark.parametrize("text,message", [
    ("", "has no delivery opportunities"),
    ("\n\n", "has no delivery opportunities"),
    ("1\n2\nx3\n", "line 3: 'x3' is not a whole number of milliseconds"),
    ("1\n-2\n", "line 2: '-2' is not a whole number"),
    ("1.5\n", "line 1: '1.5' is not a whole number"),
    ("5\n3\n", "line 2: 3 ms comes before the line above \\(5 ms\\)"),
    ("0\n0\n", "its last time, 0 ms, must be from 1 ms to a day"),
    ("99999999999\n", "is not a whole number"),
    (b"1\n\xff\xfe\n", "line 2: .* is not a whole number"),
])
def test_a_file_that_is_no_trace_is_one_line(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(TopologyError, match=message) as caught:
        traces.load(path, "link x: trace")
    assert "\n" not in str(caught.value)


def test_a_huge_file_missing_file_or_unknown_name_is_one_line(tmp_path):
    huge = write(tmp_path, "1\n" * (5 << 20))  # 10 MB of lines
    with pytest.raises(TopologyError, match="larger than 8 MB"):
        traces.load(huge)
    with pytest.raises(TopologyError, match="cannot read .*: No such file"):
        traces.load(str(tmp_path / "none.trace"))
    with pytest.raises(TopologyError, match="no shipped trace named 'nope' \\(shipped: "
                       "constant-12M, lte-walk, outages-24M"):
        traces.load("nope")


def test_the_shipped_traces_are_what_their_generator_makes(tmp_path):
    made = traces.generate(tmp_path)
    assert sorted(path.stem for path in made) == traces.shipped()
    for path in made:
        assert path.read_bytes() == (traces.DATA_DIR / path.name).read_bytes(), path.name
    assert traces.load("constant-12M").mean_rate == pytest.approx(12e6)
    outages = traces.load("outages-24M")
    capacity = dict(outages.capacity(1000))
    assert capacity[0.0] == pytest.approx(24e6, rel=0.01) and capacity[4.0] == 0.0  # outage


def line(trace: traces.Trace, epoch: float = 0.0) -> Bottleneck:
    return Bottleneck(trace.mean_rate, aqm.make("droptail", aqm.Settings(limit=100_000)), 0.0,
                      wire=TraceWire(trace, epoch))


def test_full_packets_leave_one_per_opportunity_and_small_ones_share_one():
    bottleneck = line(traces.load("constant-12M"), epoch=10.0)
    bottleneck.arrive([aqm.Packet(i, 10.0, 1514) for i in range(5)]  # 1500-byte IP packets
                      + [aqm.Packet(5 + i, 10.5, 54) for i in range(30)])  # 40-byte ACKs
    bottleneck.run_until(20.0)
    released = [round(t, 6) for t, _ in bottleneck.sent]
    assert released[:5] == [10.001, 10.002, 10.003, 10.004, 10.005]
    assert released[5:] == [10.5] * 30  # 1200 bytes: one opportunity carries them all


def test_a_packet_larger_than_an_opportunity_spreads_over_the_next_and_the_trace_loops():
    trace = traces.Trace("t", (0, 0, 10))  # 3 per 10 ms; it repeats from 10 ms
    bottleneck = line(trace)
    bottleneck.arrive([aqm.Packet(0, 0.0, 1014), aqm.Packet(1, 0.0, 1014)]
                      + [aqm.Packet(2 + i, 0.0, 1514) for i in range(4)])
    bottleneck.run_until(1.0)
    # IP bytes 1000, 1000, then 1500s; opportunities at 0, 0, 10, then (looped) 10, 10, 20:
    # 1000 of the first; its 500 and 500 of the second; that one's 1000 and 500 of the
    # third (10 ms); its 1000 and 500 of the fourth (10 ms); the fourth's 1000 and 500 of
    # the fifth (10 ms); its 1000 and 500 of the sixth (20 ms)
    assert [round(t * 1000, 6) for t, _ in bottleneck.sent] == [0, 0, 10, 10, 10, 20]


def test_nothing_leaves_during_an_outage_and_a_saturated_link_carries_the_trace():
    trace = traces.load("outages-24M")
    bottleneck = line(trace)
    arrivals = [aqm.Packet(i, i * 0.0002, 1514) for i in range(50_000)]  # 60 Mbit/s, 10 s
    bottleneck.arrive(arrivals)
    bottleneck.run_until(10.0)
    times = [t for t, _ in bottleneck.sent]
    assert not [t for t in times if 4.0 < t < 5.0] and not [t for t in times if 9 < t < 10]
    carried = len([t for t in times if t <= 10.0]) * 1500 * 8 / 10.0
    assert carried == pytest.approx(trace.mean_rate, rel=0.001)


def test_a_trace_sets_the_links_mean_rate_and_only_the_own_shaper_follows_it(tmp_path):
    model = topology.pair(trace="constant-12M", delay="5ms")
    assert model.links[0].a_to_b.rate == pytest.approx(12e6)
    assert model.links[0].a_to_b.trace == str(traces.DATA_DIR / "constant-12M.trace")
    plan = build.plan(model, "own")
    assert [entry["trace"] for entry in plan.delay_queues] == [model.links[0].a_to_b.trace] * 2
    assert not plan.namespaces["pair-wire"].tc  # no kernel rate limiter
    with pytest.raises(TopologyError, match="use --shaper own"):
        build.plan(model, "netem")
    with pytest.raises(TopologyError, match="trace and bw both set"):
        topology.pair(trace="constant-12M", rate="10M")
    one_way = topology.pair(a_to_b={"trace": "outages-24M"}, rate="10M")
    assert one_way.links[0].a_to_b.rate == pytest.approx(19.2e6)
    assert one_way.links[0].b_to_a.rate == 10e6 and one_way.links[0].b_to_a.trace is None
    with pytest.raises(TopologyError, match="trace: no shipped trace named"):
        topology.pair(trace="nope")
