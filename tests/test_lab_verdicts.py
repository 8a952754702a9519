"""What theory can promise of TCP flows at a given duration, and the verdicts built on it:
congestion epochs, fair-share tolerances, start-up, path delays (pure functions, no root)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simpleperf.lab.model import experiment, theory, topology, verdicts
from simpleperf.lab.model.experiment import ExperimentError
from simpleperf.lab.model.outcomes import FlowOutcome
from simpleperf.lab.net import system


def _step_outcomes(name: str, congestion: str, seconds: float) -> list[FlowOutcome]:
    plan = experiment.load("portfolio")
    model = topology.load("portfolio")
    step = next(s for s in plan.steps if s.name == name)
    outcomes = [FlowOutcome(replace(f, congestion=congestion),
                            f.address or str(model.address_of(f.target))) for f in step.flows]
    theory.predict(model, outcomes, congestion, [seconds] * len(outcomes))
    return outcomes


def test_the_shipped_experiments_pin_cubic_where_their_theory_assumes_it():
    for name in ("portfolio", "parallel", "window-sweep", "thesis-tcp"):
        plan = experiment.load(name)
        assert plan.congestion == "cubic", name
        assert {f.congestion for s in plan.steps for f in s.flows if f.kind == "tcp"} == {
            "cubic"}, name
        assert plan.congestion_controls() == {"cubic"}


def test_an_experiments_congestion_is_each_tcp_flows_unless_it_names_its_own():
    text = """topology = "portfolio"
congestion = "reno"
[[steps]]
flows = [{ kind = "tcp", from = "h1", to = "h4" },
         { kind = "tcp", from = "h2", to = "h5", congestion = "bbr" },
         { kind = "ping", from = "h3", to = "h6" }]
"""
    plan = experiment.parse(text)
    assert [f.congestion for f in plan.steps[0].flows] == ["reno", "bbr", None]
    with pytest.raises(ExperimentError, match="congestion names the tcp flows"):
        experiment.parse(text.replace('"reno"', '"not a name!"'))


def test_a_congestion_control_the_kernel_lacks_is_one_line_naming_those_it_has():
    with pytest.raises(system.CommandError) as caught:
        system.require_congestion({"nosuchcc"})
    message = str(caught.value)
    assert "no TCP congestion control nosuchcc" in message
    assert all(name in message for name in ("cubic", "reno"))
    system.require_congestion({"cubic", "reno"})  # these it has: no error


def test_a_congestion_epoch_is_cubics_climb_back_or_its_reno_friendly_one():
    # CUBIC, 165 segments at 0.1 s: K = cbrt(165 x 0.3 / 0.4) = 4.98 s, sooner than the
    # TCP-friendly climb (0.3 x 165 / 0.529 round trips = 9.35 s)
    assert theory.congestion_epoch("cubic", 165, 0.1) == pytest.approx(4.98, abs=0.01)
    # Reno: half the window back at a segment a round trip
    assert theory.congestion_epoch("reno", 100, 0.05) == pytest.approx(2.5)
    assert theory.congestion_epoch("bbr", 100, 0.05) is None


@given(st.sampled_from(["cubic", "reno"]), st.floats(1.01, 1000))
def test_a_share_tolerance_shrinks_with_every_epoch_and_never_promises_more(algorithm, epochs):
    tolerance = theory.share_tolerance(algorithm, epochs)
    assert tolerance is not None and 0 < tolerance <= 1
    later = theory.share_tolerance(algorithm, epochs * 2)
    assert later is not None and later < tolerance
    beta = theory.AIMD[algorithm][0]
    assert tolerance == pytest.approx(min(1, (1 - beta ** epochs) / ((1 - beta) * epochs)))
    assert theory.share_tolerance(algorithm, 0.5) == 1.0
    assert theory.share_tolerance("bbr", epochs) is None


def test_flows_sharing_a_bottleneck_know_it_and_what_their_duration_promises():
    full = _step_outcomes("4b h1-h4 + h2-h5 + h3-h6", "cubic", 25.0)
    assert {o.bottleneck for o in full} == {"L2 a to b"}
    assert {o.congestion for o in full} == {"cubic"}  # what theory assumed, stored with it
    assert all(o.epochs is not None and 4 < o.epochs < 10 for o in full)
    assert all(o.share_tolerance is not None and 0.3 < o.share_tolerance < 0.7 for o in full)
    quick = _step_outcomes("4b h1-h4 + h2-h5 + h3-h6", "cubic", 5.0)
    assert all(q.share_tolerance > f.share_tolerance for q, f in zip(quick, full, strict=True))
    bbr = _step_outcomes("4b h1-h4 + h2-h5 + h3-h6", "bbr", 25.0)
    assert all(o.bottleneck == "L2 a to b" and o.share_tolerance is None for o in bbr)
    alone = _step_outcomes("4d h1-h4 + h8-h9", "cubic", 25.0)
    assert all(o.bottleneck is None and o.epoch_seconds for o in alone)


def _flow(label: str, throughput: float, predicted: float, **more) -> dict:
    base = {"label": label, "kind": "tcp", "ok": True, "error": None, "throughput": throughput,
            "predicted": predicted, "bottleneck": None, "share_tolerance": None,
            "epoch_seconds": None, "epochs": None, "congestion": "cubic", "intervals": [],
            "one_way_mean_ms": None, "base_one_way_ms": None, "base_rtt_ms": 60.0,
            "full_queue_rtt_ms": 120.0}
    return base | more


def _case(flows: list[dict]) -> verdicts.CaseVerdict:
    (verdict,) = verdicts.case_verdicts([{"case": "4", "name": "4b", "flows": flows,
                                          "events": []}])
    return verdict


def test_shares_are_judged_within_what_the_epochs_promise_and_the_total_as_one():
    """f = 0.1 left of the first gap after 30 epochs, and three spreads of the share over
    them, 3 x 0.45 / sqrt(30) = 0.25; three connections: from 1 - 0.1 - 0.25 = 0.65 to
    1 + 2 x 0.1 + 0.25 = 1.45."""
    shared = {"bottleneck": "L2 a to b", "share_tolerance": 0.1, "epochs": 30.0}
    within = _case([_flow("a", 13.3e6, 9.6e6, **shared), _flow("b", 6.5e6, 9.6e6, **shared),
                    _flow("c", 9e6, 9.6e6, **shared)])
    assert within.within and within.judged == 4  # three shares and their total
    assert any("30.0 congestion epochs" in note and "from 0.65 to 1.45" in note
               for note in within.notes)
    starved = _case([_flow("a", 13.3e6, 9.6e6, **shared), _flow("b", 5.5e6, 9.6e6, **shared),
                     _flow("c", 10e6, 9.6e6, **shared)])
    assert not starved.within and [v.label for v in starved.outside] == ["b tcp"]
    # k of N: a flow of two of four connections can at most take the link (2 x its share)
    spread = 3 * 0.45 / math.sqrt(30)
    two = {**shared, "parameters": {"parallel": 2}}
    assert verdicts.share_bounds(_flow("a", 0, 1, **two), 4) == pytest.approx(
        (0.9 - spread, 1.1 + spread))
    assert verdicts.share_bounds(_flow("b", 0, 1, **shared), 4) == pytest.approx(
        (0.9 - spread, 1.3 + spread))
    # a few epochs: the spread leaves theory no least share to promise, and the share is not
    # judged, only the total, saying why
    few = {**shared, "epochs": 4.0, "share_tolerance": 0.6}
    assert verdicts.share_bounds(_flow("b", 0, 1, **few), 3)[0] == 0.0
    early = _case([_flow("a", 18e6, 9.6e6, **few), _flow("b", 2e6, 9.6e6, **few),
                   _flow("c", 8.8e6, 9.6e6, **few)])
    assert early.within and early.judged == 1  # the total alone
    assert any("4.0 congestion epochs: too few" in note for note in early.notes)
    idle = _case([_flow("a", 7e6, 9.6e6, **shared), _flow("b", 7e6, 9.6e6, **shared),
                  _flow("c", 7e6, 9.6e6, **shared)])
    assert not idle.within and "total 0.73 x theory" in idle.outside[0].detail


def test_bbr_shares_are_not_judged_and_the_report_says_why():
    shared = {"bottleneck": "L2 a to b", "congestion": "bbr"}
    verdict = _case([_flow("a", 17e6, 9.6e6, **shared), _flow("b", 5e6, 9.6e6, **shared),
                     _flow("c", 6.5e6, 9.6e6, **shared)])
    assert verdict.within and verdict.judged == 1  # the total alone
    assert any("bbr is not AIMD" in note for note in verdict.notes)


def test_a_lone_flow_is_judged_after_its_start_up_or_not_at_all():
    climbing = [[0, 1, 9.8e6], [1, 2, 14.3e6], [2, 3, 18.9e6], [3, 4, 19.0e6], [4, 5, 19.1e6]]
    judged = _case([_flow("h1-h9", 16.2e6, 19.13e6, epoch_seconds=2.0, intervals=climbing)])
    assert judged.within and judged.judged == 1  # 19.0 after 2 s: 0.99 x
    assert verdicts.steady_goodput(climbing, 2.0) == pytest.approx(19.0e6)
    short = _case([_flow("h1-h9", 14.7e6, 19.13e6, epoch_seconds=5.0, intervals=climbing)])
    assert short.judged == 0 and "ended inside its start-up" in short.notes[0]
    low = _case([_flow("h1-h9", 12e6, 19.13e6, epoch_seconds=2.0,
                       intervals=[[0, 1, 9e6], [1, 2, 12e6], [2, 3, 12e6], [3, 4, 12e6]])])
    assert not low.within


def test_the_drain_after_the_senders_stopped_is_not_the_steady_goodput():
    """Ten connections of a 3 s quick run (wan): the receiver's last interval ran 2.2 s,
    stretched by the connections finishing one by one after the senders stopped, at 0.86 x
    the link. Its goodput is not the steady one: left out, what is left after the start-up
    is too short to judge, and the report says so. A last interval of the usual length,
    or a longer run, is judged as before, without the drain."""
    drained = [[0.79, 1.79, 44.9e6], [1.79, 2.79, 46.8e6], [2.79, 4.98, 41.3e6]]
    assert verdicts.steady_goodput(drained, 1.54) is None
    quick = _case([_flow("TCP 10 x 256K", 44.0e6, 47.82e6, epoch_seconds=1.54,
                         intervals=drained)])
    assert quick.judged == 0 and "the drain after its senders stopped left out" in \
        quick.notes[0]
    whole = [[0, 1, 40e6], *[[t, t + 1, 47.5e6] for t in range(1, 9)], [9, 11.5, 30e6]]
    assert verdicts.steady_goodput(whole, 1.54) == pytest.approx(47.5e6)
    even = [[0, 1, 40e6], [1, 2, 47e6], [2, 3, 47e6], [3, 4.2, 46e6]]
    assert verdicts.steady_goodput(even, 1.0) == pytest.approx((47e6 * 2 + 46e6 * 1.2) / 3.2)


def test_a_loss_limited_flow_is_within_from_pftks_timeouts_to_mathiss_none():
    """At 5 % loss CUBIC on 10 ms carried 3.4-3.5 Mbit/s, half Mathis et al.'s bound (6.79):
    inside Padhye et al.'s 1.785 (with Reno's timeouts) to Mathis et al.'s (without)."""
    lossy = _flow("h1-h2", 3.4e6, 6.79e6, pftk_bound=1.785e6)
    verdict = verdicts.flow_verdict(lossy)
    assert verdict is not None and verdict.within and "PFTK's 1.78 Mbit/s" in verdict.detail
    assert "0.24 to 1.05" in verdict.detail
    assert not verdicts.flow_verdict(lossy | {"throughput": 1.5e6}).within
    assert not verdicts.flow_verdict(lossy | {"throughput": 7.2e6}).within
    # where the share binds below PFTK's figure, the share's tolerance alone
    shared = _flow("h1-h2", 3.4e6, 4.0e6, pftk_bound=5.0e6)
    assert not verdicts.flow_verdict(shared).within
    assert "PFTK" not in verdicts.flow_verdict(shared).detail
    # after its start-up likewise
    steady = lossy | {"epoch_seconds": 0.1, "intervals": [[0, 1, 2e6], [1, 2, 3.3e6],
                                                          [2, 3, 3.5e6], [3, 4, 3.4e6]]}
    verdict = verdicts.flow_verdict(steady)
    assert verdict is not None and verdict.within and "after its start-up" in verdict.detail


def test_a_loss_limited_flow_is_judged_within_its_spread_over_the_epochs_it_lasted():
    """Goodput over k congestion epochs that random losses end varies by 0.6 / sqrt(k):
    3 s of 0.25 s epochs (+-52 % at three deviations) is too few to judge, and says so; 30 s
    (+-16 %) is judged within that of theory's range."""
    def scp(seconds: float, throughput: float) -> dict:
        return _flow("h1-h2", throughput, 48.1e6, kind="scp", pftk_bound=42.9e6,
                     loss_epoch_seconds=0.25, seconds=seconds)
    short = _case([scp(3.0, 37e6)])
    assert short.judged == 0 and short.within is None  # nothing judged: not outside
    assert any("random loss ended 12 of its congestion epochs" in note
               and "+-52%" in note for note in short.notes)
    low, high, why = verdicts.loss_range(scp(30.0, 37e6))
    assert low == pytest.approx(0.9 * 42.9 / 48.1 * (1 - 1.8 / math.sqrt(120)))
    assert high == pytest.approx(1.05 * (1 + 1.8 / math.sqrt(120)))
    assert "+-16% over 120 loss epochs" in why
    assert _case([scp(30.0, 37e6)]).within and _case([scp(30.0, 37e6)]).judged == 1
    assert not _case([scp(30.0, 28e6)]).within  # 0.58 x: below 0.67
    assert not _case([scp(30.0, 60e6)]).within  # 1.25 x: above 1.22


def test_the_path_delay_lies_between_the_floor_and_every_queue_full():
    def delay(mean: float) -> verdicts.FlowVerdict | None:
        return verdicts.delay_verdict(_flow("h1-h4", 0, 0, one_way_mean_ms=mean,
                                            base_one_way_ms=30.0))
    assert delay(30.2).within and delay(89.0).within  # 30 + 60 of queues + 1
    assert not delay(92.0).within  # a figure with the sender's buffer in it
    assert not delay(28.0).within  # faster than light on this path
    assert math.isclose(float(delay(50).detail.split()[-1]), 90.0)
    # the median, when stored: TCP bytes sent again arrive a recovery later (BBR on these
    # queues: a mean of 178 ms where the median is 62)
    recovered = verdicts.delay_verdict(_flow("h1-h4", 0, 0, one_way_mean_ms=178.0,
                                             one_way_p50_ms=62.0, base_one_way_ms=30.0))
    assert recovered is not None and recovered.within and "median" in recovered.detail


def test_transfers_are_judged_over_the_time_they_all_ran_not_a_drain_after_the_others():
    """A bulk TCP sender drains its socket buffer after its test's end, when the paced flow
    beside it has stopped: the link is its own then, which theory's share is not about."""
    bulk = _flow("bulk", 6.0e6, 4.0e6, intervals=[[1.0, 2.0, 4.1e6], [2.0, 3.0, 3.9e6],
                                                  [3.0, 4.0, 4.0e6], [4.0, 7.0, 8.0e6]])
    video = _flow("video", 2.0e6, 2.0e6, kind="udp",
                  intervals=[[1.0, 2.0, 2e6], [2.0, 3.0, 2e6], [3.0, 4.0, 2e6]])
    verdict = _case([bulk, video])
    assert verdict.within and verdict.judged == 2
    assert any("judged over 1.0 to 4.0 s" in note and "bulk ran longer" in note
               for note in verdict.notes)
    # alone, or ending together, a transfer is judged on all it moved
    assert not _case([bulk]).within
    together = video | {"intervals": [*video["intervals"], [4.0, 7.0, 2e6]]}
    assert not _case([bulk, together]).within


def test_a_paced_flow_above_its_share_is_promised_that_share_and_at_most_what_it_sends():
    video = _flow("video", 0.70e6, 0.66e6, kind="udp", rate=2e6)
    assert verdicts.flow_verdict(video).within
    assert "at least 0.90" in verdicts.flow_verdict(video).detail
    assert not verdicts.flow_verdict(video | {"throughput": 0.50e6}).within
    assert not verdicts.flow_verdict(video | {"throughput": 2.1e6}).within  # more than sent
    # at its rate (a FIFO gives an unresponsive flow what it sends): the usual tolerance
    inelastic = _flow("video", 2.2e6, 2e6, kind="udp", rate=2e6)
    assert not verdicts.flow_verdict(inelastic).within


def test_a_flow_is_judged_after_its_start_up_only_over_two_seconds_or_more():
    """One second after start-up can hold a recovery's bytes read late: not enough."""
    intervals = [[1.0, 2.0, 3.5e6], [2.0, 3.0, 4.7e6], [3.0, 4.0, 2.8e6], [4.0, 5.0, 5.8e6]]
    alone = _flow("bulk", 4.2e6, 4.2e6, epoch_seconds=2.5, intervals=intervals)
    assert verdicts.flow_verdict(alone) is None  # 1 s after 3.5 s
    longer = alone | {"intervals": [*intervals, [5.0, 6.0, 3.0e6]]}
    verdict = verdicts.flow_verdict(longer)
    assert verdict is not None and verdict.within  # (5.8 + 3.0) / 2 = 1.05 x 4.2


def test_flows_that_share_a_bottleneck_inside_their_first_epoch_are_not_judged_on_their_total():
    """A quick run of CUBIC flows into a deep drop-tail queue ends inside slow start's
    epoch: their total is not judged (as a flow alone is not), and the notes say so."""
    def shared(label: str, epochs: float | None) -> dict:
        return _flow(label, 3.0e6, 4.7e6, bottleneck="h1-h2 a to b", share_tolerance=1.0,
                     epochs=epochs, epoch_seconds=5.5)
    verdict = _case([shared("up", 0.9), shared("down", 0.9)])
    assert verdict.judged == 0
    assert any("inside the first (start-up)" in note for note in verdict.notes)
    later = _case([shared("up", 1.5), shared("down", 1.5)])
    assert not later.within and "total 0.64 x theory" in later.outside[0].detail
    bbr = _case([shared("up", None) | {"share_tolerance": None, "congestion": "bbr"},
                 shared("down", None) | {"share_tolerance": None, "congestion": "bbr"}])
    assert bbr.judged == 1 and not bbr.within  # no epochs: the total is judged

