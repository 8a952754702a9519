"""Text tables of a run, every measurement beside what theory predicts. Formatting only:
the input is a stored run (store.load_run), the output is text."""

from __future__ import annotations

from collections import Counter, OrderedDict
from typing import Any

from ...stats import mean_confidence
from ..model.flows import KINDS


def _mbps(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e6:.2f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join(f"{h:<{w}}" for h, w in zip(header, widths, strict=True))
    out = ["  " + line.rstrip(), "  " + "  ".join("-" * w for w in widths)]
    out += ["  " + "  ".join(f"{str(c):<{w}}" for c, w in zip(r, widths, strict=True)).rstrip()
            for r in rows]
    return out


def _failure(flow: dict[str, Any]) -> str:
    return f"FAILED: {flow['error']}"


def case_report(run: dict[str, Any], titles: dict[str, str]) -> str:
    cases: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
    for step in run["steps"]:
        cases.setdefault(step["case"], []).append(step)
    lines: list[str] = []
    for case, steps in cases.items():
        lines.append("")
        lines.append(f"Test case {case}: {titles.get(case, '')}".rstrip(": "))
        if all(len(step["flows"]) == 1 for step in steps):
            lines += _pair_table(steps)
        else:
            for step in steps:
                lines += _step_block(step)
    return "\n".join(lines)


def _pair_table(steps: list[dict[str, Any]]) -> list[str]:
    """One row per pair: its idle RTT (ping step) and throughput (tcp or udp step)."""
    rows: OrderedDict[str, dict[str, Any]] = OrderedDict()
    udp = False
    for step in steps:
        flow = step["flows"][0]
        row = rows.setdefault(flow["label"], {})
        row["base"] = flow["base_rtt_ms"]
        if flow["kind"] == "ping":
            row["ping"] = flow
        else:
            row["transfer"] = flow
            udp |= KINDS[flow["kind"]].datagrams
    header = ["pair", "RTT avg ms", "theory ms"]
    header += (["asked Mbit/s", "got Mbit/s", "theory", "jitter ms", "loss"] if udp
               else ["throughput Mbit/s", "theory", "ratio"]) + [ONE_WAY_HEADER, WRITE_HEADER]
    table = []
    transfers = [row["transfer"] for row in rows.values() if "transfer" in row]
    for label, row in rows.items():
        ping = row.get("ping")
        rtt = "-" if ping is None else (_ms(ping["rtt_avg"]) if ping["ok"] else _failure(ping))
        cells = [label, rtt, _ms(row["base"])]
        flow = row.get("transfer")
        if flow is None:
            cells += ["-"] * (len(header) - len(cells))
        elif not flow["ok"]:
            cells += [_failure(flow)] + [""] * (len(header) - len(cells) - 1)
        elif udp:
            loss = "-" if flow["loss_percent"] is None else (
                f"{flow['loss_percent']:.3f} % ({flow['lost']}/{flow['packets']}"
                f"{_host_dropped(flow)})")
            cells += [_mbps(flow["rate"]), _mbps(flow["throughput"]), _mbps(flow["predicted"]),
                      "-" if flow["jitter_ms"] is None else f"{flow['jitter_ms']:.3f}", loss]
        else:
            ratio = (f"{flow['throughput'] / flow['predicted']:.2f}"
                     if flow["throughput"] and flow["predicted"] else "-")
            cells += [_mbps(flow["throughput"]), _mbps(flow["predicted"]), ratio]
        if flow is not None and flow["ok"]:
            cells += _one_way(flow)
        table.append(cells)
    algorithms = _congestion(transfers)
    return _table(header, table) + ([f"  {algorithms}"] if algorithms else [])


ONE_WAY_HEADER = "path one-way ms: mean, p99 (theory floor)"
WRITE_HEADER = "write-to-read ms (app)"


def _congestion(flows: list[dict[str, Any]]) -> str:
    """Which congestion control each TCP flow ran: it decides how flows share a queue."""
    named = [(flow["label"], flow["congestion"]) for flow in flows if flow.get("congestion")]
    if not named:
        return ""
    if len({algorithm for _, algorithm in named}) == 1:
        return f"TCP congestion control {named[0][1]}"
    return "TCP congestion control " + ", ".join(f"{label} {a}" for label, a in named)


def _one_way(flow: dict[str, Any]) -> list[str]:
    """The path's one-way delay (--trip-times) beside theory's floor, the forward path's
    delays; then, for tcp, the application's write-to-read delay, which has no theory (it
    includes the time writes wait in the sender's socket buffer)."""
    path = "-" if flow.get("one_way_mean_ms") is None else (
        f"{flow['one_way_mean_ms']:.1f}, {flow['one_way_p99_ms']:.1f} "
        f"({_ms(flow['base_one_way_ms'])})")
    return [path, _ms(flow.get("write_to_read_mean_ms"))]


def _udp_quality(flow: dict[str, Any]) -> str:
    if not KINDS[flow["kind"]].datagrams or flow["loss_percent"] is None:
        return "-"
    frames = "" if flow.get("frames") is None else (
        f"; frames {flow['frames']} whole, {flow['frames_lost']} lost, latency "
        f"{_ms(flow['frame_latency_mean_ms'])} ms (p99 {_ms(flow['frame_latency_p99_ms'])})")
    return (f"{flow['jitter_ms']:.3f} ms, {flow['loss_percent']:.2f} % lost"
            f"{_host_dropped(flow)}{frames}")


def _host_dropped(flow: dict[str, Any]) -> str:
    """How much of a UDP flow's loss the receiving host's socket dropped (its buffer
    full), not the network: said only when any was."""
    dropped = flow.get("host_dropped")  # None in runs from before it was counted
    return f"; {dropped} by the receiving host" if dropped else ""


def _step_block(step: dict[str, Any]) -> list[str]:
    lines = [f"  {step['name']}" + (" (interrupted)" if step["interrupted"] else "")]
    with_udp = any(KINDS[flow["kind"]].datagrams for flow in step["flows"])
    table = []
    for flow in step["flows"]:
        if not flow["ok"]:
            table.append([flow["label"], _failure(flow), "", "", "", "", "", ""]
                         + [""] * with_udp)
            continue
        connections = flow["connections"]
        per = (" (" + " + ".join(f"{c / 1e6:.2f}" for c in connections) + ")"
               if len(connections) > 1 else "")
        table.append([flow["label"], _ms(flow["rtt_avg"]),
                      f"{_ms(flow['base_rtt_ms'])} .. {_ms(flow['full_queue_rtt_ms'])}",
                      _mbps(flow["throughput"]) + per, _mbps(flow["predicted"]),
                      f"{flow['throughput'] / flow['predicted']:.2f}"
                      if flow["throughput"] and flow["predicted"] else "-", *_one_way(flow)]
                     + ([_udp_quality(flow)] if with_udp else []))
    lines += ["  " + line for line in _table(
        ["pair", "RTT under load ms", "theory: idle .. full queues", "throughput Mbit/s",
         "max-min share", "ratio", ONE_WAY_HEADER, WRITE_HEADER]
        + (["UDP jitter, loss"] if with_udp else []), table)]
    notes = []
    algorithms = _congestion(step["flows"])
    if algorithms:
        notes.append(algorithms)
    if step["fairness"] is not None:
        notes.append(f"Jain's fairness index {step['fairness']:.3f} (1 = perfectly fair)")
    if step["start_spread_ms"] is not None:
        notes.append(f"start spread {step['start_spread_ms']:.1f} ms")
    if notes:
        lines.append("    " + "; ".join(notes))
    lines += ["    " + line for flow in step["flows"] for line in rpm_lines(flow)]
    lines += ["    " + line for flow in step["flows"] for line in path_lines(flow)]
    for event in step.get("events", []):
        lines += ["    " + line for line in event_lines(event)]
    return lines


def rpm_lines(flow: dict[str, Any]) -> list[str]:
    """An rpm flow's responsiveness beside theory's, and the round trips behind each."""
    detail = flow.get("rpm_detail") or {}
    if not flow["ok"] or flow.get("rpm") is None:
        return []
    parameters = flow.get("parameters", {})
    who = (f"{detail.get('meter', parameters.get('meter'))} against "
           f"{parameters.get('tool', 'simpleperf')}, {parameters.get('direction')}")
    measured = [f"{name} {_ms(detail.get(key))} ms" for key, name in (
        ("foreign_ms", "foreign"), ("loaded_ms", "loaded")) if detail.get(key) is not None]
    line = f"{flow['label']}: {flow['rpm']:.0f} RPM ({who}"
    line += f"; {', '.join(measured)})" if measured else ")"
    if flow.get("rpm_theory"):
        line += (f"; theory {flow['rpm_theory']:.0f} RPM (foreign "
                 f"{_ms(detail.get('theory_foreign_ms'))} ms, loaded "
                 f"{_ms(detail.get('theory_loaded_ms'))} ms; {flow['rpm_low']:.0f} with every "
                 f"queue full, {flow['rpm_high']:.0f} with none)")
    return [line]


def path_lines(flow: dict[str, Any]) -> list[str]:
    """The nodes a routed flow's connections crossed, and theory's where it differs."""
    paths = flow.get("paths") or []
    if not paths:
        return []
    counted = Counter(paths)
    taken = "; ".join(path + (f" ({n} connections)" if n > 1 else "")
                      for path, n in counted.items())
    line = f"{flow['label']} took {taken}"
    if flow.get("mptcp_subflows"):  # None in runs from before MPTCP flows
        line += f" (MPTCP: {flow['mptcp_subflows']} subflows)"
    if flow.get("theory_path") and set(counted) != {flow["theory_path"]}:
        line += f" (theory assumed {flow['theory_path']})"
    return [line]


def routing_note(run: dict[str, Any]) -> str | None:
    """How the run's topology routes, with the timers its events' outages stand beside."""
    from ..model import topology

    try:
        model = topology.parse(run["topology_toml"])
    except (ValueError, KeyError, TypeError):
        return None  # a pair, or a file this version cannot read
    if not model.routing.dynamic:
        return None
    return (f"routing: {model.routing_summary} (FRR); timers: "
            f"{model.routing.timers.describe()}; a link that fails loses carrier at both ends, "
            "so routers notice it at once")


def event_lines(event: dict[str, Any]) -> list[str]:
    """An event as the run's output and the report say it: when it was made, how long the
    routers took to settle, and what each flow saw."""
    if event["applied"] is None:
        return [f"{event['description']}: not made (the flows had ended)"]
    head = (f"{event['description']}: made at {event['applied']:.2f} s "
            f"({(event['took'] or 0) * 1e3:.0f} ms)")
    if event["error"]:
        return [f"{head}: FAILED: {event['error']}"]
    if event["convergence"] is not None:
        head += (f"; routes converged {event['convergence']:.2f} s later "
                 f"({event['route_changes']} route changes)")
    lines = [head]
    for flow in event["flows"]:
        outage = ("no reply until the next event or the end" if flow["outage"] is None
                  else f"outage {flow['outage']:.3f} s")
        dip = "" if flow["dip"] is None else f", throughput dip {flow['dip'] * 100:.0f} %"
        back = ("" if flow["recovery"] is None
                else f", back to 90 % of its new level after {flow['recovery']:.1f} s")
        after = ""
        if flow.get("predicted") is not None:
            after = (f"; theory after it: {flow['predicted'] / 1e6:.2f} Mbit/s, base RTT "
                     f"{flow['base_rtt_ms']:.1f} ms")
        lines.append(f"  {flow['label']}: {outage}{dip}{back}{after}")
    return lines


def compare(first: dict[str, Any], second: dict[str, Any]) -> str:
    """Two runs side by side, flow by flow: matched by step name, kind and label, and the
    n-th of those in run order (a tcp and a ping flow between the same nodes, or a step
    repeated, are rows of their own)."""
    def index(run: dict[str, Any]) -> OrderedDict:
        found: OrderedDict[tuple[str, str, str, int], dict[str, Any]] = OrderedDict()
        seen: dict[tuple[str, str, str], int] = {}
        for step in run["steps"]:
            for flow in step["flows"]:
                key = (step["name"], flow["kind"], flow["label"])
                seen[key] = seen.get(key, 0) + 1
                found[(key[0], key[1], key[2], seen[key])] = flow
        return found

    a, b = index(first), index(second)
    rows = []
    for key in list(a) + [k for k in b if k not in a]:
        cells = [key[0], f"{key[1]} {key[2]}" + (f" #{key[3]}" if key[3] > 1 else "")]
        for flows in (a, b):
            flow = flows.get(key)
            if flow is None or not flow["ok"]:
                cells += ["-", "-"]
            elif flow["kind"] == "ping":
                cells += [_ms(flow["rtt_avg"]), "-"]
            else:
                cells += [_ms(flow["rtt_avg"]), _mbps(flow["throughput"])]
        rows.append(cells)
    return "\n".join(_table(["step", "flow", "A RTT ms", "A Mbit/s", "B RTT ms", "B Mbit/s"],
                            rows))


SWEPT_KINDS = ("tcp", "scp", "http")  # flows whose goodput a sweep plots


def sweep_points(run: dict[str, Any]) -> list[dict[str, Any]]:
    """Per sweep value (in the order run) and kind of transfer (tcp, scp, http), the goodput
    of every round with its mean and 95 % confidence interval, beside theory's bounds."""
    points: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()
    for step in run["steps"]:
        if step.get("sweep_value") is None:
            continue
        for kind in SWEPT_KINDS:
            flows = [f for f in step["flows"] if f["kind"] == kind]
            if not flows:
                continue
            point = points.setdefault((step["sweep_value"], kind), {
                "value": step["sweep_value"], "parameter": step["sweep_parameter"],
                "kind": kind, "throughputs": [], "rtts": [], "predicted": None,
                "share": None, "window_bound": None, "mathis_bound": None, "pftk_bound": None,
                "failed": 0})
            if not all(f["ok"] for f in flows):
                point["failed"] += 1
                continue
            point["throughputs"].append(sum(f["throughput"] or 0 for f in flows))
            point["rtts"] += [f["rtt_avg"] for f in flows if f["rtt_avg"] is not None]
            for key in ("predicted", "window_bound", "mathis_bound", "pftk_bound"):
                values = [f[key] for f in flows if f.get(key) is not None]
                point[key] = sum(values) if values else None
    for point in points.values():
        if point["throughputs"]:
            point["mean"], point["ci95"] = mean_confidence(point["throughputs"])
    return list(points.values())


def rpm_sweep_rows(run: dict[str, Any]) -> list[list[str]]:
    """Per sweep value and rpm flow: the RPM each round measured, theory's, and the round
    trips behind each (foreign and loaded, ms: measured, then theory's)."""
    rows = []
    for step in run["steps"]:
        if step.get("sweep_value") is None:
            continue
        for flow in step["flows"]:
            if flow["kind"] not in KINDS or not KINDS[flow["kind"]].responsiveness:
                continue
            detail = flow.get("rpm_detail") or {}
            measured = (f"{flow['rpm']:.0f}" if flow["ok"] and flow.get("rpm") is not None
                        else _failure(flow))
            rows.append([str(step["sweep_value"]), flow["label"], measured,
                         "-" if flow.get("rpm_theory") is None else f"{flow['rpm_theory']:.0f}",
                         f"{_ms(detail.get('foreign_ms'))} / {_ms(detail.get('loaded_ms'))}",
                         f"{_ms(detail.get('theory_foreign_ms'))} / "
                         f"{_ms(detail.get('theory_loaded_ms'))}"])
    return rows


def sweep_report(run: dict[str, Any]) -> str:
    points = sweep_points(run)
    rpm_rows = rpm_sweep_rows(run)
    rpm_table = [] if not rpm_rows else [
        "\nResponsiveness: RPM beside theory's (60000 over the mean of a foreign probe's "
        "and a self probe's round trip, each the base RTT and the queue the discipline "
        "holds), and those round trips",
        *_table([str(next(s["sweep_parameter"] for s in run["steps"]
                           if s.get("sweep_parameter"))), "flow", "RPM", "theory",
                 "foreign / loaded ms", "theory's"], rpm_rows)]
    if not points:
        return "\n".join(rpm_table) if rpm_table else "no sweep points"
    parameter = points[0]["parameter"]
    rows = []
    for point in points:
        measured = ("all failed" if "mean" not in point else
                    f"{point['mean'] / 1e6:.2f} +- {point['ci95'] / 1e6:.2f}")
        rows.append([point["value"], point["kind"], str(len(point["throughputs"]))
                     + (f" ({point['failed']} failed)" if point["failed"] else ""), measured,
                     _mbps(point["predicted"]), _mbps(point["window_bound"]),
                     _mbps(point["pftk_bound"]), _mbps(point["mathis_bound"])])
    return "\n".join([f"\nSweep of {parameter}: goodput, mean and 95 % confidence interval "
                      "(window/RTT of scp: SSH's 2 MiB channel window)",
                      *_table([parameter, "flow", "runs", "Mbit/s", "theory", "window/RTT",
                               "PFTK", "Mathis"], rows), *rpm_table])


def capture_witness(step: dict[str, Any], flow: dict[str, Any]) -> dict[str, Any] | None:
    """A TCP flow's retransmissions as its step's capture saw them (summed over the flow's
    connections) beside the sender's TCP_INFO count, all in % of data segments."""
    rows = [row for taken in step.get("captures", []) for row in taken["tcp"]
            if row["flow_id"] == flow["id"] and row["destination_port"] != row["source_port"]
            and row["data_segments"] > 1]
    # The data direction of each connection: the one that carried the most segments.
    rows = [row for row in rows if row["data_segments"] == max(
        r["data_segments"] for r in rows if r["source_port"] == row["source_port"])]
    segments = sum(row["data_segments"] for row in rows)
    if not segments or flow["kind"] not in SWEPT_KINDS:
        return None
    retransmissions = sum(row["retransmissions"] for row in rows)
    resent = sum(row["resent"] for row in rows)
    sender = flow.get("retransmits")
    return {"segments": segments, "retransmissions": retransmissions, "resent": resent,
            "wireshark_percent": 100 * retransmissions / segments,
            "resent_percent": 100 * resent / segments,
            "tcp_info_percent": None if sender is None else 100 * sender / segments}


def udp_witness(step: dict[str, Any], flow: dict[str, Any]) -> dict[str, Any] | None:
    """A UDP flow's loss and jitter as its receiver reported them and as the capture saw
    them (sequence gaps; RFC 3550 jitter from capture and send timestamps)."""
    rows = [row for taken in step.get("captures", []) for row in taken["udp"]
            if row["flow_id"] == flow["id"] and row["datagrams"] > 1]
    if not KINDS[flow["kind"]].datagrams or not rows:
        return None
    row = max(rows, key=lambda r: r["datagrams"])
    expected = row["datagrams"] - row["duplicates"] + row["gaps"]
    return {"capture_loss_percent": 100 * row["gaps"] / expected if expected else None,
            "receiver_loss_percent": flow.get("loss_percent"),
            "capture_jitter_ms": row["jitter_ms"], "receiver_jitter_ms": flow.get("jitter_ms")}


def capture_report(run: dict[str, Any]) -> str:
    """Every capture of the run: where, the file, and per TCP and UDP flow what it saw."""
    lines = []
    for step in run["steps"]:
        for taken in step.get("captures", []):
            lines.append(f"step {step['position']} ({step['name']}), {taken['place']}: "
                         f"{taken['packets'] if taken['packets'] is not None else '?'} packets"
                         f" in {taken['path']}"
                         + (" - CUT SHORT by capture_limit" if taken["cut_short"] else "")
                         + (f" - {taken['error']}" if taken["error"] else ""))
            for row in taken["tcp"]:
                ratio = row["retransmission_ratio"]
                lines.append(
                    f"  TCP {row['source']}:{row['source_port']} > {row['destination']}:"
                    f"{row['destination_port']}  {row['data_segments']} segments, "
                    f"{row['retransmissions']} retransmitted"
                    + (f" ({ratio * 100:.3f} %)" if ratio is not None else "")
                    + f", {row['resent']} resent, {row['lost_segments']} gaps"
                    + (f", RTT at the capture {row['rtt_avg']:.2f} ms" if row["rtt_avg"]
                       else ""))
            for row in taken["udp"]:
                lines.append(
                    f"  UDP {row['source']}:{row['source_port']} > {row['destination']}:"
                    f"{row['destination_port']}  {row['datagrams']} datagrams, "
                    f"{row['gaps']} missing, {row['reordered']} reordered"
                    + (f", jitter {row['jitter_ms']:.3f} ms" if row["jitter_ms"] is not None
                       else "")
                    + (f", one-way {row['one_way_avg_ms']:.2f} ms"
                       if row["one_way_avg_ms"] is not None else ""))
    if lines:
        lines.append("retransmitted: Wireshark's tcp.analysis.retransmission; resent: every "
                     "data segment below the highest sequence seen")
    return "\n".join(lines)
