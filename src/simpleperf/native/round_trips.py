"""`simpleperf -c HOST --rtt`: round-trip times to a simpleperf server, printed as ping
prints them, over TCP or (with -u) UDP echo; with -J one document at the end."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

from ..description.client_options import ClientOptions
from ..description.transports import TCP, UDP
from ..engine.latency import SECRET_HINT, EchoProber
from ..report import native as table
from ..report.json import rtt_block
from ..stats import RttSummary, summarise_rtt


def run(options: ClientOptions, out: Callable[[str], None]) -> None:
    transport = UDP if options.test.transport.datagrams else TCP
    prober = EchoProber(options.host, options.port, transport, options.family, options.secret)
    count = options.count or max(1, round(options.seconds / options.rtt_interval))
    if not options.json:
        out(f"RTT to {options.host} port {options.port} over {transport.name.upper()} echo, "
            f"{count} probes every {options.rtt_interval:g} s")

    def show(number: int, rtt: float | None) -> None:
        if not options.json:  # -J: one document at the end
            out(table.rtt_probe_line(number, rtt) if rtt is not None
                else f"probe {number}: no answer")
    interrupted = False
    try:
        prober.run(count, options.rtt_interval, show, threading.Event())
    except KeyboardInterrupt:
        interrupted = True
    finally:
        prober.close()
    summary = summarise_rtt(prober.samples_ms)
    if options.json:
        out(json.dumps(_document(options, prober, count, transport.name, summary, interrupted),
                       indent=4))
        return
    for line in table.rtt_summary_lines(options.host, prober.sent, summary):
        out(line)
    if prober.sent and not prober.samples_ms and options.secret is None:
        out("no probe was answered" + SECRET_HINT)


def _document(options: ClientOptions, prober: EchoProber, count: int, protocol: str,
              summary: RttSummary | None, interrupted: bool) -> dict:
    """-J: {"start": what was asked, "end": {"sent", "answered", "rtt": the summary as a
    test's latency blocks give it, each answered probe's round trip in "samples_ms"}}."""
    document: dict = {
        "start": {"connecting_to": {"host": options.host, "port": options.port},
                  "rtt": {"protocol": protocol, "count": count,
                          "interval": options.rtt_interval}},
        "end": {"sent": prober.sent, "answered": len(prober.samples_ms),
                "rtt": rtt_block(summary)}}
    if interrupted:
        document["error"] = "interrupted"
    return document
