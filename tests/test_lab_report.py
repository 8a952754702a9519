"""The report's reading aids: each case measured against theory (within the stated tolerance,
outside, or not judged), bar labels that never overlap, RTT under load as a CDF."""

from __future__ import annotations

from simpleperf.lab.model.verdicts import THROUGHPUT_HIGH, THROUGHPUT_LOW, case_verdicts


def flow(label="h1-h4", kind="tcp", throughput=9.5e6, predicted=10e6, ok=1, error=None,
         base=None, median=None):
    return {"label": label, "kind": kind, "throughput": throughput, "predicted": predicted,
            "ok": ok, "error": error, "base_rtt_ms": base, "rtt_median": median}


def step(case, *flows, events=()):
    return {"case": case, "flows": list(flows), "events": list(events)}


def test_transfers_are_judged_by_their_ratio_to_theory():
    (inside,) = case_verdicts([step("2", flow(throughput=THROUGHPUT_LOW * 10e6),
                                    flow(throughput=THROUGHPUT_HIGH * 10e6))])
    assert inside.within is True and inside.summary() == "within tolerance: all 2 flows"
    (slow,) = case_verdicts([step("2", flow(), flow(label="h7-h9", throughput=6.2e6))])
    assert slow.within is False
    assert slow.summary() == "outside: 1 of 2 flows (h7-h9 tcp 0.62 x theory)"
    (over,) = case_verdicts([step("2", flow(throughput=11e6))])
    assert over.within is False  # more than the bottleneck allows is a fault too


def test_pings_by_rtt_failures_outside_and_what_cannot_be_judged():
    ping = flow(kind="ping", throughput=None, predicted=None, base=80.0, median=83.9)
    far = flow(kind="ping", throughput=None, predicted=None, base=80.0, median=84.1)
    near_zero = flow(kind="ping", throughput=None, predicted=None, base=2.0, median=2.9)
    verdicts = case_verdicts([
        step("1", ping, near_zero), step("1b", far),
        step("3", flow(ok=0, throughput=None, error="unreachable")),
        step("4", flow(predicted=None)),
        step("5", flow(throughput=1e6), events=[{"at": 1.0}])])
    assert [v.within for v in verdicts] == [True, False, False, None, None]
    assert verdicts[1].outside[0].detail == "RTT 84.1 ms, theory 80.0"  # 5 % of 80 is 4 ms
    assert verdicts[2].outside[0].detail == "failed: unreachable"
    assert verdicts[3].summary().startswith("not judged")


def test_steps_of_one_case_are_judged_together_in_run_order():
    verdicts = case_verdicts([step("4", flow()), step("1", flow()),
                              step("4", flow(throughput=1e6))])
    assert [(v.case, v.judged, len(v.outside)) for v in verdicts] == [("4", 2, 1), ("1", 1, 0)]


def test_case_4s_bar_labels_never_overlap():
    """Ten transfers of four-way steps, with long names: every label stands clear of the
    others."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from simpleperf.lab.results.report import _theory_figure

    transfers = []
    for name in ("4a h1-h4 + h2-h5", "4b h1-h4 + h2-h5 + h3-h6", "4c h1-h4 + h7-h9",
                 "4d h1-h4 + h8-h9"):
        step_ = {"name": name, "flows": [{}, {}, {}]}
        for label in ("h1-h4", "h2-h5", "h3-h6")[: 3 if "4b" in name else 2]:
            transfers.append((step_, {"label": label, "throughput": 9e6, "predicted": 1e7}))
    figure = _theory_figure(plt, "4", transfers)
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    axis = figure.axes[0]
    for ticks in (axis.get_xticklabels(), axis.get_yticklabels()):
        boxes = [t.get_window_extent(renderer) for t in ticks if t.get_text()]
        assert all(not a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    assert len([t for t in axis.get_yticklabels() if t.get_text()]) == len(transfers)
    plt.close(figure)


def test_rtt_under_load_is_drawn_as_a_cdf_beside_its_time_series():
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from simpleperf.lab.results.report import _rtt_figure

    flow = {"label": "h1-h4", "base_rtt_ms": 60.0, "rtts": [75.0, 61.0, 90.0, 68.0]}
    figure = _rtt_figure(plt, {"name": "tcp"}, [flow])
    in_time, cdf = figure.axes
    (steps,) = [line for line in cdf.get_lines() if line.get_label() == "h1-h4"]
    assert list(steps.get_xdata()) == [61.0, 68.0, 75.0, 90.0]
    assert list(steps.get_ydata()) == [0.25, 0.5, 0.75, 1.0]
    assert any(list(line.get_xdata()) == [60.0, 60.0] for line in cdf.get_lines())
    assert cdf.get_ylabel() == "cumulative probability"
    plt.close(figure)


def test_compare_keeps_flows_of_one_step_and_pair_apart():
    """A tcp and a ping flow between the same nodes, and a step run twice, are rows of their
    own: none shows another's figures, none is lost as '-'."""
    from simpleperf.lab.results.tables import compare

    def run(tcp: float, ping: float) -> dict:
        flows = [{"kind": "tcp", "label": "h1-h2", "ok": True, "rtt_avg": 20.0,
                  "throughput": tcp},
                 {"kind": "ping", "label": "h1-h2", "ok": True, "rtt_avg": ping,
                  "throughput": None}]
        return {"steps": [{"name": "s", "flows": flows},
                          {"name": "s", "flows": [dict(flows[0], throughput=tcp / 2)]}]}

    rows = compare(run(9e6, 11.0), run(8e6, 12.0)).splitlines()[2:]
    assert len(rows) == 3
    assert rows[0].split() == ["s", "tcp", "h1-h2", "20.0", "9.00", "20.0", "8.00"]
    assert rows[1].split() == ["s", "ping", "h1-h2", "11.0", "-", "12.0", "-"]
    assert rows[2].split() == ["s", "tcp", "h1-h2", "#2", "20.0", "4.50", "20.0", "4.00"]
