"""Events during a step: the file's rules, the pure measures of what an event did, and a
run on real namespaces where a link's delay changes, it fails and it returns on time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lab_helpers import lab, needs_lab

from simpleperf.lab.analysis import events as analysis
from simpleperf.lab.model import experiment
from simpleperf.lab.model.experiment import ExperimentError

STEP = """
name = "evented"
topology = "pair"
[pair]
delay = "5ms"
rate = "20M"
[timing]
duration = "6s"
[[steps]]
name = "changes"
flows = [{{ kind = "tcp", from = "h1", to = "h2", label = "tcp" }},
         {{ kind = "udp", from = "h1", to = "h2", rate = "2M", label = "udp" }}]
events = [{events}]
"""


def plan(events: str) -> experiment.Experiment:
    return experiment.parse(STEP.format(events=events))


def test_events_are_read_in_time_order():
    parsed = plan('{ at = "4s", link = "h1-h2", action = "up" }, '
                  '{ at = 3, link = "h1-h2", action = "down" }, '
                  '{ at = "1.5s", link = "h1-h2", action = "set", delay = "20ms", bw = 10 }, '
                  '{ at = "5s", node = "h2", action = "down" }').steps[0].events
    assert [(e.at, e.target, e.on_node, e.action) for e in parsed] == [
        (1.5, "h1-h2", False, "set"), (3.0, "h1-h2", False, "down"),
        (4.0, "h1-h2", False, "up"), (5.0, "h2", True, "down")]
    assert parsed[0].shaping == {"delay": "20ms", "bw": 10}
    assert parsed[0].describe() == "at 1.5 s: link h1-h2 set bw 10, delay 20ms"


@pytest.mark.parametrize("events, message", [
    ('{ at = "1s", action = "down" }', "event 1: give either link = NAME or node = NAME"),
    ('{ at = "1s", link = "L1", node = "r1", action = "down" }', "give either link"),
    ('{ at = "-1s", link = "L1", action = "down" }', "at = '-1s' must be a time from 0"),
    ('{ at = true, link = "L1", action = "down" }', "at = True must be a time"),
    ('{ at = "1s", link = "L1", action = "flap" }', "action must be one of down, up, set"),
    ('{ at = "1s", link = "L1", action = "set" }', "action = 'set' changes a link"),
    ('{ at = "1s", node = "r1", action = "set", delay = "1ms" }', "action = 'set' changes"),
    ('{ at = "1s", link = "L1", action = "down", delay = "1ms" }',
     "delay goes with action = 'set'"),
    ('{ at = "1s", link = "L1", action = "down", when = 1 }', "unknown field 'when'"),
    ('"L1 down"', "event 1: must be a table"),
])
def test_malformed_events_are_one_line_errors(events, message):
    with pytest.raises(ExperimentError) as caught:
        plan(events)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_an_event_on_a_link_the_topology_lacks_is_refused_before_building():
    parsed = plan('{ at = "1s", link = "L9", action = "down" }')
    with pytest.raises(ExperimentError, match=r"link L9 down: the topology pair has no link "
                                              r"L9"):
        experiment.check_against(parsed, {"h1", "h2"}, {"h1-h2"})


def test_outage_is_the_silence_around_the_event():
    steady = [i * 0.01 for i in range(100)]  # replies every 10 ms for a second
    assert analysis.outage(steady, 0.5, 1.0, 0.01) == pytest.approx(0.0, abs=1e-9)
    gap = [t for t in steady if not 0.5 < t < 0.8]  # nothing from 0.5 to 0.8 s
    assert analysis.outage(gap, 0.52, 1.0, 0.01) == pytest.approx(0.29)
    assert analysis.outage([t for t in steady if t < 0.5], 0.5, 1.0, 0.01) is None
    assert analysis.convergence([0.2, 0.55, 0.7, 1.5], 0.5, 1.0) == pytest.approx(0.2)
    assert analysis.convergence([0.2], 0.5, 1.0) is None


def test_throughput_dip_and_recovery_to_a_new_level():
    """From 50 to nothing for 0.3 s, then 20 (a slower path): a full dip, back when the
    rate first reaches 90 % of the new level."""
    intervals = [(i / 10, (i + 1) / 10, 50e6) for i in range(10, 50)]
    intervals += [(5.0, 5.1, 0.0), (5.1, 5.2, 0.0), (5.2, 5.3, 0.0), (5.3, 5.4, 10e6)]
    intervals += [(i / 10, (i + 1) / 10, 20e6) for i in range(54, 100)]
    dip, recovery = analysis.throughput_dip(intervals, 5.0, 10.0)
    assert dip == pytest.approx(1.0) and recovery == pytest.approx(0.5)
    assert analysis.throughput_dip(intervals, 0.5, 10.0) == (None, None)  # nothing before


@pytest.mark.timing
@needs_lab[0]
@needs_lab[1]
def test_events_happen_on_time_and_their_effects_are_measured(tmp_path: Path):
    """On a pair: the delay goes from 5 to 25 ms at 1.5 s, the link fails at 3 s and returns
    at 4 s. Every event is made within 100 ms of its time; the probe sees the delay, the
    outage lasts the second the link was down, and the lab is as built afterwards."""
    plan_file = tmp_path / "evented.toml"
    plan_file.write_text(STEP.format(events='{ at = "1.5s", link = "h1-h2", action = "set", '
                                            'delay = "25ms" }, { at = "3s", link = "h1-h2", '
                                            'action = "down" }, { at = "4s", link = "h1-h2", '
                                            'action = "up" }'))
    done = lab("run", str(plan_file), "--results", str(tmp_path / "runs"), timeout=180)
    assert "at 3 s: link h1-h2 down: made at 3.0" in done.stdout, done.stdout
    (folder,) = (tmp_path / "runs").iterdir()
    step = json.loads((folder / "results.json").read_text())["steps"][0]
    events = step["events"]
    assert [e["description"] for e in events] == [
        "at 1.5 s: link h1-h2 set delay 25ms", "at 3 s: link h1-h2 down",
        "at 4 s: link h1-h2 up"]
    for event in events:
        assert event["error"] is None
        assert abs(event["applied"] - event["at"]) < 0.1, event
    assert all(f["base_rtt_ms"] == pytest.approx(50.0) for f in events[0]["flows"])  # 2 x 25
    down, up = events[1]["flows"], events[2]["flows"]
    assert {f["label"] for f in down} == {"tcp", "udp"}
    assert all(f["outage"] is None for f in down)  # nothing came back before the link did
    assert all(0.9 < f["outage"] < 1.3 for f in up), up  # the second it was down
    assert all(f["dip"] is not None and f["dip"] > 0.9 for f in down), down
    tcp = next(f for f in step["flows"] if f["label"] == "tcp")
    assert len(tcp["intervals"]) >= 50  # 0.1 s samples while events happen
    assert (folder / "events.csv").read_text().count("\n") == 7  # a header, 3 x 2 flows
    assert "DOWN" not in lab("status", check=False).stdout


def test_a_quick_run_keeps_the_events_in_their_place():
    from simpleperf.lab.run.runner import _quick_step

    failover = experiment.load("failover")
    step = failover.steps[0]
    assert [e.at for e in _quick_step(step, failover, quick=False).events] == [8.0, 16.0]
    assert [e.at for e in _quick_step(step, failover, quick=True).events] == [1.667, 3.333]


def test_a_quick_run_moves_that_share_of_each_fixed_size_transfer():
    from simpleperf.lab.run.runner import _quick_step

    plan = experiment.load("scp-loss-sweep")  # 100 MB in 10 s steps, 4 s quick
    scp, tcp = plan.steps
    assert _quick_step(scp, plan, quick=False) == scp
    (quick_scp,) = _quick_step(scp, plan, quick=True).flows
    assert quick_scp.size == 40_000_000 and scp.flows[0].size == 100_000_000
    assert _quick_step(tcp, plan, quick=True).flows == tcp.flows  # timed: its duration is
