"""Run the steps of an experiment on a lab that is up, and collect what every flow measured.

Servers start first; then every client of a step is handed the same start instant (see
launch.py) and the spread of their real starts is measured. A flow that fails is recorded
with its error and the run goes on. Every process started here is recorded in the lab's
ownership record, so even a killed run leaves nothing the next `down` cannot remove.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

from ...stats import jain_index
from ...transport import tcp
from ..model import theory
from ..model.experiment import Flow, Step, Timing
from ..model.topology import Topology, TopologyError
from ..net import ownership
from .launch import START_MARK

PYTHON = sys.executable
FIRST_PORT = 15001
TCP_GOODPUT = 1448 / 1514  # payload share of a full-size frame with TCP timestamps
PROBE_TRIAL_SECONDS = 2.0
START_DELAY = 1.0  # seconds between launching the clients and their common start
SPREAD_WARNING = 0.010
# Congestion controls whose throughput falls with loss as Mathis et al. describe.
LOSS_BASED = {"reno", "cubic", "bic", "htcp", "highspeed", "scalable", "westwood", "hybla",
              "illinois"}


def system_congestion_control() -> str:
    """What TCP uses unless told otherwise; new network namespaces inherit it."""
    return tcp.system_congestion() or "unknown"
ROW = re.compile(r"^(\S+:\d+)\s+(\d+\.\d) - (\d+\.\d)\s+(\d+) B\s+([\d.]+) Mbps")


@dataclass
class FlowOutcome:
    flow: Flow
    address: str
    ok: bool = False
    error: str | None = None
    started: float | None = None  # monotonic, when the client really started
    throughput: float | None = None  # receiver side, bits/s
    sender_throughput: float | None = None
    connection_throughputs: list[float] = field(default_factory=list)  # receiver, per conn.
    intervals: list[tuple[float, float, float]] = field(default_factory=list)  # s, s, bit/s
    rtts: list[float] = field(default_factory=list)  # ms: the ping flow, or under load
    jitter_ms: float | None = None
    lost: int | None = None
    packets: int | None = None
    rate: float | None = None  # udp: the rate asked for, bits/s
    probe_trials: list[dict] = field(default_factory=list)  # udp rate = "probe"
    predicted: float | None = None  # goodput theory predicts, bits/s
    base_rtt: float | None = None  # ms
    full_queue_rtt: float | None = None  # ms: base plus every forward queue full
    window_bound: float | None = None  # bits/s: window / base RTT, for a fixed window
    mathis_bound: float | None = None  # bits/s: MSS / (RTT sqrt(p)) x sqrt(3/2)

    @property
    def loss_percent(self) -> float | None:
        if self.lost is None or not self.packets:
            return None
        return 100 * self.lost / self.packets


@dataclass
class StepOutcome:
    step: Step
    repetition: int
    flows: list[FlowOutcome]
    start_spread: float | None = None  # seconds between the first and last flow start
    interrupted: bool = False
    sweep: tuple[str, str] | None = None  # (parameter, value) of a sweep point

    @property
    def fairness(self) -> float | None:
        rates = [rate for outcome in self.flows if outcome.flow.kind == "tcp" and outcome.ok
                 for rate in outcome.connection_throughputs]
        return jain_index(rates) if len(rates) > 1 else None


class Runner:
    def __init__(self, model: Topology, record: ownership.LabRecord, timing: Timing,
                 say=print) -> None:
        self.model = model
        self.record = record
        self.timing = timing
        self.say = say
        self._running: list[subprocess.Popen] = []

    # ------------------------------------------------------------------ processes

    def _start(self, node: str, command: list[str], what: str) -> subprocess.Popen:
        process = subprocess.Popen(["ip", "netns", "exec", node, *command],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True)
        ownership.add_process(self.record, process.pid, what)
        self._running.append(process)
        return process

    def _finish(self, process: subprocess.Popen, timeout: float) -> tuple[str, str, int]:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
            err = (err or "") + "\ntimed out"
        self._running.remove(process)
        ownership.remove_process(self.record, process.pid)
        return out or "", err or "", process.returncode

    def stop_all(self) -> None:
        """Ctrl-C: end whatever this step started."""
        for process in list(self._running):
            process.kill()
            self._finish(process, 5)

    # ------------------------------------------------------------------ a step

    def run_step(self, step: Step, repetition: int) -> StepOutcome:
        outcomes = [FlowOutcome(flow, flow.address or str(self.model.address_of(flow.target)))
                    for flow in step.flows]
        self._predict(outcomes)
        servers = {}
        for index, outcome in enumerate(outcomes):
            port = str(FIRST_PORT + index)
            flow = outcome.flow
            if flow.kind == "tcp":
                window = ["-w", str(flow.window)] if flow.window else []
                servers[index] = self._start(flow.target, [PYTHON, "-m", "simpleperf", "-s",
                                                           "-p", port, "-f", "B", *window],
                                             f"simpleperf server in {flow.target}")
            elif flow.kind == "udp":
                servers[index] = self._start(flow.target, [PYTHON, "-m", "simpleperf", "-s",
                                                           "-p", port],
                                             f"simpleperf server in {flow.target}")
        if servers:
            time.sleep(0.5)  # let them listen; the clients also wait START_DELAY
        for index, outcome in enumerate(outcomes):
            if outcome.flow.kind == "udp" and outcome.flow.rate == "probe":
                self._probe_rate(outcome, str(FIRST_PORT + index))
        start_at = time.monotonic() + START_DELAY
        clients, pingers = {}, {}
        for index, outcome in enumerate(outcomes):
            flow = outcome.flow
            command = self._client_command(outcome, str(FIRST_PORT + index))
            clients[index] = self._start(flow.source, [PYTHON, "-m", "simpleperf.lab.run.launch",
                                                       f"{start_at:.6f}", "--", *command],
                                         f"{flow.kind} client in {flow.source}")
            if flow.rtt_under_load:
                duration = flow.duration or self.timing.duration
                interval = min(self.timing.ping_interval, 1.0)
                count = max(3, int((duration - 1.0) / interval))
                pingers[index] = self._start(flow.source, [
                    PYTHON, "-m", "simpleperf.lab.run.launch", f"{start_at + 1.0:.6f}", "--",
                    "ping", "-n", "-c", str(count), "-i", str(interval), outcome.address],
                    f"ping in {flow.source}")
        longest = max(self._duration(o.flow) for o in outcomes)
        for index, process in clients.items():
            out, err, code = self._finish(process, longest + 60)
            self._read_client(outcomes[index], out, err, code)
        for index, process in pingers.items():
            out, _, _ = self._finish(process, 30)
            outcomes[index].rtts = _ping_times(out)
        for index, process in servers.items():
            process.send_signal(2)  # SIGINT: the server prints every row and exits
            out, err, _ = self._finish(process, 15)
            self._read_server(outcomes[index], out)
        starts = [o.started for o in outcomes if o.started is not None]
        spread = max(starts) - min(starts) if len(starts) > 1 else None
        if spread is not None and spread > SPREAD_WARNING:
            self.say(f"  warning: the flows of this step started {spread * 1e3:.1f} ms apart "
                     f"(more than {SPREAD_WARNING * 1e3:.0f} ms)")
        return StepOutcome(step, repetition, outcomes, spread)

    def _duration(self, flow: Flow) -> float:
        if flow.kind == "ping":
            count = flow.count or self.timing.ping_count
            return count * (flow.interval or self.timing.ping_interval) + 2
        return flow.duration or self.timing.duration

    def _client_command(self, outcome: FlowOutcome, port: str) -> list[str]:
        flow = outcome.flow
        if flow.kind == "ping":
            return ["ping", "-n", "-c", str(flow.count or self.timing.ping_count), "-i",
                    str(flow.interval or self.timing.ping_interval), outcome.address]
        duration = f"{self._duration(flow):g}"
        if flow.kind == "tcp":
            extra = (["-w", str(flow.window)] if flow.window else []) + (
                ["-l", str(flow.length)] if flow.length else []) + (
                ["-C", flow.congestion] if flow.congestion else [])
            return [PYTHON, "-m", "simpleperf", "-c", "-I", outcome.address, "-p", port, "-t",
                    duration, "-i", "1", "-f", "B", "-P", str(flow.parallel), *extra]
        if outcome.rate is None:
            outcome.rate = 1e6  # "auto" needs a routed path to size itself; a modest default
        return [PYTHON, "-m", "simpleperf", "-c", "-I", outcome.address, "-p", port, "-u",
                "-b", str(int(outcome.rate)), "-l", str(_datagram(flow)), "-t", duration,
                "-J", "--no-latency"]

    def _probe_rate(self, outcome: FlowOutcome, port: str) -> None:
        """Find the rate by measurement alone: simpleperf --probe, before the flow runs."""
        flow = outcome.flow
        # Trials of 2 s, shorter in quick runs: a fifth of the flow's duration.
        trial = min(PROBE_TRIAL_SECONDS, max(0.5, self._duration(flow) / 5))
        process = self._start(flow.source, [
            PYTHON, "-m", "simpleperf", "-c", "-I", outcome.address, "-p", port, "-u",
            "--probe", "-t", f"{trial:g}", "-l", str(_datagram(flow)), "-J"],
            f"udp rate probe in {flow.source}")
        out, err, code = self._finish(process, 16 * (trial + 5))
        try:
            found = json.loads(out)["probe"]["result"]
            outcome.probe_trials = json.loads(out)["probe"]["trials"]
        except (ValueError, KeyError, TypeError):
            found = None
        if code != 0 or not found:
            self.say(f"  warning: the UDP rate search from {flow.source} failed "
                     f"({(err.strip().splitlines() or ['no rate kept loss low'])[-1][:120]});"
                     f" using 1 Mbit/s")
            outcome.rate = 1e6
            return
        outcome.rate = found["offered"]
        self.say(f"  UDP rate search {flow.source} -> {outcome.address}: "
                 f"{found['offered'] / 1e6:.2f} Mbit/s kept loss under 1 % "
                 f"({len(outcome.probe_trials)} trials)")

    def _predict(self, outcomes: list[FlowOutcome]) -> None:
        """Theory for every flow: base RTT, and its max-min fair share of every shaped link
        the step's flows share (water-filling), as goodput."""
        paths, owners, demands = [], [], []
        for index, outcome in enumerate(outcomes):
            flow = outcome.flow
            try:
                forward = theory.path(self.model, flow.source, outcome.address)
                backward = theory.path(self.model, flow.target,
                                       str(self.model.address_of(flow.source)))
            except TopologyError:
                continue  # no theory for an address the topology does not route: it just runs
            if flow.kind == "udp" and flow.rate not in ("auto", "probe"):
                outcome.rate = float(flow.rate)
            outcome.base_rtt = (forward.one_way_delay + backward.one_way_delay) * 1e3
            queues = sum(s.queue * 1514 * 8 / s.rate for s in forward.shaping()
                         if s.rate is not None and s.queue is not None)
            outcome.full_queue_rtt = outcome.base_rtt + queues * 1e3
            if flow.kind == "udp" and flow.rate == "auto":
                bottleneck = forward.bottleneck or 1e9
                outcome.rate = 0.9 * bottleneck * _datagram(flow) / (_datagram(flow) + 42)
            rtt = outcome.base_rtt / 1e3
            if flow.kind == "tcp" and rtt > 0:
                if flow.window:
                    outcome.window_bound = flow.parallel * theory.window_bound(flow.window, rtt)
                loss = forward.loss
                if loss > 0 and (flow.congestion or system_congestion_control()) in LOSS_BASED:
                    outcome.mathis_bound = flow.parallel * theory.mathis_bound(1448, rtt, loss)
            if flow.kind == "ping":
                continue
            for _ in range(flow.parallel):
                paths.append(forward)
                owners.append(index)
                demands.append(None if flow.kind == "tcp" or outcome.rate is None
                               else outcome.rate * (_datagram(flow) + 42) / _datagram(flow))
        if not paths:
            return
        shares = theory.max_min_shares(paths, demands)
        for index, outcome in enumerate(outcomes):
            mine = [share for owner, share in zip(owners, shares, strict=True) if owner == index]
            if mine and all(math.isfinite(s) for s in mine):
                efficiency = (TCP_GOODPUT if outcome.flow.kind == "tcp"
                              else _datagram(outcome.flow) / (_datagram(outcome.flow) + 42))
                bounds = [sum(mine) * efficiency, outcome.window_bound, outcome.mathis_bound]
                outcome.predicted = min(b for b in bounds if b is not None)

    # ------------------------------------------------------------------ parsing

    def _read_client(self, outcome: FlowOutcome, out: str, err: str, code: int) -> None:
        lines = out.splitlines()
        if lines and lines[0].startswith(START_MARK):
            outcome.started = float(lines[0].split()[1])
            lines = lines[1:]
        kind = outcome.flow.kind
        if code != 0 and not (kind == "ping" and _ping_times("\n".join(lines))):
            detail = [line for line in err.strip().splitlines() if line.strip()]
            outcome.error = (detail[-1] if detail else f"exit status {code}")[:200]
            return
        if kind == "ping":
            outcome.rtts = _ping_times("\n".join(lines))
            outcome.ok = bool(outcome.rtts)
            outcome.error = None if outcome.ok else "no replies"
        elif kind == "tcp":
            rows = [ROW.match(line) for line in lines]
            rows = [m for m in rows if m]
            connections = outcome.flow.parallel
            totals, intervals = rows[-connections:], rows[:-connections]
            outcome.sender_throughput = sum(float(m.group(5)) for m in totals) * 1e6
            by_interval: dict[tuple[float, float], float] = {}
            for m in intervals:
                key = (float(m.group(2)), float(m.group(3)))
                by_interval[key] = by_interval.get(key, 0.0) + float(m.group(5)) * 1e6
            outcome.intervals = [(a, b, rate) for (a, b), rate in sorted(by_interval.items())]
            outcome.ok = bool(totals)
        else:
            try:
                self._read_udp(outcome, json.loads("\n".join(lines)))
            except (ValueError, KeyError, TypeError):
                outcome.error = "simpleperf gave no UDP result"

    @staticmethod
    def _read_udp(outcome: FlowOutcome, result: dict) -> None:
        """Both ends' view comes back in the client's JSON; the receiver's intervals are
        the server's."""
        end = result["end"]
        outcome.sender_throughput = end["sum_sent"]["bits_per_second"]
        outcome.throughput = end["sum_received"]["bits_per_second"]
        outcome.jitter_ms = end["sum"]["jitter_ms"]
        outcome.lost, outcome.packets = end["sum"]["lost_packets"], end["sum"]["packets"]
        received = result.get("server_intervals") or result["intervals"]
        outcome.intervals = [(i["sum"]["start"], i["sum"]["end"],
                              i["sum"]["bits_per_second"]) for i in received]
        outcome.connection_throughputs = [outcome.throughput]
        outcome.ok = True

    def _read_server(self, outcome: FlowOutcome, out: str) -> None:
        if outcome.flow.kind == "tcp":
            rates = [float(m.group(5)) * 1e6 for m in map(ROW.match, out.splitlines()) if m]
            outcome.connection_throughputs = rates
            if rates:
                outcome.throughput = sum(rates)


def _datagram(flow: Flow) -> int:
    return flow.length or 1470


def _ping_times(text: str) -> list[float]:
    return [float(m) for m in re.findall(r"time=([\d.]+) ms", text)]


def summarize_rtts(rtts: list[float]) -> dict[str, float] | None:
    if not rtts:
        return None
    mean = statistics.fmean(rtts)
    return {"min": min(rtts), "avg": mean, "max": max(rtts), "median": statistics.median(rtts),
            "mdev": statistics.pstdev(rtts)}
