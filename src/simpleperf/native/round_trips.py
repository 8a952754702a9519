"""`simpleperf -c HOST --rtt`: round-trip times to a simpleperf server, printed as ping
prints them, over TCP or (with -u) UDP echo."""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..engine.latency import SECRET_HINT, EchoProber
from ..options import ClientOptions
from ..report import native as table
from ..stats import summarise_rtt


def run(options: ClientOptions, out: Callable[[str], None]) -> None:
    protocol = "udp" if options.udp else "tcp"
    prober = EchoProber(options.host, options.port, protocol, options.family, options.secret)
    count = options.count or max(1, round(options.duration / options.rtt_interval))
    out(f"RTT to {options.host} port {options.port} over {protocol.upper()} echo, "
        f"{count} probes every {options.rtt_interval:g} s")

    def show(number: int, rtt: float | None) -> None:
        out(table.rtt_probe_line(number, rtt) if rtt is not None
            else f"probe {number}: no answer")
    try:
        prober.run(count, options.rtt_interval, show, threading.Event())
    except KeyboardInterrupt:
        pass
    finally:
        prober.close()
    for line in table.rtt_summary_lines(options.host, prober.sent,
                                        summarise_rtt(prober.samples_ms)):
        out(line)
    if prober.sent and not prober.samples_ms and options.secret is None:
        out("no probe was answered" + SECRET_HINT)
