"""Run the steps of an experiment on a lab that is up, and collect what every flow measured.

Servers start first; then every client of a step is handed the same start instant (see
launch.py) and the spread of their real starts is measured. A flow that fails is recorded
with its error and the run goes on. Every process started here is recorded in the lab's
ownership record, so even a killed run leaves nothing the next `down` cannot remove.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from typing import Any

from ...protocol.native import WRITE_HEADER
from ..model import theory
from ..model.experiment import APPLICATIONS, FIRST_PORT, Flow, Step, Timing
from ..model.outcomes import FlowOutcome, StepOutcome
from ..model.topology import Topology
from ..net import ownership
from ..net.routing import tables
from ..net.system import system_congestion_control
from .applications import Applications, read_application, wait_listening
from .captures import StepCaptures
from .events import EVENT_INTERVAL, StepEvents
from .launch import START_MARK
from .progress import StepProgress

PYTHON = sys.executable
LAUNCH = [PYTHON, "-m", "simpleperf.lab.run.launch"]  # a command, started at an instant
PROBE_TRIAL_SECONDS = 2.0
START_DELAY = 1.0  # seconds between launching the clients and their common start
SPREAD_WARNING = 0.010
FALLBACK_UDP_RATE = 1e6  # when "auto" has no routed path to size itself, or a probe failed
APPLICATION_TIMEOUT = 600.0  # seconds an scp, http or command flow may take without duration
SERVER_READY_SECONDS = 10.0


class Runner:
    def __init__(self, model: Topology, record: ownership.LabRecord, timing: Timing,
                 say=print, applications: Applications | None = None,
                 captures: StepCaptures | None = None,
                 progress: StepProgress | None = None) -> None:
        self.built = model  # as the topology file says; self.model: as routed now
        self.model = model
        self.record = record
        self._events: StepEvents | None = None
        self.timing = timing
        self.say = say
        self.applications = applications
        self.captures = captures
        self.steps_run = 0
        self._running: list[subprocess.Popen] = []
        self.progress = progress

    # ------------------------------------------------------------------ processes

    def _start(self, node: str, command: list[str], what: str,
               stderr: int = subprocess.PIPE) -> subprocess.Popen:
        process = ownership.start_recorded(self.record, node, command, what,
                                           stdout=subprocess.PIPE, stderr=stderr, text=True)
        self._running.append(process)
        return process

    def _finish(self, process: subprocess.Popen, timeout: float) -> tuple[str, str, int]:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _signal_group(process, signal.SIGKILL)
            out, err = process.communicate()
            err = (err or "") + "\ntimed out"
        self._running.remove(process)
        ownership.remove_process(self.record, process.pid)
        return out or "", err or "", process.returncode

    def stop_all(self) -> None:
        """Ctrl-C: end whatever this step started (and undo its events' changes)."""
        if self.progress is not None:
            self.progress.done()
        if self._events is not None:
            self._events.cancel()
        for process in list(self._running):
            _signal_group(process, signal.SIGKILL)
            self._finish(process, 5)
        if self.captures is not None:
            self.captures.stop()
        if self._events is not None:
            self._events.restore(self.say)
            self._events = None

    # ------------------------------------------------------------------ a step

    def run_step(self, step: Step, repetition: int, number: int | None = None
                 ) -> StepOutcome:
        """Run one step; `number` (the run's count of steps so far) names its captures."""
        self.model = tables.routed(self.built)  # theory follows the routes installed now
        outcomes = [FlowOutcome(flow, flow.address or str(self.model.address_of(flow.target)))
                    for flow in step.flows]
        theory.predict(self.model, outcomes, system_congestion_control(),
                       [flow_duration(o.flow, self.timing) for o in outcomes])
        self._phase("starting the servers")
        servers = self._start_servers(outcomes)
        self.steps_run += 1
        if self.captures is not None and step.capture:
            self.captures.start(step.capture, number or self.steps_run)
        for index, outcome in enumerate(outcomes):
            if outcome.flow.kind == "udp" and outcome.flow.rate == "probe":
                self._phase(f"searching the UDP rate from {outcome.flow.source}")
                self._probe_rate(outcome, str(FIRST_PORT + index))
        start_at = time.monotonic() + START_DELAY
        if step.events:
            self._events = StepEvents(self.record, self.built, step.events, self._start,
                                      self._finish)
            self._events.begin(start_at, outcomes, LAUNCH,
                               lambda outcome: flow_duration(outcome.flow, self.timing))
        clients, pingers = self._start_clients(outcomes, start_at,
                                               EVENT_INTERVAL if step.events else 1.0)
        longest = max(flow_duration(o.flow, self.timing) for o in outcomes)
        if self.progress is not None:
            self.progress.countdown(f"{len(outcomes)} flow{'s' * (len(outcomes) > 1)} "
                                    "running", longest + START_DELAY)
        for index, process in clients.items():
            out, err, code = self._finish(process, longest + 60)
            moved = (self.applications.bytes_moved(outcomes[index].flow)
                     if self.applications else None)
            _read_client(outcomes[index], out, err, code, moved)
        self._phase("collecting the results")
        for index, process in pingers.items():
            out, _, _ = self._finish(process, 30)
            outcomes[index].rtts = _ping_times(out)
        if self.built.runs_daemons:
            for outcome in outcomes:
                _trace(self.model, outcome)
        played = []
        if self._events is not None:
            played = self._events.end(outcomes)
            self._events.restore(self.say)
            self._events = None
        captured = self.captures.stop() if self.captures is not None else []
        self._phase("stopping the servers")
        self._stop_servers(servers, outcomes)
        if self.progress is not None:
            self.progress.done()
        starts = [o.started for o in outcomes if o.started is not None]
        spread = max(starts) - min(starts) if len(starts) > 1 else None
        if spread is not None and spread > SPREAD_WARNING:
            self.say(f"  warning: the flows of this step started {spread * 1e3:.1f} ms apart "
                     f"(more than {SPREAD_WARNING * 1e3:.0f} ms)")
        return StepOutcome(step, repetition, outcomes, spread, captures=captured, events=played)

    def _start_servers(self, outcomes: list[FlowOutcome]) -> dict[int, subprocess.Popen]:
        servers = {}
        for index, outcome in enumerate(outcomes):
            port = str(FIRST_PORT + index)
            flow = outcome.flow
            if flow.kind in ("tcp", "udp"):
                # The window must be set on the listener, before connections are accepted.
                window = ["-w", str(flow.window)] if flow.window else []
                servers[index] = self._start(flow.target, [PYTHON, "-m", "simpleperf", "-s",
                                                           "-p", port, *window],
                                             f"simpleperf server in {flow.target}")
        for index, outcome in enumerate(outcomes):
            server = self._application_server(outcome, str(FIRST_PORT + index))
            if server is not None:
                servers[index] = server
        if servers:
            time.sleep(0.5)  # let them listen; the clients also wait START_DELAY
        return servers

    def _phase(self, text: str) -> None:
        if self.progress is not None:
            self.progress.phase(text)

    def _start_clients(self, outcomes: list[FlowOutcome], start_at: float, every: float
                       ) -> tuple[dict[int, subprocess.Popen], dict[int, subprocess.Popen]]:
        """Every flow's client, launched for `start_at`, and the pings beside the flows that
        measure RTT under load; `every`: seconds per throughput sample."""
        clients, pingers = {}, {}
        for index, outcome in enumerate(outcomes):
            flow = outcome.flow
            command = client_command(outcome, str(FIRST_PORT + index), every,
                                     flow_duration(flow, self.timing), self.timing,
                                     self.applications)
            timed = ["--timed"] if flow.kind in APPLICATIONS else []
            clients[index] = self._start(flow.source, [*LAUNCH, f"{start_at:.6f}", *timed, "--",
                                                       *command],
                                         f"{flow.kind} client in {flow.source}")
            if flow.rtt_under_load:
                duration = flow.duration or self.timing.duration
                interval = min(self.timing.ping_interval, 1.0)
                count = max(3, int((duration - 1.0) / interval))
                pingers[index] = self._start(flow.source, [
                    *LAUNCH, f"{start_at + 1.0:.6f}", "--",
                    "ping", "-n", "-c", str(count), "-i", str(interval), outcome.address],
                    f"ping in {flow.source}")
        return clients, pingers

    def _stop_servers(self, servers: dict[int, subprocess.Popen],
                      outcomes: list[FlowOutcome]) -> None:
        for index, process in servers.items():
            # Both ends' view came with the client's JSON. A simpleperf server stops cleanly
            # on SIGINT; an application's on SIGTERM, which a shell's background jobs do not
            # ignore. Then the group again: nothing a server started outlives the step.
            application = outcomes[index].flow.kind in APPLICATIONS
            _signal_group(process, signal.SIGTERM if application else signal.SIGINT)
            self._finish(process, 15)
            _signal_group(process, signal.SIGKILL)

    def _application_server(self, outcome: FlowOutcome, port: str
                            ) -> subprocess.Popen | None:
        """An scp, http or command flow's server in the target node, once it listens."""
        flow = outcome.flow
        if flow.kind not in APPLICATIONS or self.applications is None:
            return None
        command = self.applications.server(flow, outcome.address, port)
        if command is None:
            return None
        # sshd says it listens on stderr, Python's HTTP server on stdout (and logs every
        # request on stderr, which nobody reads: it must not fill a pipe).
        process = self._start(flow.target, command, f"{flow.kind} server in {flow.target}",
                               stderr=subprocess.DEVNULL if flow.kind == "http"
                               else subprocess.PIPE)
        if not wait_listening(process, flow.kind, SERVER_READY_SECONDS):
            self.say(f"  warning: the {flow.kind} server in {flow.target} did not start")
        return process

    def _probe_rate(self, outcome: FlowOutcome, port: str) -> None:
        """Find the rate by measurement alone: simpleperf --probe, before the flow runs."""
        flow = outcome.flow
        # Trials of 2 s, shorter in quick runs: a fifth of the flow's duration.
        trial = min(PROBE_TRIAL_SECONDS, max(0.5, flow_duration(flow, self.timing) / 5))
        process = self._start(flow.source, [
            PYTHON, "-m", "simpleperf", "-c", "-I", outcome.address, "-p", port, "-u",
            "--probe", "-t", f"{trial:g}", "-l", str(theory.datagram_bytes(flow.length)), "-J"],
            f"udp rate probe in {flow.source}")
        _take_probe(outcome, *self._finish(process, 16 * (trial + 5)), self.say)

    # ------------------------------------------------------------------ parsing

def _take_probe(outcome: FlowOutcome, out: str, err: str, code: int, say) -> None:
    """The flow's rate from its search's JSON (1 Mbit/s, said, when the search failed)."""
    flow = outcome.flow
    try:
        search = json.loads(out)["probe"]
        found, outcome.probe_trials = search["result"], search["trials"]
    except (ValueError, KeyError, TypeError):
        found = None
    if code != 0 or not found:
        say(f"  warning: the UDP rate search from {flow.source} failed "
            f"({(err.strip().splitlines() or ['no rate kept loss low'])[-1][:120]});"
            f" using 1 Mbit/s")
        outcome.rate = FALLBACK_UDP_RATE
        return
    outcome.rate = found["offered"]
    say(f"  UDP rate search {flow.source} -> {outcome.address}: "
        f"{found['offered'] / 1e6:.2f} Mbit/s kept loss under 1 % "
        f"({len(outcome.probe_trials)} trials)")


def flow_duration(flow: Flow, timing: Timing) -> float:
    """Seconds a flow runs (an application: at most this long)."""
    if flow.kind in APPLICATIONS:
        return flow.duration or APPLICATION_TIMEOUT
    if flow.kind == "ping":
        count = flow.count or timing.ping_count
        return count * (flow.interval or timing.ping_interval) + 2
    return flow.duration or timing.duration


def client_command(outcome: FlowOutcome, port: str, every: float, duration: float,
                   timing: Timing, applications: Applications | None) -> list[str]:
    """The command a flow's client runs; `every`: seconds per throughput sample."""
    flow = outcome.flow
    if flow.kind in APPLICATIONS:
        assert applications is not None
        return applications.client(flow, outcome.address, port)
    if flow.kind == "ping":
        return ["ping", "-n", "-c", str(flow.count or timing.ping_count), "-i",
                str(flow.interval or timing.ping_interval), outcome.address]
    # Every flow runs as a native test: both ends' view comes back as one JSON document.
    # The lab's namespaces share one clock, so one-way delays are true: --trip-times.
    common = [PYTHON, "-m", "simpleperf", "-c", "-I", outcome.address, "-p", port, "-t",
              f"{duration:g}", "-i", f"{every:g}", "-J", "--no-latency"]
    if not flow.length or flow.length >= WRITE_HEADER.size:
        common.append("--trip-times")
    if flow.kind == "tcp":
        extra = (["-w", str(flow.window)] if flow.window else []) + (
            ["-l", str(flow.length)] if flow.length else []) + (
            ["-C", flow.congestion] if flow.congestion else [])
        return [*common, "--native", "-P", str(flow.parallel), *extra]
    length = ["-l", str(theory.datagram_bytes(flow.length))]
    if flow.frames is not None:  # video frames set their own rate
        return [*common, "-u", f"--isochronous={flow.frames}", *length]
    if outcome.rate is None:
        outcome.rate = FALLBACK_UDP_RATE
    return [*common, "-u", "-b", str(int(outcome.rate)), *length]


def _trace(model: Topology, outcome: FlowOutcome) -> None:
    """Which nodes each connection of a flow crossed, and which theory assumed: where
    routing spreads flows over equal-cost paths, they can differ."""
    protocol = outcome.flow.kind
    # A connection spread packet by packet over several paths: "A + B".
    outcome.paths = [" + ".join(" ".join(path) for path in tables.flow_paths(
                         model, outcome.flow.source, (*socket, protocol)))
                     for socket in outcome.sockets if protocol in ("tcp", "udp")]
    with contextlib.suppress(ValueError):
        hops = theory.path(model, outcome.flow.source, outcome.address).hops
        nodes = [outcome.flow.source] + [link.other(node).node for link, node in hops]
        outcome.theory_path = " ".join(n for n in nodes if model.nodes[n].kind != "switch")


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    """Every process the runner starts leads a session of its own (start_new_session)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signum)


def _read_client(outcome: FlowOutcome, out: str, err: str, code: int,
                 moved: int | None) -> None:
    lines = out.splitlines()
    if lines and lines[0].startswith(START_MARK):
        outcome.started = float(lines[0].split()[1])
        lines = lines[1:]
    kind = outcome.flow.kind
    if kind in APPLICATIONS:
        read_application(outcome, lines, err, moved)
        return
    if code != 0 and not (kind == "ping" and _ping_times("\n".join(lines))):
        detail = [line for line in err.strip().splitlines() if line.strip()]
        outcome.error = (detail[-1] if detail else f"exit status {code}")[:200]
        return
    if kind == "ping":
        outcome.rtts = _ping_times("\n".join(lines))
        outcome.ok = bool(outcome.rtts)
        outcome.error = None if outcome.ok else "no replies"
    else:
        try:
            _read_result(outcome, json.loads("\n".join(lines)))
        except (ValueError, KeyError, TypeError):
            outcome.error = f"simpleperf gave no {kind.upper()} result"


def _read_result(outcome: FlowOutcome, result: dict[str, Any]) -> None:
    """Both ends' view comes back in the client's JSON; the receiver's intervals are the
    server's (ours for a reverse test, which lab flows are not)."""
    end = result["end"]
    outcome.sender_throughput = end["sum_sent"]["bits_per_second"]
    outcome.retransmits = end["sum_sent"].get("retransmits")
    outcome.throughput = end["sum_received"]["bits_per_second"]
    outcome.connection_throughputs = [stream["receiver"]["bits_per_second"]
                                      for stream in end["streams"]]
    if outcome.flow.kind == "udp":
        outcome.jitter_ms = end["sum"]["jitter_ms"]
        outcome.lost, outcome.packets = end["sum"]["lost_packets"], end["sum"]["packets"]
    outcome.one_way_ms = _one_way(end["streams"])
    medians = _timed(end["streams"], "one_way_delay")
    if medians:
        outcome.one_way_p50_ms = (sum(d["p50_ms"] * d["count"] for d in medians)
                                  / sum(d["count"] for d in medians))
    writes = _one_way(end["streams"], "write_to_read_delay")
    outcome.write_delay_ms = (writes[1], writes[2]) if writes is not None else None
    receiver = end["streams"][0]["receiver"]
    if "frame_latency" in receiver:
        latency = receiver["frame_latency"]
        outcome.frames = (receiver["frames"], receiver["frames_lost"])
        outcome.frame_latency_ms = (latency.get("mean_ms"), latency.get("p99_ms"))
    outcome.sockets = [(c["local_host"], c["local_port"], c["remote_host"], c["remote_port"])
                       for c in result.get("start", {}).get("connected", [])]
    received = result.get("server_intervals") or result["intervals"]
    # On the flows' clock (0 = the step's agreed start), as events are: the test measures
    # from after its handshakes, which take several round trips.
    began = end.get("measurement_start", {}).get("monotonic")
    shift = began - outcome.started if began is not None and outcome.started else 0.0
    outcome.intervals = [(i["sum"]["start"] + shift, i["sum"]["end"] + shift,
                          i["sum"]["bits_per_second"]) for i in received]
    outcome.ok = "error" not in result


def _one_way(streams: list[dict[str, Any]], key: str = "one_way_delay"
             ) -> tuple[float, float, float] | None:
    """The receivers' one-way delays (`key`: of the path, or write_to_read_delay) over all
    of a flow's connections: the least, the mean (weighted by what each timed) and the
    largest 99th percentile, ms."""
    delays = _timed(streams, key)
    if not delays:
        return None
    count = sum(d["count"] for d in delays)
    return (min(d["min_ms"] for d in delays),
            sum(d["mean_ms"] * d["count"] for d in delays) / count,
            max(d["p99_ms"] for d in delays))


def _timed(streams: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """The receivers' delay summaries under `key` that timed anything."""
    return [s["receiver"][key] for s in streams if s["receiver"].get(key, {}).get("count")]


def _ping_times(text: str) -> list[float]:
    return [float(m) for m in re.findall(r"time=([\d.]+) ms", text)]
