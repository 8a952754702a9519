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
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..model import theory, traces
from ..model.experiment import FIRST_PORT, Step, Timing
from ..model.outcomes import FlowOutcome, StepOutcome
from ..model.topology import Topology
from ..net import ownership
from ..net.routing import tables
from ..net.system import system_congestion_control
from . import kinds, multipath
from .applications import Applications
from .captures import StepCaptures
from .events import EVENT_INTERVAL, StepEvents
from .launch import START_MARK
from .progress import StepProgress
from .shortfalls import ShaperShortfalls

PYTHON = sys.executable
LAUNCH = [PYTHON, "-m", "simpleperf.lab.run.launch"]  # a command, started at an instant
PROBE_TRIAL_SECONDS = 2.0
START_DELAY = 1.0  # seconds between launching the clients and their common start
SPREAD_WARNING = 0.010
SERVER_READY_SECONDS = 10.0


class StepRunner:
    """Runs steps on a lab that is up; each kind's runner (kinds.py) says how its flows
    run."""

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
        self.kinds = kinds.runners(applications)
        self.captures = captures
        self.steps_run = 0
        self._running: list[subprocess.Popen] = []
        self.progress = progress
        self._steering: multipath.Steering | None = None

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
        multipath.undo(self._steering, self.say)
        self._steering = None

    # ------------------------------------------------------------------ a step

    def run_step(self, step: Step, repetition: int, number: int | None = None
                 ) -> StepOutcome:
        """Run one step; `number` (the run's count of steps so far) names its captures."""
        self.model = tables.routed(self.built)  # theory follows the routes installed now
        outcomes = [FlowOutcome(flow, flow.address or str(self.model.address_of(flow.target)))
                    for flow in step.flows]
        down = frozenset(self.record.links_down)
        theory.predict(self.model, outcomes, system_congestion_control(),
                       [self._duration(o) for o in outcomes], down)
        self._steering = multipath.steer(self.model, outcomes, down)
        self._phase("starting the servers")
        servers = self._start_servers(outcomes)
        self.steps_run += 1
        if self.captures is not None and step.capture:
            self.captures.start(step.capture, number or self.steps_run)
        for index, outcome in enumerate(outcomes):
            if outcome.flow.rate == "probe":
                self._phase(f"searching the UDP rate from {outcome.flow.source}")
                self._probe_rate(outcome, str(FIRST_PORT + index))
        shortfalls = ShaperShortfalls(self.record, self.built)
        start_at = time.monotonic() + START_DELAY
        if step.events:
            self._events = StepEvents(self.record, self.built, step.events, self._start,
                                      self._finish)
            self._events.begin(start_at, outcomes, LAUNCH,
                               self._duration)
        clients, pingers = self._start_clients(outcomes, start_at,
                                               EVENT_INTERVAL if step.events else 1.0)
        longest = max(self._duration(o) for o in outcomes)
        if self.progress is not None:  # a flow that ends with its program: at most its bound
            self.progress.countdown(f"{len(outcomes)} flow{'s' * (len(outcomes) > 1)} "
                                    "running", longest + START_DELAY, at_most=any(
                                        o.flow.spec.ends == "exit" and o.flow.duration is None
                                        and self._duration(o) == longest for o in outcomes))
        for index, process in clients.items():
            _read_client(self.kinds[outcomes[index].flow.kind], outcomes[index],
                         *self._finish(process, longest + 60))
        self._phase("collecting the results")
        shortfalls.judge(outcomes, self.model, self.say)
        for index, process in pingers.items():
            out, _, _ = self._finish(process, 30)
            outcomes[index].rtts = kinds.ping_times(out)
        if any(outcome.flow.window for outcome in outcomes):
            # a window-limited flow moved the window its receiver advertised (the kernel's
            # own of the buffer asked for) per round trip it met: theory anew
            theory.predict(self.model, outcomes, system_congestion_control(),
                           [self._duration(o) for o in outcomes], down)
        if self.built.runs_daemons:
            for outcome in outcomes:
                _trace(self.model, outcome)
        created = time.monotonic() - (time.time() - self.record.created)  # the lab's start
        for outcome in outcomes:
            _trace_capacity(self.built, created, outcome)
        played = []
        if self._events is not None:
            played = self._events.end(outcomes)
            self._events.restore(self.say)
            self._events = None
        captured = self.captures.stop() if self.captures is not None else []
        self._phase("stopping the servers")
        self._stop_servers(servers, outcomes)
        multipath.undo(self._steering, self.say)
        self._steering = None
        if self.progress is not None:
            self.progress.done()
        starts = [o.started for o in outcomes if o.started is not None]
        spread = max(starts) - min(starts) if len(starts) > 1 else None
        if spread is not None and spread > SPREAD_WARNING:
            self.say(f"  warning: the flows of this step started {spread * 1e3:.1f} ms apart "
                     f"(more than {SPREAD_WARNING * 1e3:.0f} ms)")
        return StepOutcome(step, repetition, outcomes, spread, captures=captured, events=played)

    def _duration(self, outcome: FlowOutcome) -> float:
        return outcome.flow.spec.duration(outcome.flow, self.timing)

    def _start_servers(self, outcomes: list[FlowOutcome]) -> dict[int, subprocess.Popen]:
        """Each flow's server in its target node, as its kind's runner makes it."""
        servers = {}
        for index, outcome in enumerate(outcomes):
            flow = outcome.flow
            runner = self.kinds[flow.kind]
            command = runner.server(flow, outcome.address, str(FIRST_PORT + index))
            if command is None:
                continue
            servers[index] = process = self._start(
                flow.target, command, f"{flow.kind} server in {flow.target}",
                stderr=runner.server_stderr())
            if not runner.ready(process, SERVER_READY_SECONDS, str(FIRST_PORT + index)):
                self.say(f"  warning: the {flow.kind} server in {flow.target} did not start")
        return servers  # each listens (its kind's ready); the clients also wait START_DELAY

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
            runner = self.kinds[flow.kind]
            command = runner.client(outcome, str(FIRST_PORT + index), every,
                                    self._duration(outcome), self.timing)
            timed = ["--timed"] if runner.timed else []
            clients[index] = self._start(flow.source, [*LAUNCH, f"{start_at:.6f}", *timed, "--",
                                                       *command],
                                         f"{flow.kind} client in {flow.source}")
            if flow.rtt_under_load:
                duration = flow.duration or self.timing.duration
                interval = min(self.timing.ping_interval, 1.0)
                count = max(3, int((duration - 1.0) / interval))
                marked = [] if flow.dscp is None else ["-Q", str(flow.dscp << 2)]
                pingers[index] = self._start(flow.source, [
                    *LAUNCH, f"{start_at + 1.0:.6f}", "--", "ping", "-n", "-c", str(count),
                    "-i", str(interval), *marked, outcome.address],
                    f"ping in {flow.source}")  # marked as the flow: what it meets
        return clients, pingers

    def _stop_servers(self, servers: dict[int, subprocess.Popen],
                      outcomes: list[FlowOutcome]) -> None:
        for index, process in servers.items():
            # Both ends' view came with the client's JSON. Each kind's server stops cleanly on
            # its signal; then the group again: nothing a server started outlives the step.
            _signal_group(process, self.kinds[outcomes[index].flow.kind].stop_signal)
            self._finish(process, 15)
            _signal_group(process, signal.SIGKILL)

    def _probe_rate(self, outcome: FlowOutcome, port: str) -> None:
        """Find the rate by measurement alone: simpleperf --probe, before the flow runs."""
        flow = outcome.flow
        # Trials of 2 s, shorter in quick runs: a fifth of the flow's duration.
        trial = min(PROBE_TRIAL_SECONDS, max(0.5, self._duration(outcome) / 5))
        process = self._start(flow.source, [
            PYTHON, "-m", "simpleperf", "-c", "-I", outcome.address, "-p", port, "-u",
            "--probe", "-t", f"{trial:g}", "-l", str(theory.datagram_bytes(flow.length)), "-J"],
            f"udp rate probe in {flow.source}")
        _take_probe(outcome, *self._finish(process, 16 * (trial + 5)), self.say)

    # ------------------------------------------------------------------ parsing

def _read_client(runner: kinds.KindRunner, outcome: FlowOutcome, out: str, err: str,
                 code: int) -> None:
    """The launcher's start mark, then what the client printed, read by its kind."""
    lines = out.splitlines()
    if lines and lines[0].startswith(START_MARK):
        outcome.started = float(lines[0].split()[1])
        lines = lines[1:]
    runner.read(outcome, lines, err, code)


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
        outcome.rate = kinds.FALLBACK_UDP_RATE
        return
    outcome.rate = found["offered"]
    say(f"  UDP rate search {flow.source} -> {outcome.address}: "
        f"{found['offered'] / 1e6:.2f} Mbit/s kept loss under 1 % "
        f"({len(outcome.probe_trials)} trials)")


def _trace(model: Topology, outcome: FlowOutcome) -> None:
    """Which nodes each connection of a flow crossed, and which theory assumed: where
    routing spreads flows over equal-cost paths, they can differ."""
    kind = outcome.flow.spec
    protocol = "udp" if kind.datagrams else "tcp"
    # A connection spread packet by packet over several paths, or an MPTCP connection's
    # subflows (those it had, to the addresses steered along further paths): "A + B".
    further = outcome.subflow_addresses[:max(0, (outcome.mptcp_subflows or 0)
                                             // max(1, len(outcome.sockets)) - 1)]
    outcome.paths = []
    for local, port, remote, remote_port in outcome.sockets:
        if not kind.measured:
            break
        ends = [(local, port, remote), *[(local, 0, address) for address in further]]
        outcome.paths.append(" + ".join(
            " ".join(path) for source, source_port, target in ends
            for path in tables.flow_paths(model, outcome.flow.source,
                                          (source, source_port, target, remote_port,
                                           protocol))))
    if outcome.flow.mptcp:
        return  # theory gave its subflows' paths
    with contextlib.suppress(ValueError):
        outcome.theory_path = theory.path_nodes(
            model, outcome.flow.source, theory.path(model, outcome.flow.source,
                                                    outcome.address))


def _trace_capacity(model: Topology, epoch: float, outcome: FlowOutcome) -> None:
    """What the trace on the flow's path offered in each of its intervals, the slowest
    trace's where several lie on it (the lab's delay lines start every trace at the lab's
    creation, `epoch`, on the monotonic clock that flows' starts are marked with). Where
    that trace is the path's bottleneck, theory's prediction (made from the trace's mean
    rate) is scaled to what it offered while the flow ran."""
    if outcome.started is None or not outcome.intervals:
        return
    with contextlib.suppress(ValueError):
        hops = theory.path(model, outcome.flow.source, outcome.address).hops
        directions = [link.direction_from(node) for link, node in hops]
        traced = [shaping for shaping in directions if shaping.trace is not None]
        if not traced:
            return
        slowest = min(traced, key=lambda shaping: shaping.rate or 0.0)
        assert slowest.trace is not None and slowest.rate is not None
        trace = traces.load(slowest.trace)
        offset = outcome.started - epoch
        offered = [(start, end, trace.offered(offset + start, offset + end))
                   for start, end, _ in outcome.intervals]
        outcome.trace_capacity = (Path(slowest.trace).stem, offered)
        rates = [shaping.rate for shaping in directions if shaping.rate is not None]
        if outcome.predicted and slowest.rate <= min(rates):
            span = offered[-1][1] - offered[0][0]
            mean = sum(rate * (end - start) for start, end, rate in offered) / span
            others = [shaping.rate for shaping in directions
                      if shaping.trace is None and shaping.rate is not None]
            outcome.predicted *= min([mean, *others]) / slowest.rate


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    """Every process the runner starts leads a session of its own (start_new_session)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signum)
