"""Tables of a native test: the classic columns, then what the test measured beyond them
(kernel TCP statistics with -e, jitter and loss for UDP), and both ends' view at the end."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..delays import ARRIVALS, REPORTED_PERCENTILES, DelayAccount, pdf_line
from ..description.transports import Transport
from ..stats import RttSummary, lost_percent
from ..transport import udp
from ..units import (
    DISPLAY_UNITS,
    format_amount,
    format_iperf3_amount,
    format_iperf3_rate,
    format_mbps,
)
from .classic import COLUMN, INTERVAL_RULE

SUM_LABEL = "SUM"


def header(transport: Transport, extended: bool) -> str:
    cells = ["ID", "Interval", "Transfer", "Bandwidth"]
    if transport.datagrams:
        cells += ["Jitter", "Lost/Total", "Datagrams"]
    elif extended:
        cells += ["Retr", "Cwnd", "RTT"]
    return _line(cells)


def _where_lost(lost: int, dropped: int | None) -> str:
    """Where the datagrams were lost, when the receiver's socket said how many it dropped:
    in the network, or by the receiving host (its socket buffer full)."""
    if not lost or dropped is None:
        return ""
    dropped = min(dropped, lost)
    return f": {lost - dropped} in the network, {dropped} by the receiving host"


def row(label: str, start: float, end: float, values: dict[str, Any], unit: str,
        transport: Transport, extended: bool, note: str = "") -> str:
    """One line for one stream (or the sum) over [start, end]. `values` holds the keys of a
    result entry: bytes, and where known packets, lost, jitter_ms, retransmits, snd_cwnd or
    max_snd_cwnd, rtt_us or mean_rtt_us."""
    num_bytes = values.get("bytes", 0)
    cells = [label, f"{start:.1f} - {end:.1f}", *_amount_and_rate(num_bytes, end - start, unit)]
    if transport.datagrams:
        if values.get("lost") is not None and values.get("packets") is not None:
            lost, packets = values["lost"], values["packets"]
            reordered = values.get("out_of_order") or 0
            forged = values.get("forged") or 0
            cells += [f"{values.get('jitter_ms', 0.0):.3f} ms",
                      f"{lost}/{packets} ({lost_percent(lost, packets):.2g}%"
                      + _where_lost(lost, values.get("dropped")) + ")"
                      + (f", {reordered} out of order" if reordered else "")
                      + (f", {forged} forged (not counted)" if forged else ""), ""]
        else:
            cells += ["", "", str(values.get("packets", ""))]
    elif extended:
        cwnd = values.get("snd_cwnd", values.get("max_snd_cwnd"))
        rtt = values.get("rtt_us", values.get("mean_rtt_us"))
        cells += [_optional(values.get("retransmits")),
                  format_amount(cwnd, "KB") if cwnd is not None else "",
                  f"{rtt / 1000:.2f} ms" if rtt is not None else ""]
    if values.get("delays") is not None:
        cells.append(delay_cell(values["delays"]))
    if note:
        cells.append(note)
    return _line(cells).rstrip()


def _amount_and_rate(num_bytes: int, seconds: float, unit: str) -> list[str]:
    """Classic units (-f B, KB, MB) keep the classic columns; otherwise iperf3's: bytes
    scaled by 1024, and the rate in -f's unit or scaled."""
    if unit in DISPLAY_UNITS:
        return [format_amount(num_bytes, unit), format_mbps(num_bytes, seconds)]
    return [format_iperf3_amount(num_bytes), format_iperf3_rate(num_bytes, seconds, unit)]


def _optional(value) -> str:
    return "" if value is None else str(value)


def _line(cells: list[str]) -> str:
    widths = [COLUMN] * 4 + [12] * (len(cells) - 4)
    padded = (f"{cell:<{width}}" for cell, width in zip(cells[:-1], widths, strict=False))
    return "".join(padded) + cells[-1]


def interval_printer(every: float | None, streams, transport: Transport, unit: str,
                     say: Callable[..., None]) -> Callable[[list[Any]], None] | None:
    """A server's -i (`every`, None without): each interval's rows as it closes (the header
    before the first)."""
    if every is None:
        return None
    by_number = {s.number: s for s in streams}
    printed: list[bool] = []

    def rows(records: list[Any]) -> None:
        lines = [] if printed else [header(transport, False)]
        printed.append(True)
        for record in records:
            stream = by_number[record.stream]
            values = {"bytes": record.num_bytes, "packets": record.packets,
                      "lost": record.lost, "jitter_ms": record.jitter_ms,
                      "out_of_order": record.out_of_order, "delays": None}
            lines.append(row(stream.label, max(0.0, record.start), record.end, values, unit,
                             transport, False, stream.role))
        say(*lines)

    return rows


def test_report(title: str, transport: Transport, streams, results: list[dict[str, Any]],
                unit: str) -> list[str]:
    """What a server prints when a test ends: its own view of every stream."""
    by_number = {s.number: s for s in streams}
    tcp = not transport.datagrams
    lines = [title, header(transport, tcp)]
    for entry in results:
        stream = by_number[entry["stream"]]
        lines.append(row(stream.label, 0.0, entry["seconds"], {**entry, "delays": None}, unit,
                         transport, tcp, stream.role))
        lines += delay_lines(stream.label, stream.role, entry, transport, None)
    return lines


def rule() -> str:
    return INTERVAL_RULE


def cpu_line(cpu: dict[str, float], we_send: bool) -> str:
    """iperf3's -V line: both ends' CPU, named by their part in the test."""
    local, remote = ("local/sender", "remote/receiver") if we_send else (
        "local/receiver", "remote/sender")
    line = (f"CPU Utilization: {local} {cpu['host_total']:.1f}% ({cpu['host_user']:.1f}%u/"
            f"{cpu['host_system']:.1f}%s)")
    if "remote_total" in cpu:
        line += (f", {remote} {cpu['remote_total']:.1f}% ({cpu['remote_user']:.1f}%u/"
                 f"{cpu['remote_system']:.1f}%s)")
    return line


def receive_buffer_line(actual: int, window: int | None) -> str:
    """-V: the receive buffer a UDP socket of ours got, and why that size."""
    asked = (f"-w {window}" if window else
             f"{udp.FORCED_RECEIVE_BUFFER >> 20} MB past net.core.rmem_max where the kernel "
             f"lets us (root), else up to {udp.RECEIVE_BUFFER >> 20} MB")
    return (f"UDP receive buffer: {actual} bytes a socket (the kernel's count, double what "
            f"was asked: {asked})")


def latency_lines(idle: RttSummary | None, loaded: RttSummary | None) -> list[str]:
    if idle is None and loaded is None:
        return []
    parts = []
    if idle is not None:
        parts.append(f"idle {idle.p50:.3f} ms")
    if loaded is not None:
        parts.append(f"under load p50 {loaded.p50:.3f} ms, p90 {loaded.p90:.3f} ms, "
                     f"p99 {loaded.p99:.3f} ms ({loaded.count} probes)")
        parts.append(f"responsiveness {loaded.rpm:.0f} RPM")
    return ["RTT " + "; ".join(parts)]


def delay_cell(account: DelayAccount | None) -> str:
    """An interval's one-way delays, as iperf2's Latency column: avg/min/max/stdev."""
    if account is None or account.count == 0:
        return ""
    return (f"latency {account.mean * 1e3:.3f}/{account.minimum * 1e3:.3f}/"
            f"{account.maximum * 1e3:.3f}/{account.stdev * 1e3:.3f} ms")


def delay_lines(label: str, role: str, view: dict[str, Any], transport: Transport,
                histograms: tuple[float, float] | None) -> list[str]:
    """A receiver's one-way delays and frames at the end of a test (iperf2's --trip-times,
    --isochronous), with iperf2's PDF lines (confidence bins at `histograms`' percentiles)
    when --histograms asked for them."""
    lines = []
    path = view.get("delays")
    what = "datagrams" if transport.datagrams else \
        f"writes, path: {ARRIVALS[getattr(path, 'arrival', None) or 'read']}"
    for name, kind, title in (("delays", "T8(f)", f"one-way delay of {what}"),
                              ("write_delays", "T8(f)", "write-to-read delay (application: "
                                                        "the sender's buffer included)"),
                              ("frame_delays", "F8(f)", "frame latency")):
        account = view.get(name)
        if account is None or account.count == 0:
            continue
        p50, p90, p99 = (account.percentile(p) * 1e3 for p in REPORTED_PERCENTILES)
        lines.append(f"{label:<{COLUMN}}{title} ({role}): avg/min/max/stdev "
                     f"{account.mean * 1e3:.3f}/{account.minimum * 1e3:.3f}/"
                     f"{account.maximum * 1e3:.3f}/{account.stdev * 1e3:.3f} ms, p50/p90/p99 "
                     f"{p50:.3f}/{p90:.3f}/{p99:.3f} ms ({account.count})")
        if histograms is not None:
            lines.append(f"{label:<{COLUMN}}{pdf_line(account, kind, histograms)}")
    if "frames" in view:
        counts = [f"{view['frames']} frames"]
        if "frames_lost" in view:
            counts.append(f"{view['frames_lost']} lost")
        if "frames_slipped" in view:
            counts.append(f"{view['frames_slipped']} slipped")
        lines.append(f"{label:<{COLUMN}}isochronous ({role}): {', '.join(counts)}")
    if view.get("ce_marked") is not None:
        arrived = (view.get("packets") or 0) - (view.get("lost") or 0)
        share = f" ({view['ce_marked'] / arrived * 100:.2f}%)" if arrived > 0 else ""
        lines.append(f"{label:<{COLUMN}}L4S ({role}): {view['ce_marked']} of {arrived} "
                     f"datagrams that arrived were CE-marked{share}")
    return lines


def rtt_probe_line(number: int, rtt_ms: float) -> str:
    return f"probe {number}: time={rtt_ms:.3f} ms"


def rtt_summary_lines(host: str, sent: int, summary: RttSummary | None) -> list[str]:
    received = summary.count if summary else 0
    loss = 100.0 * (sent - received) / sent if sent else 0.0
    lines = [f"--- {host} RTT statistics ---",
             f"{sent} probes sent, {received} answered, {loss:.0f}% lost"]
    if summary is not None:
        lines.append(f"rtt min/avg/max/mdev = {summary.minimum:.3f}/{summary.average:.3f}/"
                     f"{summary.maximum:.3f}/{summary.mdev:.3f} ms; p50/p90/p99 = "
                     f"{summary.p50:.3f}/{summary.p90:.3f}/{summary.p99:.3f} ms")
    return lines
