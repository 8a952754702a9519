"""What a client prints for a test in which both ends measure (native or iperf3 server):
the banner, interval rows or JSON intervals as they close, then both ends' view."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..delays import pdf_line
from ..description.client_options import ClientOptions
from ..description.testspec import TestSpec
from ..engine.measurement import Measurement
from ..engine.records import IntervalRecord, Stream
from ..stats import RttSummary
from . import classic as classic_table
from . import csv as csv_report
from . import json as json_report
from . import native as table


class TestOutput:
    def __init__(self, options: ClientOptions, spec: TestSpec, streams: list[Stream],
                 out: Callable[[str], None], protocol_name: str, cookie: str = "") -> None:
        self.options = options
        self.cookie = cookie  # what names the test on the server (iperf3's cookie)
        # Read now: by the end of the test, when -J writes it, the sockets are closed.
        self.sockets = json_report.socket_section(streams[0].sock if streams else None,
                                                  options.test.window)
        self.udp_receive_buffer = json_report.udp_receive_buffer(streams)  # for -V
        self.spec = spec
        self.streams = streams
        self.out = out
        self.protocol_name = protocol_name
        # -y C: iperf2's rows instead of text
        self.csv = csv_report.CsvRows(streams, options.host, options.port, spec.transport,
                                      spec.parallel, out) if options.csv else None
        self.text = not (options.json or options.json_stream or options.csv)
        self.json_intervals: list[dict[str, Any]] = []
        self.server_output: str | None = None  # an iperf3 server's own text (asked for)
        self.started_wall = time.time()
        self.queued: float | None = None  # seconds the server kept the test waiting (native)

    def start(self) -> None:
        options = self.options
        if self.text:
            left_out = options.report_exclude  # -x: iperf2's kinds of report
            if "S" not in left_out:
                self.out(classic_table.client_banner(options.host, options.port))
                if options.print_mss and "tcp_mss_default" in self.sockets:
                    self.out(_mss_line(options, self.sockets["tcp_mss_default"]))
            for stream in self.streams:
                if "C" not in left_out:
                    self.out(f"Client {stream.label} connected with {options.host} port "
                             f"{options.port} ({stream.protocol.upper()}, {stream.role})")
            if options.rows_every is not None and "D" not in left_out:
                self.out(table.header(self.spec.transport, options.extended))
        elif options.json_stream:
            start = self._start_section()
            if options.extra_data is not None:
                start["extra_data"] = options.extra_data
            self.out(json.dumps({"event": "start", "data": start}))

    def interval(self, records: list[IntervalRecord]) -> None:
        entry = json_report.interval_entry(records, self.spec.transport,
                                           self.spec.client_sends, True)
        self.json_intervals.append(entry)
        if self.options.json_stream:
            self.out(json.dumps({"event": "interval", "data": entry}))
        if self.csv is not None and self.options.interval:  # as iperf2's: only with -i
            self.csv.interval(records, entry)
        if (not self.text or self.options.rows_every is None
                or "D" in self.options.report_exclude):
            return
        by_number = {s.number: s for s in self.streams}
        bidir = self.spec.direction == "bidir"
        sum_only = self.options.sum_only  # --sum-only (iperf2's): the SUM rows alone
        for record in records if not sum_only else []:
            stream = by_number[record.stream]
            values = {"bytes": record.num_bytes, "packets": record.packets,
                      "lost": record.lost, "jitter_ms": record.jitter_ms,
                      "out_of_order": record.out_of_order,
                      "retransmits": record.retransmits, "snd_cwnd": record.snd_cwnd,
                      "rtt_us": record.rtt_us, "delays": record.delays}
            notes = [n for n in ("omitted" if record.omitted else "",
                                 ("TX" if stream.sending else "RX") if bidir else "") if n]
            self.out(table.row(stream.label, max(0.0, record.start), record.end, values,
                               self.options.unit, self.spec.transport, self.options.extended,
                               " ".join(notes)))
            if self.options.histograms and record.delays is not None and record.delays.count:
                self.out(f"{stream.label:<{table.COLUMN}}"
                         f"{pdf_line(record.delays, 'T8', self.options.histogram_ci)}")
        for name in ("sum", "sum_bidir_reverse"):
            if name in entry and (self.spec.parallel > 1 or sum_only):
                total = entry[name]
                self.out(table.row(table.SUM_LABEL, max(0.0, total["start"]), total["end"],
                                   _sum_values(total), self.options.unit, self.spec.transport,
                                   False))

    def end(self, measurement: Measurement, remote: dict[int, dict[str, Any]],
            idle: RttSummary | None, loaded: RttSummary | None, congestion: str | None,
            interrupted: bool = False, peer_intervals: Sequence[IntervalRecord] = (),
            remote_cpu: tuple[float, float] | None = None,
            peer_congestion: str | None = None) -> None:
        """`remote`: the server's view, result entries by our stream number;
        `peer_intervals`: the server's own interval rows, when it sent them; `remote_cpu`,
        `peer_congestion`: the server's user and system CPU percent and its TCP's
        congestion control, when it said."""
        local = {entry["stream"]: entry for entry in measurement.local_results()}
        numbers = [s.number for s in self.streams]
        end = json_report.end_section(self.spec.transport, numbers, self.spec.client_sends,
                                      local, remote)
        end["latency"] = json_report.latency_section(idle, loaded)
        end["cpu_utilization_percent"] = json_report.cpu_section(measurement.cpu_percent(),
                                                                 remote_cpu)
        if not self.spec.transport.datagrams:
            ours_send = self.spec.direction != "reverse"
            end["sender_tcp_congestion"] = congestion if ours_send else peer_congestion
            end["receiver_tcp_congestion"] = peer_congestion if ours_send else congestion
        end["measurement_start"] = _measurement_start(measurement.start + self.spec.omit)
        if self.csv is not None:
            self.csv.end(end)
            return
        if not self.text:
            document = {"start": self._start_section(), "intervals": self.json_intervals,
                        "end": end}
            if peer_intervals:  # new in simpleperf: the server's own intervals
                document["server_intervals"] = self._peer_interval_entries(peer_intervals)
            if interrupted:
                document["error"] = "interrupted"
            if self.options.title:
                document["title"] = self.options.title
            if self.options.extra_data is not None:
                document["extra_data"] = self.options.extra_data
            if self.server_output is not None:
                document["server_output_text"] = self.server_output
            if not self.options.json:
                self.out(json.dumps({"event": "end", "data": end}))
            if self.options.json or self.options.json_stream_full:
                self.out(json.dumps(document, indent=2))
            return
        self._summary(local, remote, end)
        if self.server_output is not None and "V" not in self.options.report_exclude:
            self.out("\nServer output:\n" + self.server_output.rstrip("\n"))  # as iperf3
        for line in table.latency_lines(idle, loaded):
            self.out(line)
        if self.options.verbose:
            for line in _verbose_lines(self, end, local):
                self.out(line)

    def _start_section(self) -> dict[str, Any]:
        options = self.options
        return {
            **json_report.identity(self.started_wall),
            "connecting_to": {"host": options.host, "port": options.port},
            "cookie": self.cookie,
            **self.sockets,
            "target_bitrate": self.spec.rate,
            "connected": [_connected(s, options) for s in self.streams],
            "test_start": json_report.test_start(self.spec),
            "protocol": self.protocol_name,
            **({} if self.queued is None else {"queued_seconds": self.queued}),
        }

    def _peer_interval_entries(self, peer_intervals: Sequence[IntervalRecord]
                               ) -> list[dict[str, Any]]:
        return json_report.interval_entries(peer_intervals, self.spec.transport,
                                            self.spec.client_sends, False)

    def _summary(self, local: dict[int, dict[str, Any]], remote: dict[int, dict[str, Any]],
                 end: dict[str, Any]) -> None:
        options = self.options
        tcp = not self.spec.transport.datagrams
        left_out = options.report_exclude  # -x: D our rows, V the server's

        def out(text: str, ours: bool = True) -> None:
            if ("D" if ours else "V") not in left_out:
                self.out(text)

        if left_out >= {"D", "V"}:
            return
        self.out(table.rule())
        self.out(table.header(self.spec.transport, options.extended or tcp))
        for stream in self.streams if not options.sum_only else []:
            ours, theirs = local.get(stream.number, {}), remote.get(stream.number)
            sender_view, receiver_view = (ours, theirs) if stream.sending else (theirs, ours)
            for view, role in ((sender_view, "sender"), (receiver_view, "receiver")):
                mine = (role == "sender") == stream.sending
                if view is None:
                    out(table.row(stream.label, 0.0, 0.0, {}, options.unit, self.spec.transport,
                                  False, f"{role} (no report)"), mine)
                    continue
                paced = view.get("paced") if role == "sender" else None
                out(table.row(stream.label, 0.0, view.get("seconds", 0.0),
                              _role_values(view, role), options.unit, self.spec.transport,
                              options.extended or tcp, role + (
                                  f", slowed {paced}x to what the receiver read" if paced
                                  else "")), mine)
        for stream in self.streams if not options.sum_only else []:
            ours, theirs = local.get(stream.number, {}), remote.get(stream.number)
            for view, role in ((ours, stream.role), (theirs or {}, "receiver" if stream.sending
                                                      else "sender")):
                for line in table.delay_lines(stream.label, role, view, self.spec.transport,
                                              options.histogram_ci if options.histograms
                                              else None):
                    out(line, view is ours)
        if self.spec.parallel > 1 or self.spec.direction == "bidir" or options.sum_only:
            sends = self.spec.direction != "reverse"  # sum_sent is ours
            for key, role, mine in (("sum_sent", "sender", sends),
                                    ("sum_received", "receiver", not sends),
                                    ("sum_sent_bidir_reverse", "sender, reverse", False),
                                    ("sum_received_bidir_reverse", "receiver, reverse", True)):
                total = end.get(key)
                if total and total.get("seconds"):  # none: no stream of it was reported
                    out(table.row(table.SUM_LABEL, 0.0, total["seconds"], _sum_values(total),
                                  options.unit, self.spec.transport, False, role), mine)


def _mss_line(options: ClientOptions, segment: int) -> str:
    """-m/--print_mss: iperf2's line, the size asked with -M, else the connection's."""
    if options.test.mss:
        return f"MSS req size {options.test.mss} bytes (per TCP_MAXSEG)"
    return f"MSS size {segment} bytes"


def _role_values(view: dict[str, Any], role: str) -> dict[str, Any]:
    values = dict(view)
    values.pop("delays", None)  # the delays' own lines follow the table
    if role == "receiver":
        values.pop("retransmits", None)
        values.pop("max_snd_cwnd", None)
    return values


def _sum_values(total: dict[str, Any]) -> dict[str, Any]:
    return {"bytes": total["bytes"], "packets": total.get("packets"),
            "lost": total.get("lost_packets"),
            "dropped": total.get("receiver_dropped_packets"), "jitter_ms": total.get("jitter_ms"),
            "out_of_order": total.get("out_of_order"), "forged": total.get("forged_packets"),
            "retransmits": total.get("retransmits")}


def _connected(stream: Stream, options: ClientOptions) -> dict[str, Any]:
    host, port = stream.label.rsplit(":", 1)
    return {"socket": stream.number, "local_host": host.strip("[]"), "local_port": int(port),
            "remote_host": options.host, "remote_port": options.port}


def _measurement_start(monotonic: float) -> dict[str, Any]:
    """When the measured part began: on CLOCK_MONOTONIC, which every process and network
    namespace of a machine shares (to line up tests run at once), and as Unix time."""
    return {"monotonic": round(monotonic, 6),
            "unix": round(time.time() - (time.monotonic() - monotonic), 6)}


def _verbose_lines(output: TestOutput, end: dict[str, Any], local: dict[int, dict[str, Any]]
                   ) -> list[str]:
    """-V's lines after the summary: both ends' CPU, the buffer a UDP socket we receive on
    got, and with -m each connection's paths."""
    lines = [table.cpu_line(end["cpu_utilization_percent"],
                            output.spec.direction != "reverse")]
    if output.udp_receive_buffer is not None:
        lines.append(table.receive_buffer_line(output.udp_receive_buffer,
                                               output.options.test.window))
    for stream in output.streams:
        subflows = local.get(stream.number, {}).get("mptcp_subflows")
        if subflows is not None:
            lines.append(f"MPTCP {stream.label}: " + (
                f"{subflows} subflow{'s' if subflows != 1 else ''}" if subflows
                else "fell back to plain TCP (the server did not answer in MPTCP)"))
    return lines
