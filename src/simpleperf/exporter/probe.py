"""One probe: the simpleperf client run against a target as a module says, its JSON read into
readings. The exporter sits on top of the tool as the lab does: it runs the tool's client and
reads its -J document, so a probe is exactly what `simpleperf -c ... -J` measures.

`command` and `readings` are pure; `run` starts the client (its own process: a probe that
overruns its time is killed whole, and the exporter's threads and memory stay flat).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..report.document import BIDIR_REVERSE, receiver_delays, sums
from .modules import HTTPS_PORT, RTT_INTERVAL, Module

IPERF3_PORT = 5201
SETUP_SECONDS = 1.5  # what a test takes beyond its duration (connect, exchange, results)
# RTT and one-way delay histograms: smokeping_prober's exponential buckets, 50 us doubling
# twenty times (to 26 s).
BUCKETS = tuple(50e-6 * 2 ** i for i in range(20))


class ProbeFailed(Exception):
    """The probe did not give a whole result; str() says why in one line."""


@dataclass(frozen=True)
class Histogram:
    buckets: tuple[int, ...]  # cumulative counts at each of BUCKETS
    count: int
    total: float  # sum of the values, seconds

    @classmethod
    def counted(cls, at: dict[float, int], count: int, total: float) -> Histogram:
        """From how many values lie at each point (`count` may hold more, above every
        bucket: they are in +Inf only)."""
        return cls(tuple(sum(n for value, n in at.items() if value <= edge)
                         for edge in BUCKETS), count, total)

    @classmethod
    def of(cls, values: list[float]) -> Histogram:
        return cls.counted(dict(Counter(values)), len(values), sum(values))


@dataclass
class Readings:
    """A probe's figures: gauges and histograms by (metric, its labels beyond target and
    module as sorted pairs)."""

    gauges: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)
    histograms: dict[tuple[str, tuple[tuple[str, str], ...]], Histogram] = \
        field(default_factory=dict)
    server_wait: float = 0.0  # seconds a busy server's queue held the test (--queue)

    def gauge(self, name: str, value: Any, **labels: str) -> None:
        if isinstance(value, (int, float)) and not isinstance(value, bool) \
                and math.isfinite(value):
            self.gauges[(name, tuple(sorted(labels.items())))] = float(value)

    def histogram(self, name: str, histogram: Histogram | None, **labels: str) -> None:
        if histogram is not None and histogram.count:
            self.histograms[(name, tuple(sorted(labels.items())))] = histogram


def command(module: Module, host: str, port: int | None) -> list[str]:
    """The client's command line for one probe of `module` at host:port (an http server's:
    its configuration's URL)."""
    if module.server == "http":
        name = f"[{host}]" if ":" in host else host
        url = f"https://{name}:{port or module.port or HTTPS_PORT}{module.path}"
        return [sys.executable, "-m", "simpleperf", "-c", url, "-J", *_rpm_flags(module),
                *(["--insecure"] if module.insecure else [])]
    port = port or module.port or (IPERF3_PORT if module.server == "iperf3" else None)
    line = [sys.executable, "-m", "simpleperf", "-c", host, "-J"]
    if port is not None:
        line += ["-p", str(port)]
    return line + RUNS[module.prober][0](module)


def _rtt_flags(module: Module) -> list[str]:
    count = max(1, round(module.duration / RTT_INTERVAL))
    return ["--rtt", "--count", str(count), "--rtt-interval", str(RTT_INTERVAL)]


def _rpm_flags(module: Module) -> list[str]:
    return ["-t", f"{module.duration:g}", "--rpm"] + (
        ["-R"] if module.direction == "reverse" else [])


def _transfer_flags(module: Module) -> list[str]:
    line = ["-t", f"{module.duration:g}"] + (["-u"] if module.transport.datagrams else [])
    if module.rate is not None:
        line += ["-b", f"{module.rate:.0f}"]
    if module.parallel > 1:
        line += ["-P", str(module.parallel)]
    line += {"reverse": ["-R"], "bidir": ["--bidir"]}.get(module.direction, [])
    if module.length is not None:
        line += ["-l", str(module.length)]
    if module.congestion is not None:
        line += ["-C", module.congestion]
    if module.dscp is not None:
        line += ["--dscp", str(module.dscp)]
    if module.trip_times:
        line += ["--trip-times"]
    if module.server == "iperf3":
        line += ["--iperf3", "--no-latency"]
    return line


def seconds_needed(module: Module) -> float:
    return module.duration + SETUP_SECONDS


class Clients:
    """The probes' client processes running now, so that an exporter that stops ends them
    (each by its own process id) instead of leaving them behind."""

    def __init__(self) -> None:
        self._running: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self.closed = False

    def start(self, line: list[str]) -> subprocess.Popen:
        with self._lock:
            if self.closed:
                raise ProbeFailed("the exporter is stopping")
            process = subprocess.Popen(line, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
            self._running.add(process)
            return process

    def done(self, process: subprocess.Popen) -> None:
        with self._lock:
            self._running.discard(process)

    def close(self) -> None:
        with self._lock:
            self.closed = True
            running = list(self._running)
        for process in running:
            process.kill()
            process.wait()


def run(module: Module, host: str, port: int | None, budget: float,
        clients: Clients | None = None) -> dict[str, Any]:
    """The client's -J document, within `budget` seconds; ProbeFailed otherwise."""
    clients = clients or Clients()
    try:
        process = clients.start(command(module, host, port))
    except OSError as error:
        raise ProbeFailed(f"cannot run the client: {error.strerror}") from None
    try:
        out, err = process.communicate(timeout=budget)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise ProbeFailed(f"the test did not end within {budget:.1f} s") from None
    finally:
        clients.done(process)
    if clients.closed:
        raise ProbeFailed("the exporter is stopping")
    try:
        document = json.loads(out) if out.strip() else None
    except ValueError:
        document = None
    said = (err.strip().splitlines() or [""])[-1].removeprefix("simpleperf: error: ")
    if process.returncode != 0 or not isinstance(document, dict) or document.get("error"):
        reason = said or (document or {}).get("error") or f"exit status {process.returncode}"
        raise ProbeFailed(str(reason)[:300])
    return document


def readings(module: Module, document: dict[str, Any]) -> Readings:
    """The figures of a client's -J document (pure). ProbeFailed when it lacks what the
    module's prober gives (a half result is no result)."""
    found = Readings()
    queued = (document.get("start") or {}).get("queued_seconds")
    if isinstance(queued, (int, float)) and queued > 0:
        found.server_wait = float(queued)
    end = document.get("end")
    if not isinstance(end, dict):
        raise ProbeFailed("the client's document has no end")
    try:
        RUNS[module.prober][1](found, module, end)
    except (KeyError, TypeError, ValueError) as error:
        raise ProbeFailed(f"the client's document lacks {error}") from None
    return found


def _transfer(found: Readings, module: Module, end: dict[str, Any]) -> None:
    protocol = module.transport.name
    for direction in module.directions():
        totals = sums(end, BIDIR_REVERSE if direction == "reverse"
                      and module.direction == "bidir" else "")
        labels = {"direction": direction, "protocol": protocol}
        found.gauge("simpleperf_goodput_bits_per_second", totals.received_bps, **labels)
        found.gauge("simpleperf_received_bytes", totals.received_bytes, **labels)
        found.gauge("simpleperf_sent_bytes", totals.sent_bytes, **labels)
        if not module.transport.datagrams:
            found.gauge("simpleperf_tcp_retransmits", totals.retransmits, **labels)
        else:
            if totals.jitter_ms is None or totals.lost_percent is None:
                raise ProbeFailed("the client's document lacks its datagrams' account")
            found.gauge("simpleperf_udp_jitter_seconds", totals.jitter_ms / 1e3, **labels)
            found.gauge("simpleperf_udp_lost_packets", totals.lost, **labels)
            found.gauge("simpleperf_udp_packets", totals.packets, **labels)
            found.gauge("simpleperf_udp_loss_ratio", totals.lost_percent / 100, **labels)
        found.histogram("simpleperf_one_way_delay_seconds",
                        _one_way(end, direction, module.direction), **labels)
    congestion = end.get("sender_tcp_congestion")
    if not module.transport.datagrams and isinstance(congestion, str):
        found.gauge("simpleperf_tcp_congestion_info", 1, congestion=congestion)
    latency = end.get("latency") or {}
    for load in ("idle", "loaded"):
        block = latency.get(load)
        if isinstance(block, dict):
            found.histogram("simpleperf_rtt_seconds", _samples(block), load=load,
                            protocol="tcp")
            found.gauge("simpleperf_rpm", block.get("rpm"), load=load)


def _one_way(end: dict[str, Any], direction: str, asked: str) -> Histogram | None:
    """The one-way delays the receiving end counted (iperf2's --trip-times), from the
    histograms of the direction's streams (with --bidir the first half of them are the
    client's, as iperf3 numbers them): each bin counted at its upper edge."""
    streams = list(end.get("streams", []))
    if asked == "bidir":
        half = len(streams) // 2
        streams = streams[:half] if direction == "forward" else streams[half:]
    at: dict[float, int] = {}  # a bin's upper edge (seconds): how many delays in it
    total, count = 0.0, 0
    for delays in receiver_delays(streams):
        if "histogram" not in delays:
            continue
        width = delays["histogram"]["bin_width_ms"] / 1e3
        for index, number in delays["histogram"]["bins"]:
            at[index * width] = at.get(index * width, 0) + int(number)
        at[0.0] = at.get(0.0, 0) + int(delays["histogram"].get("below", 0))
        total += delays["mean_ms"] / 1e3 * delays["count"]
        count += delays["count"]
    if not count:
        return None
    return Histogram.counted(at, count, total)


def _samples(block: dict[str, Any]) -> Histogram:
    return Histogram.of([value / 1e3 for value in block.get("samples_ms", [])])


def _rtt(found: Readings, module: Module, end: dict[str, Any]) -> None:
    found.gauge("simpleperf_rtt_probes_sent", end["sent"])
    found.gauge("simpleperf_rtt_probes_answered", end["answered"])
    block = end.get("rtt")
    if not isinstance(block, dict):
        raise ProbeFailed("no probe was answered")
    found.histogram("simpleperf_rtt_seconds", _samples(block), load="idle", protocol="tcp")
    found.gauge("simpleperf_rpm", block.get("rpm"), load="idle")


def _rpm(found: Readings, module: Module, end: dict[str, Any]) -> None:
    result = end["responsiveness"]
    found.gauge("simpleperf_responsiveness_rpm", result["rpm"])
    for load, key in (("idle", "foreign_rpm"), ("loaded", "loaded_rpm")):
        found.gauge("simpleperf_rpm", result.get(key), load=load)
    found.gauge("simpleperf_goodput_bits_per_second", result["goodput"],
                direction="forward", protocol="tcp")


# Each prober's flags for the client and its reader of the client's document, by name
# (modules.PROBER_ROWS says what each is)
RUNS: dict[str, tuple[Callable[[Module], list[str]],
                       Callable[[Readings, Module, dict[str, Any]], None]]] = {
    "tcp": (_transfer_flags, _transfer),
    "udp": (_transfer_flags, _transfer),
    "rtt": (_rtt_flags, _rtt),
    "rpm": (_rpm_flags, _rpm),
}
