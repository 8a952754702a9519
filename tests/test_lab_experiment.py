"""Experiment files and the predictions a run puts beside its measurements (no root)."""

from __future__ import annotations

import dataclasses
import re

import pytest
import tomli_w
from hypothesis import given, settings
from hypothesis import strategies as st

from simpleperf.lab.model import experiment, theory, topology
from simpleperf.lab.model.experiment import ExperimentError
from simpleperf.lab.model.flows import Timing
from simpleperf.lab.model.outcomes import FlowOutcome, StepOutcome
from simpleperf.lab.results.tables import case_report


@pytest.fixture(scope="module")
def portfolio():
    return experiment.load("portfolio")


def pairs(step):
    return [(flow.kind, flow.source, flow.target) for flow in step.flows]


def test_portfolio_runs_the_five_cases_as_specified(portfolio):
    assert portfolio.topology == "portfolio"
    assert (portfolio.timing.duration, portfolio.timing.ping_count) == (25.0, 25)
    by_case: dict[str, list] = {}
    for step in portfolio.steps:
        by_case.setdefault(step.case, []).append(step)
    assert sorted(by_case) == ["1", "2", "3", "4", "5"]
    assert [pairs(s) for s in by_case["1"]] == [[("udp", "h1", "h4")], [("udp", "h1", "h9")],
                                                [("udp", "h7", "h9")]]
    case2 = [pairs(s)[0] for s in by_case["2"]]
    assert case2 == [("ping", "r1", "r2"), ("tcp", "r1", "r2"), ("ping", "r2", "r3"),
                     ("tcp", "r2", "r3"), ("ping", "r3", "r4"), ("tcp", "r3", "r4")]
    assert [s.flows[0].address for s in by_case["2"]] == ["10.0.1.2", "10.0.1.2", "10.0.3.2",
                                                          "10.0.3.2", "10.0.6.2", "10.0.6.2"]
    case3 = {pairs(s)[0] for s in by_case["3"]}
    assert case3 == {(k, a, b) for k in ("ping", "tcp")
                     for a, b in (("h1", "h4"), ("h7", "h9"), ("h1", "h9"))}
    assert [[(f.source, f.target) for f in s.flows] for s in by_case["4"]] == [
        [("h1", "h4"), ("h2", "h5")], [("h1", "h4"), ("h2", "h5"), ("h3", "h6")],
        [("h1", "h4"), ("h7", "h9")], [("h1", "h4"), ("h8", "h9")]]
    assert all(f.rtt_under_load for s in by_case["4"] for f in s.flows)
    (case5,) = by_case["5"]
    assert [(f.source, f.target, f.parallel) for f in case5.flows] == [
        ("h1", "h4", 2), ("h2", "h5", 1), ("h3", "h6", 1)]
    experiment.check_against(portfolio, set(topology.load("portfolio").nodes))


BASE = """
topology = "portfolio"
[[steps]]
name = "one"
flows = [{ kind = "tcp", from = "h1", to = "h4" }]
"""


@pytest.mark.parametrize("change,message", [
    (('kind = "tcp"', 'kind = "sctp"'), "step 1 (one) flow 1: kind must be one of"),
    (('from = "h1", ', ''), "step 1 (one) flow 1: 'from' must name a node"),
    (('to = "h4"', 'to = "h4", rate = "10M"'), "rate only applies to udp flows"),
    (('kind = "tcp", from', 'kind = "udp", parallel = 2, from'), "parallel only applies to tcp"),
    (('to = "h4"', 'to = "h4", duration = "soon"'), "duration = 'soon' is not a time"),
    (('to = "h4"', 'to = "h4", parallel = 129'), "parallel must be a whole number from 1 to 128"),
    (('to = "h4"', 'to = "h4", speed = 1'), "unknown field 'speed'"),
    (('to = "h4"', 'to = "h4", l4s = true'), "l4s only applies to udp flows"),
    (('kind = "tcp", from', 'kind = "udp", l4s = "yes", from'), "flow 1: l4s is true or false"),
    (('kind = "tcp", from', 'kind = "udp", l4s = true, rate = "auto", from'),
     "an l4s flow sets its own rate from CE marks: its rate can only be a ceiling"),
    (('kind = "tcp", from', 'kind = "udp", l4s = true, frames = "30:2M", from'),
     "an l4s flow sets its own rate: leave out frames"),
    (('to = "h4"', 'to = "h4", tool = "iperf4"'),
     "flow 1: tool must be one of simpleperf, iperf3, iperf2, not 'iperf4'"),
    (('kind = "tcp", from', 'kind = "udp", frames = "30:2M", tool = "iperf2", from'),
     "flow 1: frames needs a simpleperf server, not tool = 'iperf2'"),
    (('kind = "tcp", from', 'kind = "udp", rate = "probe", tool = "iperf3", from'),
     "flow 1: rate = \"probe\" needs a simpleperf server, not tool = 'iperf3'"),
    (('kind = "tcp", from', 'kind = "ping", tool = "iperf2", from'),
     "tool only applies to tcp, udp and rpm flows"),
    (('name = "one"', 'name = "one"\nrepeat = 0'), "repeat must be a whole number from 1"),
    (('topology = "portfolio"', ''), "topology must name a topology"),
    (('flows = [{ kind = "tcp", from = "h1", to = "h4" }]', 'flows = []'),
     "flows must be a non-empty list"),
])
def test_malformed_experiments_name_the_step_and_field(change, message):
    text = BASE.replace(*change, 1)
    assert text != BASE
    with pytest.raises(ExperimentError, match=message.replace("(", r"\(").replace(")", r"\)")):
        experiment.parse(text)


def test_a_flows_tool_picks_its_server_and_the_clients_flag():
    from simpleperf.lab.run import kinds

    plan = experiment.parse(BASE.replace('to = "h4" }', 'to = "h4", tool = "iperf2" }, '
                                         '{ kind = "udp", from = "h1", to = "h4", '
                                         'tool = "iperf2", rate = "5M" }, '
                                         '{ kind = "tcp", from = "h1", to = "h4", '
                                         'tool = "iperf3", window = "64K" }'))
    tcp2, udp2, tcp3 = plan.steps[0].flows
    runner, udp = kinds.TcpRunner(), kinds.UdpRunner()
    assert runner.server(tcp2, "10.0.1.2", "5201") == ["iperf", "-s", "-p", "5201"]
    assert udp.server(udp2, "10.0.1.2", "5202") == ["iperf", "-s", "-p", "5202", "-u"]
    assert runner.server(tcp3, "10.0.1.2", "5203") == ["iperf3", "-s", "-p", "5203", "-w",
                                                        "64000"]
    outcome = FlowOutcome(tcp2, "10.0.1.2")
    command = runner.client(outcome, "5201", 1.0, 3.0, Timing())
    assert "--iperf2" in command and "--native" not in command
    assert "--trip-times" not in command  # iperf2 times UDP datagrams only
    assert "--trip-times" in udp.client(FlowOutcome(udp2, "10.0.1.2"), "5202", 1.0, 3.0,
                                        Timing())


def test_an_l4s_flow_asks_the_tool_for_its_scalable_response_with_a_rate_as_ceiling():
    """`l4s = true`: --l4s, no rate of its own (no "auto"), a rate given is the ceiling;
    theory takes it as elastic (it backs off), not as a paced flow that takes what it
    sends."""
    from simpleperf.lab.run import kinds

    plan = experiment.parse(BASE.replace('kind = "tcp", from = "h1", to = "h4" }',
                                         'kind = "udp", from = "h1", to = "h4", l4s = true }, '
                                         '{ kind = "udp", from = "h1", to = "h4", l4s = true, '
                                         'rate = "5M" }'))
    free, capped = plan.steps[0].flows
    assert free.l4s and free.rate is None and capped.rate == 5e6
    model = topology.load("portfolio")
    outcomes = [FlowOutcome(f, str(model.address_of(f.target))) for f in (free, capped)]
    theory.predict(model, outcomes, "cubic")
    runner = kinds.UdpRunner()
    assert runner.arguments(outcomes[0]) == ["-u", "--l4s", "-l", "1470"]
    assert runner.arguments(outcomes[1]) == ["-u", "--l4s", "-b", "5000000", "-l", "1470"]
    # the capped one takes its 5 Mbit/s, the other what is left of the 30 Mbit/s bottleneck
    # (r1-r2) in goodput of 1470-byte datagrams
    free_share, capped_share = (o.predicted / 1e6 for o in outcomes)
    assert capped_share == pytest.approx(5.0)
    assert free_share + capped_share == pytest.approx(30 * 1470 / 1512)


def test_unknown_node_is_caught_before_the_lab_is_built():
    plan = experiment.parse(BASE.replace('to = "h4"', 'to = "h44"'))
    with pytest.raises(ExperimentError, match="node h44 is not in topology portfolio"):
        experiment.check_against(plan, set(topology.load("portfolio").nodes))


def predicted(step_index: int) -> list[float]:
    plan = experiment.load("portfolio")
    model = topology.load("portfolio")
    step = plan.steps[step_index]
    outcomes = [FlowOutcome(f, f.address or str(model.address_of(f.target))) for f in step.flows]
    theory.predict(model, outcomes, "cubic")
    return [round(o.predicted / 1e6, 2) for o in outcomes]


def test_predictions_use_water_filling_over_every_shared_link():
    goodput = 1448 / 1514
    steps = {s.name: i for i, s in enumerate(experiment.load("portfolio").steps)}
    assert predicted(steps["4c h1-h4 + h7-h9"]) == [round(15 * goodput, 2)] * 2
    assert predicted(steps["4d h1-h4 + h8-h9"]) == [round(30 * goodput, 2),
                                                    round(20 * goodput, 2)]
    assert predicted(steps["h1-h4 -P 2, h2-h5, h3-h6"]) == [round(15 * goodput, 2),
                                                            round(7.5 * goodput, 2),
                                                            round(7.5 * goodput, 2)]
    # A probed UDP rate can reach the whole bottleneck: goodput of 1470-byte datagrams.
    assert predicted(steps["UDP h1-h9"]) == [round(20 * 1470 / 1512, 2)]


def test_an_auto_udp_rate_is_90_percent_of_the_bottleneck():
    plan = experiment.load("portfolio")
    model = topology.load("portfolio")
    step = next(s for s in plan.steps if s.name == "UDP h1-h9")
    flow = dataclasses.replace(step.flows[0], rate="auto")
    outcome = FlowOutcome(flow, str(model.address_of(flow.target)))
    theory.predict(model, [outcome], "cubic")
    assert round(outcome.rate / 1e6, 2) == round(0.9 * 20 * 1470 / 1512, 2)
    assert round(outcome.predicted / 1e6, 2) == round(0.9 * 20 * 1470 / 1512, 2)


def test_fairness_of_a_step_is_over_its_tcp_connections():
    plan = experiment.load("portfolio")
    step = plan.steps[-1]
    flows = [FlowOutcome(f, "x", ok=True, connection_throughputs=rates)
             for f, rates in zip(step.flows, [[5e6, 5e6], [10e6], [10e6]], strict=True)]
    assert StepOutcome(step, 1, flows).fairness == pytest.approx(30**2 / (4 * 250))


def test_case_report_puts_theory_beside_measurements():
    run = {"steps": [
        {"case": "2", "name": "L1 latency", "fairness": None, "start_spread_ms": None,
         "interrupted": 0, "flows": [
             {"kind": "ping", "label": "L1 r1-r2", "ok": 1, "rtt_avg": 20.31,
              "base_rtt_ms": 20.0, "error": None}]},
        {"case": "2", "name": "L1 throughput", "fairness": None, "start_spread_ms": 0.0,
         "interrupted": 0, "flows": [
             {"kind": "tcp", "label": "L1 r1-r2", "ok": 1, "throughput": 37.3e6,
              "predicted": 38.26e6, "base_rtt_ms": 20.0, "error": None}]},
        {"case": "4", "name": "4a", "fairness": 0.988, "start_spread_ms": 4.2,
         "interrupted": 0, "flows": [
             {"kind": "tcp", "label": "h1-h4", "ok": 1, "error": None, "rtt_avg": 98.5,
              "base_rtt_ms": 60.0, "full_queue_rtt_ms": 120.7, "throughput": 13.68e6,
              "predicted": 14.35e6, "connections": [13.68e6]},
             {"kind": "tcp", "label": "h2-h5", "ok": 0, "error": "connection refused",
              "base_rtt_ms": 60.0}]}]}
    text = case_report(run, {"2": "Link latency and throughput"})
    assert "Test case 2: Link latency and throughput" in text
    assert re.search(r"L1 r1-r2\s+20\.3\s+20\.0\s+37\.30\s+38\.26\s+0\.97", text)
    assert "FAILED: connection refused" in text
    assert re.search(r"h1-h4\s+98\.5\s+60\.0 \.\. 120\.7\s+13\.68\s+14\.35\s+0\.95", text)
    assert "Jain's fairness index 0.988" in text and "start spread 4.2 ms" in text


SWEEP = """
topology = "pair"
[pair]
rate = "50M"
[sweep]
parameter = "delay"
values = ["5ms", "10ms"]
repeat = 2
[[steps]]
flows = [{ kind = "tcp", from = "h1", to = "h2", window = "64K" }]
"""


def test_sweeps_are_validated_for_every_value():
    plan = experiment.parse(SWEEP)
    assert plan.sweep.of_link and plan.sweep.values == ("5ms", "10ms")
    assert experiment.link_parameters(plan, "10ms") == {"rate": "50M", "delay": "10ms"}
    assert plan.steps[0].flows[0].window == 64_000
    for change, message in [
        (('values = ["5ms", "10ms"]', 'values = ["5ms", "soon"]'), "delay = 'soon'"),
        (('parameter = "delay"', 'parameter = "colour"'), "parameter must be one of"),
        (('topology = "pair"\n[pair]\nrate = "50M"', 'topology = "portfolio"'),
         "can be swept on topology"),
        (('parameter = "delay"\nvalues = ["5ms", "10ms"]',
          'parameter = "window"\nvalues = ["1"]'), "window = '1' is out of range"),
        (('rate = "50M"', 'rate = "fast"'), "pair: bw = 'fast' is not a rate"),
        (('window = "64K"', 'window = "big"'), "window = 'big' is not a size"),
        (('values = ["5ms", "10ms"]', f'values = {[f"{n}ms" for n in range(1, 10_001)]}'),
         "10000 values, at most 100"),
    ]:
        with pytest.raises(ExperimentError, match=message):
            experiment.parse(SWEEP.replace(*change, 1))


def test_every_shipped_experiment_loads():
    shipped = sorted(p.stem for p in experiment.DATA_DIR.glob("*.toml"))
    assert {"portfolio", "delay-sweep", "loss-sweep", "window-sweep", "length-sweep",
            "parallel", "tcp-udp", "profiles"} <= set(shipped)
    for name in shipped:
        plan = experiment.load(name)
        assert plan.steps and plan.quick.duration <= 5


def test_flow_sweep_points_change_only_tcp_flows():
    from simpleperf.lab.run.runner import _at_point

    plan = experiment.parse(SWEEP.replace('parameter = "delay"\nvalues = ["5ms", "10ms"]',
                                          'parameter = "parallel"\nvalues = ["1", "3"]'))
    step = _at_point(plan.steps[0], plan, "3")
    assert step.flows[0].parallel == 3 and step.name.endswith("[parallel=3]")


def test_sweep_summary_is_mean_and_confidence_beside_the_bounds():
    from simpleperf.lab.results.tables import sweep_points

    def step(value, rate):
        return {"sweep_value": value, "sweep_parameter": "delay", "flows": [
            {"kind": "tcp", "ok": 1, "throughput": rate, "rtt_avg": None, "predicted": 25.6e6,
             "window_bound": 25.6e6, "mathis_bound": None}]}

    (point,) = sweep_points({"steps": [step("10ms", 24e6), step("10ms", 26e6),
                                       step("10ms", 25e6)]})
    assert point["mean"] == pytest.approx(25e6)
    assert point["ci95"] == pytest.approx(4.303 * 1e6 / 3 ** 0.5, rel=1e-3)
    assert point["window_bound"] == 25.6e6 and point["mathis_bound"] is None


_hostile = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1),
                     st.floats(allow_nan=True), st.text(max_size=20), st.just("x" * 5000),
                     st.text(alphabet=st.characters(max_codepoint=31), max_size=4),
                     st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3),
                                                                          st.integers()))


@settings(max_examples=500, deadline=None)
@given(place=st.sampled_from(["experiment", "timing", "step", "flow"]),
       key=st.sampled_from(["name", "description", "topology", "duration", "ping_count",
                            "case", "repeat", "flows", "kind", "from", "to", "parallel", "rate",
                            "length", "window", "congestion", "label", "address", "zzz"]),
       value=_hostile)
def test_any_mutated_experiment_is_an_experiment_or_one_line(place, key, value):
    data = {"name": "fz", "topology": "portfolio", "timing": {"duration": "1s"},
            "steps": [{"name": "s", "flows": [{"kind": "tcp", "from": "h1", "to": "h4"}]}]}
    target = {"experiment": data, "timing": data["timing"], "step": data["steps"][0],
              "flow": data["steps"][0]["flows"][0]}[place]
    target[key] = value
    try:
        plan = experiment.parse(_toml(data))
    except ExperimentError as error:
        assert "\n" not in str(error) and len(str(error)) < 400
        return
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,39}", plan.name)
    for step in plan.steps:
        assert "\n" not in step.name and all(1 <= f.parallel <= 128 for f in step.flows)


def _toml(data) -> str:
    return tomli_w.dumps(_clean(data))


def _clean(value):
    """TOML has no null: a None becomes an empty string, as a user might write."""
    if value is None:
        return ""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def test_each_kind_is_one_object_that_takes_its_own_fields_and_runs() -> None:
    """Every kind of flows.KINDS has a runner (its server, client and reading) and takes only
    its own fields; another kind's field is refused naming the kinds that take it."""
    from simpleperf.lab.model import flows
    from simpleperf.lab.model.outcomes import FlowOutcome
    from simpleperf.lab.run import kinds

    runners = kinds.runners(None)
    assert set(runners) == set(flows.KINDS)
    assert set(flows.FIELDS) == set(flows.FLOW_FIELDS) - flows.COMMON_FIELDS
    for kind in flows.KINDS.values():
        for name in sorted(set(flows.FIELDS) - kind.fields):
            takers = [k.name for k in flows.KINDS.values() if name in k.fields]
            text = BASE.replace('kind = "tcp"', f'kind = "{kind.name}", {name} = 1')
            named = (f"{', '.join(takers[:-1])} and {takers[-1]}" if len(takers) > 1
                     else takers[0])
            with pytest.raises(ExperimentError, match=f"{name} only applies to {named} flows"):
                experiment.parse(text)
    timing = experiment.Timing()
    marked = {"tcp": "--dscp", "udp": "--dscp", "ping": "-Q"}
    for name, option in marked.items():
        text = BASE.replace('kind = "tcp"', f'kind = "{name}", dscp = "AF41"')
        (flow,) = experiment.parse(text).steps[0].flows
        assert flow.dscp == 34
        command = runners[name].client(FlowOutcome(flow, "10.0.5.2"), "15001", 1.0, 5.0,
                                       timing)
        value = command[command.index(option) + 1]
        assert value == ("34" if option == "--dscp" else str(34 << 2))
    for bad in ("XX", 64, -1, True):
        with pytest.raises(ExperimentError, match="dscp must be 0..63 or a name"):
            experiment.parse(BASE.replace('kind = "tcp"', f'kind = "tcp", dscp = {bad!r}'
                                          .replace("'", '"').replace("True", "true")))


def test_a_server_is_ready_once_its_socket_is_bound_in_its_namespace():
    """The lab starts a flow's clients once each server's socket is bound (a simpleperf
    server's banner waits in its pipe, and a loaded machine takes seconds to start one):
    a client before that is refused, and its flow fails."""
    import os
    import socket
    import subprocess
    import sys

    from simpleperf.lab.run import kinds
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    assert not kinds.bound(os.getpid(), port)  # bound, not listening: not ready
    listener.listen(1)
    assert kinds.bound(os.getpid(), port)
    datagrams = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    datagrams.bind(("::1", 0))
    assert kinds.bound(os.getpid(), datagrams.getsockname()[1])
    listener.close()
    datagrams.close()
    assert not kinds.bound(os.getpid(), port)
    # a server that binds late is waited for; one that ends is not ready
    late = subprocess.Popen([sys.executable, "-c", "import socket, time; time.sleep(0.5); "
                             f"s = socket.socket(); s.bind(('127.0.0.1', {port})); "
                             "s.listen(1); time.sleep(5)"])
    try:
        assert kinds.TcpRunner().ready(late, 10.0, str(port))
        assert kinds.bound(late.pid, port)
    finally:
        late.kill()
        late.wait()
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    assert not kinds.TcpRunner().ready(ended, 10.0, str(port))
