"""The lab's rpm flows: responsiveness (draft-ietf-ippm-responsiveness) measured across a
lab path by simpleperf's client or mach, beside what theory says each queue discipline
makes of it; the `responsiveness` experiment run for real, its disciplines in theory's
order."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from lab_helpers import assert_gone, lab

from simpleperf.lab.model import experiment, theory, topology
from simpleperf.lab.model.experiment import ExperimentError
from simpleperf.lab.model.flows import Timing
from simpleperf.lab.model.outcomes import FlowOutcome
from simpleperf.lab.model.responsiveness import predict_rpm
from simpleperf.lab.model.topology import Shaping
from simpleperf.lab.model.verdicts import ORDER_MARGIN, case_verdicts, rpm_order_verdicts
from simpleperf.lab.results.store import load_run
from simpleperf.lab.results.tables import rpm_lines, sweep_report
from simpleperf.lab.run import kinds
from simpleperf.stats import rpm

PLAN = """
name = "one"
description = "d"
topology = "pair"
[pair]
rate = "100M"
delay = "20ms"
queue = 1000
[cases]
1 = "c"
[[steps]]
case = "1"
name = "one"
flows = [{ kind = "rpm", from = "h1", to = "h2" }]
"""


def link(qdisc: str, **given) -> list[tuple[Shaping, float]]:
    shaping = Shaping(rate=100e6, delay=0.02, queue=1000, qdisc=qdisc, **given)
    return [(shaping, 1000 * 1514 * 8 / 100e6)]


def test_theory_puts_each_discipline_s_queue_in_the_probes_round_trips():
    """60000 over the mean of a foreign and a self probe's round trip: base RTT 40 ms;
    drop-tail's full 121 ms for both; an AQM's target for both; flow queueing's none for a
    new connection and its target for the loaded one; 5 ms of the sender's unsent."""
    full = 1000 * 1514 * 8 / 100e6 * 1e3
    droptail = predict_rpm(40.0, link("droptail"))
    assert droptail is not None
    assert droptail.foreign_ms == pytest.approx(40 + full)
    assert droptail.loaded_ms == pytest.approx(40 + full + 5)
    assert droptail.rpm == pytest.approx(rpm(40 + full + 2.5)) == droptail.low
    assert droptail.high == rpm(40.0) == 1500
    expected = {"codel": (45, 50), "pie": (55, 60), "dualpi2": (55, 60),
                "fq_codel": (40, 50), "cake": (40, 50), "fq_pie": (40, 60)}
    for qdisc, (foreign, loaded) in expected.items():
        found = predict_rpm(40.0, link(qdisc))
        assert found is not None and (found.foreign_ms, found.loaded_ms) == pytest.approx(
            (foreign, loaded)), qdisc
        assert found.rpm == pytest.approx(60000 / ((foreign + loaded) / 2)), qdisc
    # a link's own target replaces the discipline's; a queue shorter than the target
    # holds what it can
    assert predict_rpm(40.0, link("codel", target=0.010)).foreign_ms == pytest.approx(50)
    short = [(Shaping(rate=100e6, queue=10, qdisc="pie"), 10 * 1514 * 8 / 100e6)]
    assert predict_rpm(40.0, short).foreign_ms == pytest.approx(40 + 10 * 1514 * 8 / 1e5)
    # a queue whose limit is not known could hold anything: no theory
    assert predict_rpm(40.0, [(Shaping(rate=100e6), None)]) is None


def test_an_rpm_flow_takes_its_meter_server_and_direction_and_refuses_the_rest():
    plan = experiment.parse(PLAN.replace('to = "h2" }', 'to = "h2", meter = "mach", '
                                         'tool = "nginx", direction = "upload" }'))
    (flow,) = plan.steps[0].flows
    assert (flow.meter, flow.tool, flow.direction) == ("mach", "nginx", "upload")
    (default,) = experiment.parse(PLAN).steps[0].flows
    assert (default.meter, default.tool, default.direction) == (
        "simpleperf", "simpleperf", "download")
    for change, message in (
            ('meter = "iperf"', "meter must be one of simpleperf, native, mach"),
            ('tool = "iperf3"', "tool must be one of simpleperf, nginx"),
            ('direction = "sideways"', "direction must be one of download, upload"),
            ('tool = "nginx", meter = "native"', 'meter = "native" needs a simpleperf server'),
            ('parallel = 2', "parallel only applies to tcp flows")):
        with pytest.raises(ExperimentError, match=message):
            experiment.parse(PLAN.replace('to = "h2" }', f'to = "h2", {change} }}'))


def test_each_meter_is_its_own_command_and_the_server_runs_the_flows_congestion():
    plan = experiment.parse(PLAN.replace('topology = "pair"',
                                         'topology = "pair"\ncongestion = "cubic"', 1)
                            .replace('flows = [{ kind = "rpm", from = "h1", to = "h2" }]',
                                     'flows = [{ kind = "rpm", from = "h1", to = "h2" }, '
                                     '{ kind = "rpm", from = "h1", to = "h2", meter = "native", '
                                     'direction = "upload" }, { kind = "rpm", from = "h1", '
                                     'to = "h2", meter = "mach" }]'))
    ours, native, by_mach = plan.steps[0].flows
    runner = kinds.RpmRunner(None)
    assert ours.congestion == "cubic"  # the experiment's, pinned
    assert runner.server(ours, "10.0.0.2", "5201")[-4:] == ["-p", "5201", "-C", "cubic"]
    command = runner.client(FlowOutcome(ours, "10.0.0.2"), "5201", 1.0, 10.0, Timing())
    assert command[3:] == ["-c", "https://10.0.0.2:5201/.well-known/nq", "--insecure",
                           "--rpm", "-J", "-t", "10", "-R", "-C", "cubic"]
    command = runner.client(FlowOutcome(native, "10.0.0.2"), "5201", 1.0, 10.0, Timing())
    assert command[3:8] == ["-c", "10.0.0.2", "-p", "5201", "--rpm"] and "-R" not in command
    command = runner.client(FlowOutcome(by_mach, "10.0.0.2"), "5201", 1.0, 10.0, Timing())
    assert command[1:] == ["rpm", "--config", "https://10.0.0.2:5201/.well-known/nq",
                           "--insecure", "--disable-aim-scores", "--test-duration", "10000"]


def test_an_rpm_flow_s_theory_follows_the_way_its_load_runs():
    """A download's load runs `to` (h2) to `from` (h1): theory reads that direction's
    queue, here drop-tail, where h1's way out runs CoDel."""
    model = topology.pair(rate="100M", delay="20ms", queue=1000,
                          a_to_b={"qdisc": "codel"}, b_to_a={"qdisc": "droptail"})
    full = 1000 * 1514 * 8 / 100e6 * 1e3
    for direction, foreign in (("download", 40.0 + full), ("upload", 45.0)):
        (flow,) = experiment.parse(PLAN.replace(
            'to = "h2" }', f'to = "h2", direction = "{direction}" }}')).steps[0].flows
        outcome = FlowOutcome(flow, str(model.address_of(flow.target)))
        theory.predict(model, [outcome], "cubic")
        assert outcome.base_rtt == pytest.approx(40.0)
        assert outcome.rpm_theory is not None, direction
        assert outcome.rpm_theory.high == pytest.approx(rpm(40.0))
        assert outcome.rpm_theory.foreign_ms == pytest.approx(foreign), direction


def _step(value: str, measured: float, theory_rpm: float, label: str = "simpleperf") -> dict:
    return {"case": "1", "name": "s", "sweep_parameter": "qdisc", "sweep_value": value,
            "interrupted": 0, "events": [], "fairness": None, "start_spread_ms": None,
            "flows": [{"kind": "rpm", "label": label, "ok": True, "error": None,
                       "rpm": measured, "rpm_theory": theory_rpm, "rpm_low": 300.0,
                       "rpm_high": 1500.0, "parameters": {"meter": "simpleperf",
                                                          "direction": "download"},
                       "rpm_detail": {"meter": "simpleperf", "foreign_ms": 50.0,
                                      "loaded_ms": 60.0, "theory_foreign_ms": 45.0,
                                      "theory_loaded_ms": 50.0},
                       "intervals": [], "connections": [], "rtts": [], "rtt_avg": None,
                       "base_rtt_ms": 40.0, "full_queue_rtt_ms": 161.0,
                       "throughput": 9e7, "predicted": 9.5e7}]}


def test_the_sweep_is_judged_on_theory_s_order_where_theory_sets_points_apart():
    steps = [_step("droptail", 400, 367), _step("codel", 1100, 1263),
             _step("pie", 1150, 1043), _step("fq_codel", 1200, 1333)]
    (verdict,) = rpm_order_verdicts(steps)
    # judged: droptail against each (3), fq_codel against pie (1.28 x); codel-pie (1.21 x)
    # and codel-fq_codel (1.06 x) are nearer than ORDER_MARGIN: not judged, whatever order
    assert ORDER_MARGIN == 1.25
    assert verdict.within and verdict.detail == "4 of 4 pairs in theory's order"
    steps[0] = _step("droptail", 1300, 367)  # drop-tail measured above fq_codel: out
    (verdict,) = rpm_order_verdicts(steps)
    assert not verdict.within and verdict.detail.startswith("1 of 4 pairs in theory's order")
    assert "droptail 1300 vs codel 1100 RPM (theory 367 vs 1263)" in verdict.detail
    (case,) = case_verdicts(steps)
    assert case.judged == 1 and [v.label for v in case.outside] == ["simpleperf rpm order"]


def test_the_report_puts_theory_beside_each_rpm_and_its_round_trips():
    step = _step("codel", 1100, 1263)
    (line,) = rpm_lines(step["flows"][0])
    assert line == ("simpleperf: 1100 RPM (simpleperf against simpleperf, download; foreign "
                    "50.0 ms, loaded 60.0 ms); theory 1263 RPM (foreign 45.0 ms, loaded 50.0 "
                    "ms; 300 with every queue full, 1500 with none)")
    table = sweep_report({"steps": [step]})
    assert "  codel  simpleperf  1100  1263    50.0 / 60.0          45.0 / 50.0" in table


@pytest.mark.slow
@pytest.mark.lab
@pytest.mark.root
def test_the_responsiveness_experiment_orders_drop_tail_below_flow_queueing(tmp_path):
    """Its quick run cut to drop-tail and fq_codel, both meters: the two in theory's order
    (the report's verdict), by simpleperf's client and by mach."""
    source = Path(experiment.__file__).parent.parent / "data" / "experiments"
    text = (source / "responsiveness.toml").read_text().replace(
        'values = ["droptail", "codel", "pie", "fq_codel", "cake", "dualpi2"]',
        'values = ["droptail", "fq_codel"]')
    assert 'values = ["droptail", "fq_codel"]' in text
    plan = tmp_path / "responsiveness.toml"
    plan.write_text(text)
    done = lab("run", str(plan), "--quick", "--results", str(tmp_path), timeout=600)
    (folder,) = tmp_path.glob("responsiveness-*")
    run = load_run(folder)
    orders = rpm_order_verdicts(run["steps"])
    assert [v.label for v in orders] == ["simpleperf rpm order", "mach rpm order"]
    assert all(v.within for v in orders), (orders, done.stdout[-3000:])
    db = sqlite3.connect(folder / "results.sqlite")
    found = {(value, label): (measured, predicted) for value, label, measured, predicted in
             db.execute("SELECT s.sweep_value, f.label, f.rpm, f.rpm_theory FROM flow f "
                        "JOIN step s ON s.id = f.step_id")}
    assert set(found) == {(q, m) for q in ("droptail", "fq_codel")
                          for m in ("simpleperf", "mach")}, found
    for meter in ("simpleperf", "mach"):
        low, high = found[("droptail", meter)], found[("fq_codel", meter)]
        assert high[1] > ORDER_MARGIN * low[1]  # theory sets them apart: the pair is judged
    assert_gone({"h1", "h2", "pair-wire"})
