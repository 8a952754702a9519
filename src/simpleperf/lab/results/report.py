"""The run's plots (PNG and SVG, with matplotlib) and one self-contained report.html.

Formatting only: the input is a stored run. Images are embedded in the page (data: URLs),
so report.html can be mailed or opened anywhere on its own.
"""

from __future__ import annotations

import base64
import html
import io
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from ..model.flows import KINDS
from ..model.verdicts import TOLERANCE, case_verdicts
from .tables import (
    capture_report,
    capture_witness,
    case_report,
    routing_note,
    sweep_points,
    sweep_report,
    udp_witness,
)

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.6em; } h2 { margin-top: 2em; border-bottom: 1px solid #ccc; }
table.meta td { padding: 2px 12px 2px 0; } pre { background: #f6f6f6; padding: 1em;
overflow-x: auto; } img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
.warn { color: #a00; }
table.verdicts { border-collapse: collapse; } table.verdicts td, table.verdicts th {
padding: 4px 12px; text-align: left; border-bottom: 1px solid #ddd; }
td.within { background: #e3f4e6; color: #185c2a; } td.outside { background: #fbe3e3;
color: #8a1010; } td.unjudged { color: #666; }
"""


class _Saver:
    """Saves each figure as SVG and PNG under plots/ and keeps its PNG for the report."""

    def __init__(self, plt, folder: Path) -> None:
        self.plt = plt
        self.plots = folder / "plots"
        self.plots.mkdir(exist_ok=True)
        self.figures: OrderedDict[str, list[tuple[str, bytes]]] = OrderedDict()

    def __call__(self, case: str, title: str, figure) -> None:
        stem = "".join(c if c.isalnum() else "-" for c in f"case{case}-{title}").strip("-")
        figure.tight_layout()
        figure.savefig(self.plots / f"{stem}.svg")
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=90)
        figure.savefig(self.plots / f"{stem}.png", dpi=90)
        self.plt.close(figure)
        self.figures.setdefault(case, []).append((title, buffer.getvalue()))


NO_PLOTS = ("matplotlib is not installed (pip install 'simpleperf[plots]'): this report has "
            "tables only, no plots")


def plotting_available() -> bool:
    try:
        import matplotlib  # noqa: F401 - only asked whether it is there
    except ImportError:
        return False
    return True


def _figures(run: dict[str, Any], folder: Path) -> OrderedDict[str, list[tuple[str, bytes]]]:
    """Per case: (title, PNG bytes), also saved as PNG and SVG under plots/."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return OrderedDict()
    save = _Saver(plt, folder)
    points = sweep_points(run)
    if points:
        save("sweep", "throughput", _sweep_figure(plt, points))
    latencies = _loaded_pings_by_sweep(run)
    if latencies:
        save("sweep", "latency", _sweep_latency_figure(plt, run, latencies))
    by_case: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
    for step in run["steps"]:
        by_case.setdefault(step["case"], []).append(step)
    for case, steps in by_case.items():
        transfers = [(s, f) for s in steps for f in s["flows"] if f["kind"] != "ping" and f["ok"]]
        if transfers:
            save(case, "throughput-vs-theory", _theory_figure(plt, case, transfers))
        for step in steps:
            timed = [f for f in step["flows"] if f["intervals"]]
            traced = any(f.get("trace_capacity") for f in timed)
            if timed and (len(step["flows"]) > 1 or step.get("events") or traced):
                save(case, f"{step['name']}-throughput", _over_time_figure(plt, step, timed))
            seen = [(taken["place"], row) for taken in step.get("captures", [])
                    for row in taken["tcp"]
                    if len(row["throughput"]) > 1 and row["data_segments"] >= 100]
            if seen:
                save(case, f"{step['name']}-captured", _captured_figure(plt, step, seen))
            loads = any(KINDS[f["kind"]].loads_path for f in step["flows"] if f["kind"] in KINDS)
            loaded = [f for f in step["flows"] if f["rtts"] and (f["kind"] != "ping" or loads)]
            if loaded:
                save(case, f"{step['name']}-rtt", _rtt_figure(plt, step, loaded))
        fair = [s for s in steps if s["fairness"] is not None]
        if fair:
            save(case, "fairness", _fairness_figure(plt, case, fair))
        witnessed = [(s, f, w) for s in steps for f in s["flows"]
                     if (w := capture_witness(s, f)) is not None]
        if witnessed:
            save(case, "retransmissions", _witness_figure(plt, case, witnessed))
        datagrams = [(s, f, w) for s in steps for f in s["flows"]
                     if (w := udp_witness(s, f)) is not None]
        if datagrams:
            save(case, "udp-witness", _udp_witness_figure(plt, case, datagrams))
        series = _by_connections(witnessed)
        if series:
            save(case, "connections", _connections_figure(plt, case, series))
    return save.figures


def _witness_figure(plt, case: str, witnessed: list[tuple[dict, dict, dict[str, Any]]]):
    """Each TCP flow's retransmissions as the capture saw them beside the sender's count."""
    figure, axis = plt.subplots(figsize=(9, 3.6))
    names = [f"{f['label']}\n{s['name'][:22]}" for s, f, _ in witnessed]
    positions = list(range(len(witnessed)))
    for offset, key, label in ((-0.27, "wireshark_percent", "capture: Wireshark's "
                                "retransmissions"),
                               (0.0, "resent_percent", "capture: every segment sent again"),
                               (0.27, "tcp_info_percent", "sender's TCP_INFO retransmits")):
        axis.bar([p + offset for p in positions],
                 [w[key] if w[key] is not None else 0 for _, _, w in witnessed], 0.27,
                 label=label)
    axis.set_xticks(positions, names, fontsize=7)
    axis.set_ylabel("% of data segments")
    axis.set_title(f"Case {case}: retransmissions, two independent witnesses")
    axis.legend(fontsize=8)
    return figure


def _udp_witness_figure(plt, case: str, datagrams: list[tuple[dict, dict, dict[str, Any]]]):
    """Each UDP flow's loss and jitter: the receiver's report beside the capture's."""
    figure, (loss, jitter) = plt.subplots(1, 2, figsize=(10, 3.4))
    names = [f"{f['label']}\n{s['name'][:22]}" for s, f, _ in datagrams]
    positions = list(range(len(datagrams)))
    for axis, key, unit in ((loss, "loss_percent", "loss, %"), (jitter, "jitter_ms",
                                                                 "jitter, ms")):
        for offset, who in ((-0.2, "receiver"), (0.2, "capture")):
            axis.bar([p + offset for p in positions],
                     [w[f"{who}_{key}"] or 0 for _, _, w in datagrams], 0.4,
                     label=f"{who}'s")
        axis.set_xticks(positions, names, fontsize=7)
        axis.set_ylabel(unit)
    loss.legend(fontsize=8)
    figure.suptitle(f"Case {case}: UDP loss and jitter, two independent witnesses")
    return figure


def _by_connections(witnessed: list[tuple[dict, dict, dict[str, Any]]]
                    ) -> dict[str, list[tuple[int, float, float, float | None]]]:
    """Window -> (connections, throughput, capture retransmission %, theory) when a case
    varies the number of parallel connections of one TCP flow (the thesis's figure)."""
    series: dict[str, list[tuple[int, float, float, float | None]]] = {}
    for _, flow, witness in witnessed:
        parameters = flow["parameters"]
        window = parameters.get("window")
        key = f"window {window / 1000:g} kB" if window else "default window"
        predicted = flow["predicted"] / 1e6 if flow["predicted"] else None
        series.setdefault(key, []).append((parameters.get("parallel", 1),
                                           (flow["throughput"] or 0) / 1e6,
                                           witness["wireshark_percent"] or 0, predicted))
    if len({point[0] for points in series.values() for point in points}) < 2:
        return {}
    return {key: sorted(points) for key, points in series.items()}


def _connections_figure(plt, case: str,
                        series: dict[str, list[tuple[int, float, float, float | None]]]):
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for key, points in series.items():
        line = left.plot([p[0] for p in points], [p[1] for p in points], "o-", label=key)
        bound = [(p[0], p[3]) for p in points if p[3] is not None]
        if bound:
            left.plot([n for n, _ in bound], [b for _, b in bound], ":",
                      color=line[0].get_color(), label=f"{key}: theory")
        right.plot([p[0] for p in points], [p[2] for p in points], "o-", label=key)
    left.set_ylim(bottom=0)
    right.set_ylim(bottom=0)
    left.set_xlabel("parallel TCP connections")
    left.set_ylabel("goodput, Mbit/s")
    right.set_xlabel("parallel TCP connections")
    right.set_ylabel("retransmitted segments, % (capture)")
    left.legend(fontsize=8)
    figure.suptitle(f"Case {case}: throughput and retransmission ratio against connections")
    return figure


def _loaded_pings_by_sweep(run: dict[str, Any]) -> dict[str, list[float]]:
    """Per sweep value, in the order run: the RTTs of every ping beside flows that load the
    network (Flent's latency under load)."""
    found: dict[str, list[float]] = {}
    for step in run["steps"]:
        if step.get("sweep_value") is None:
            continue
        if not any(KINDS[f["kind"]].loads_path for f in step["flows"] if f["kind"] in KINDS):
            continue
        for flow in step["flows"]:
            if flow["kind"] == "ping" and flow["rtts"]:
                found.setdefault(step["sweep_value"], []).extend(flow["rtts"])
    return found


def _sweep_latency_figure(plt, run: dict[str, Any], latencies: dict[str, list[float]]):
    """The CDF of ping RTT under load at each sweep value, beside the idle RTT."""
    figure, axis = plt.subplots(figsize=(9, 3.6))
    for value, rtts in latencies.items():
        ordered = sorted(rtts)
        median = ordered[len(ordered) // 2]
        axis.step(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))],
                  where="post", label=f"{value} (median {median:.1f} ms)")
    bases = [f["base_rtt_ms"] for s in run["steps"] for f in s["flows"]
             if f["kind"] == "ping" and f.get("base_rtt_ms") is not None]
    if bases:
        axis.axvline(min(bases), color="0.3", linestyle=":", linewidth=1)
    axis.set_xscale("log")
    axis.set_xlabel("ping RTT under load, ms (log; dotted: idle theory)")
    axis.set_ylabel("cumulative probability")
    axis.set_ylim(0, 1.02)
    parameter = next(s["sweep_parameter"] for s in run["steps"] if s.get("sweep_parameter"))
    axis.set_title(f"Latency under load against {parameter}")
    axis.legend(fontsize=8)
    return figure


def _sweep_figure(plt, points: list[dict[str, Any]]):
    """Mean goodput with its 95 % CI at each sweep value, per kind of transfer, beside
    theory's bounds."""
    figure, axis = plt.subplots(figsize=(9, 4))
    labels = list(dict.fromkeys(p["value"] for p in points))
    kinds = list(dict.fromkeys(p["kind"] for p in points))
    for kind in kinds:
        mine = [p for p in points if p["kind"] == kind]
        measured = [(labels.index(p["value"]), p) for p in mine if "mean" in p]
        axis.errorbar([i for i, _ in measured], [p["mean"] / 1e6 for _, p in measured],
                      yerr=[p["ci95"] / 1e6 for _, p in measured], fmt="o-", capsize=4,
                      label=f"{kind} measured (mean, 95 % CI)")
        for key, style, name in (("predicted", "--", "theory (smallest bound)"),
                                 ("window_bound", ":", "window / RTT"),
                                 ("mathis_bound", "-.", "Mathis MSS / (RTT sqrt p)"),
                                 ("pftk_bound", "v:", "PFTK (with timeouts)")):
            line = [(labels.index(p["value"]), p[key] / 1e6) for p in mine
                    if p[key] is not None]
            if line and (key != "predicted" or kind == kinds[0]):
                axis.plot([x for x, _ in line], [y for _, y in line], style,
                          label=f"{kind}: {name}" if len(kinds) > 1 else name)
    tops = [p["mean"] + p["ci95"] for p in points if "mean" in p]
    axis.set_ylim(0, max(tops + [1e6]) / 1e6 * 1.4)
    axis.set_xticks(list(range(len(labels))), labels)
    axis.set_xlabel(points[0]["parameter"])
    axis.set_ylabel("goodput, Mbit/s")
    axis.set_title(f"Throughput against {points[0]['parameter']}")
    axis.legend(fontsize=8)
    return figure


def _theory_figure(plt, case: str, transfers: list[tuple[dict, dict[str, Any]]]):
    """Each transfer's measured throughput beside its predicted fair share: horizontal bars,
    a row per transfer, so that no two labels can overlap however many there are."""
    names = [f"{f['label']} ({s['name'][:28]})" if len(s["flows"]) > 1 else f["label"]
             for s, f in transfers]
    figure, axis = plt.subplots(figsize=(9, max(2.4, 0.42 * len(transfers) + 1.3)))
    rows = range(len(transfers))
    axis.barh([r - 0.2 for r in rows], [(f["throughput"] or 0) / 1e6 for _, f in transfers],
              0.4, label="measured")
    axis.barh([r + 0.2 for r in rows], [(f["predicted"] or 0) / 1e6 for _, f in transfers],
              0.4, label="theory (max-min share, goodput)")
    axis.set_yticks(list(rows), names, fontsize=8)
    axis.invert_yaxis()  # in the order the steps ran, top down
    axis.set_xlabel("Mbit/s")
    axis.set_title(f"Case {case}: measured vs predicted throughput")
    axis.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    return figure


def _over_time_figure(plt, step: dict[str, Any], timed: list[dict[str, Any]]):
    """Throughput of each flow of a step, interval by interval, and what a trace on a flow's
    path offered meanwhile."""
    figure, axis = plt.subplots(figsize=(9, 3.2))
    for flow in timed:
        starts = [i[0] for i in flow["intervals"]] + [flow["intervals"][-1][1]]
        rates = [i[2] / 1e6 for i in flow["intervals"]]
        axis.step(starts, rates + rates[-1:], where="post", label=flow["label"])
    shown = set()
    for flow in timed:
        if not flow.get("trace_capacity") or flow["trace_capacity"][0] in shown:
            continue
        name, offered = flow["trace_capacity"]
        shown.add(name)
        starts = [i[0] for i in offered] + [offered[-1][1]]
        rates = [i[2] / 1e6 for i in offered]
        axis.step(starts, rates + rates[-1:], where="post", linestyle="--", color="0.4",
                  label=f"trace {name}: capacity")
    for event in step.get("events", []):
        if event["applied"] is not None:
            axis.axvline(event["applied"], color="0.3", linestyle="--", linewidth=1)
            axis.annotate(event["description"].split(": ", 1)[-1], (event["applied"], 1),
                          xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                          va="top", ha="right")
    axis.set_xlabel("s")
    axis.set_ylabel("Mbit/s")
    axis.set_title(f"{step['name']}: throughput over time")
    axis.legend(fontsize=8)
    return figure


def _captured_figure(plt, step: dict[str, Any], seen: list[tuple[str, dict[str, Any]]]):
    """New data per second of each TCP connection, as the capture saw it."""
    figure, axis = plt.subplots(figsize=(9, 3.2))
    for place, row in seen:
        points = row["throughput"]
        starts = [p[0] for p in points] + [points[-1][1]]
        rates = [p[2] / 1e6 for p in points]
        axis.step(starts, rates + rates[-1:], where="post",
                  label=f"{place}: {row['source_port']} > {row['destination_port']}")
    axis.set_xlabel("s from the connection's first packet")
    axis.set_ylabel("Mbit/s")
    axis.set_title(f"{step['name']}: throughput seen by the capture")
    if len(seen) <= 12:
        axis.legend(fontsize=7)
    return figure


def _rtt_figure(plt, step: dict[str, Any], loaded: list[dict[str, Any]]):
    """RTT probes taken while each flow ran: in time, and as a CDF (as Flent draws latency
    under load), beside the idle RTT theory gives."""
    figure, (in_time, cdf) = plt.subplots(1, 2, figsize=(10, 3.4))
    for flow in loaded:
        rtts = flow["rtts"]
        line = in_time.plot(range(1, len(rtts) + 1), rtts, marker=".",
                            label=f"{flow['label']} (idle theory {flow['base_rtt_ms']:.0f} ms)")
        ordered = sorted(rtts)
        cdf.step(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], where="post",
                 color=line[0].get_color(), label=flow["label"])
        cdf.axvline(flow["base_rtt_ms"], color=line[0].get_color(), linestyle=":",
                    linewidth=1)
    in_time.set_xlabel("probe")
    in_time.set_ylabel("RTT ms")
    in_time.legend(fontsize=8)
    cdf.set_xlabel("RTT ms (dotted: idle theory)")
    cdf.set_ylabel("cumulative probability")
    cdf.set_ylim(0, 1.02)
    figure.suptitle(f"{step['name']}: RTT under load")
    figure.tight_layout()
    return figure


def _fairness_figure(plt, case: str, fair: list[dict[str, Any]]):
    """Jain's index of every step of a case with several TCP connections."""
    figure, axis = plt.subplots(figsize=(9, 2.8))
    axis.bar([s["name"][:30] for s in fair], [s["fairness"] for s in fair])
    axis.set_ylim(0, 1.05)
    axis.set_ylabel("Jain's index")
    axis.set_title(f"Case {case}: fairness per step")
    axis.tick_params(axis="x", labelsize=7)
    return figure


def _verdict_table(run: dict[str, Any], titles: dict[str, str]) -> str:
    """Each case, measured against theory, before any detail."""
    rows = []
    for verdict in case_verdicts(run["steps"]):
        kind = {True: "within", False: "outside", None: "unjudged"}[verdict.within]
        rows.append(f"<tr><td>{html.escape(verdict.case)}</td>"
                    f"<td>{html.escape(titles.get(verdict.case, ''))}</td>"
                    f"<td class='{kind}'>{html.escape(verdict.summary())}"
                    + "".join(f"<br><small>{html.escape(note)}</small>"
                              for note in verdict.notes) + "</td></tr>")
    return ("<h2>Verdicts</h2><table class='verdicts'><tr><th>case</th><th></th>"
            "<th>measured against theory</th></tr>" + "".join(rows) + "</table>"
            f"<p>Tolerance: {html.escape(TOLERANCE)}.</p>")


def write_report(folder: Path, run: dict[str, Any], titles: dict[str, str]) -> Path:
    figures = _figures(run, folder)
    meta = run["metadata"]
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run["started"]))
    rows = [("experiment", run["experiment"]), ("started", started),
            ("duration", f"{(run['finished'] or run['started']) - run['started']:.0f} s"),
            ("quick", "yes" if run["quick"] else "no"), ("shaper", run["shaper"])]
    rows += [(key, str(value)) for key, value in meta.items() if key != "shaper"]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>simpleperf lab: "
             f"{html.escape(run['experiment'])}</title><style>{STYLE}</style></head><body>",
             f"<h1>simpleperf lab run: {html.escape(run['experiment'])}</h1>"]
    if run["interrupted"]:
        parts.append("<p class='warn'>This run was interrupted: only the finished steps are "
                     "shown.</p>")
    if not plotting_available():
        parts.append(f"<p class='warn'>{html.escape(NO_PLOTS)}.</p>")
    parts.append(_verdict_table(run, titles))
    parts.append("<table class='meta'>" + "".join(
        f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>" for k, v in rows)
        + "</table>")
    routing = routing_note(run)
    if routing is not None:
        parts.append(f"<p>{html.escape(routing)}</p>")
    if any(step.get("sweep_value") is not None for step in run["steps"]):
        table = sweep_report(run).strip()
        heading, _, body = table.partition("\n")
        parts.append(f"<h2>{html.escape(heading)}</h2><pre>{html.escape(body)}</pre>")
        for title, png in figures.get("sweep", []):
            data = base64.b64encode(png).decode()
            parts.append(f"<img alt='{html.escape(title)}' src='data:image/png;base64,{data}'>")
    report = case_report(run, titles)
    sections = report.split("\nTest case ")
    for section in sections:
        if not section.strip():
            continue
        heading, _, body = section.strip().partition("\n")
        heading = heading.removeprefix("Test case ")
        case = heading.split(":", 1)[0]
        parts.append(f"<h2>Test case {html.escape(heading)}</h2><pre>{html.escape(body)}</pre>")
        for title, png in figures.get(case, []):
            data = base64.b64encode(png).decode()
            parts.append(f"<img alt='{html.escape(title)}' src='data:image/png;base64,{data}'>")
    captured = capture_report(run)
    if captured:
        parts.append("<h2>Captures</h2><pre>" + html.escape(captured) + "</pre>")
    parts.append("<h2>Topology</h2><pre>" + html.escape(run["topology_toml"]) + "</pre>")
    parts.append("<h2>Experiment</h2><pre>" + html.escape(run["experiment_toml"]) + "</pre>")
    # Lets a headless browser (and the tests) see that every image really loaded.
    parts.append("<script>window.addEventListener('load', () => { const all = "
                 "[...document.images]; document.body.dataset.imagesLoaded = all.filter("
                 "i => i.complete && i.naturalWidth > 0).length + '/' + all.length; });"
                 "</script>")
    parts.append("</body></html>")
    path = folder / "report.html"
    path.write_text("\n".join(parts))
    return path
