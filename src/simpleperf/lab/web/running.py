"""Flows started from the page. A flow is asked for as an experiment's table gives one
(`{"kind": "tcp", "from": "h1", "to": "h4"}`: model/flows.py reads it, with the same
checks), its server and client are the commands `lab run` starts (run/kinds.py's runners),
started as recorded processes of the lab (so that `lab down` ends them whatever becomes of
the console), its client's intervals are read as they come (simpleperf's --json-stream,
ping's replies), and theory's goodput and base RTT stand beside them (model/theory.py)."""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import subprocess
import threading
import time
from collections import deque
from typing import Any

from ..model import flows as model_flows
from ..model import theory
from ..model.errors import ExperimentError, TopologyError
from ..model.outcomes import FlowOutcome
from ..model.topology import Topology
from ..net import journal, ownership
from ..net.routing import tables
from ..net.system import CommandError, system_congestion_control
from ..run import kinds

LIVE_KINDS = ("tcp", "udp", "ping", "rpm")  # what the page starts (rpm: a result at its end)
DEFAULT_SECONDS = 30.0  # a tcp or udp flow without a duration
MAX_FLOWS = 16  # running at once, every lab together
HISTORY = 120  # readings a flow keeps
FIRST_PORT = 47000  # the page's flows' servers listen from here
READY_SECONDS = 10.0
PING = re.compile(r"time=([\d.]+) ms")


class FlowError(ValueError):
    """A flow the page cannot start: one line."""


class PageFlow:
    """One flow the page started: its processes, what its client has said so far."""

    def __init__(self, number: int, lab: str, flow: model_flows.Flow, address: str,
                 seconds: float) -> None:
        self.number, self.lab, self.flow, self.address = number, lab, flow, address
        self.seconds = seconds
        self.predicted: float | None = None  # theory's goodput along its path (along())
        self.base_rtt: float | None = None
        self.samples: deque[dict[str, Any]] = deque(maxlen=HISTORY)
        self.state = "starting"
        self.rpm: float | None = None  # an rpm flow's result, when it has one
        self.path: list[str] = []  # the links its packets cross, in order
        self.said: list[str] = []  # an rpm flow's client's JSON, read at its end
        self.processes: list[subprocess.Popen] = []
        self.began = time.time()

    def view(self) -> dict[str, Any]:
        return {"id": self.number, "lab": self.lab, "kind": self.flow.kind,
                "from": self.flow.source, "to": self.flow.target, "address": self.address,
                "seconds": self.seconds, "state": self.state, "began": self.began,
                "predicted_bits_per_second": self.predicted, "base_rtt_ms": self.base_rtt,
                "rpm": self.rpm, "path": self.path, "samples": list(self.samples)}

    def read(self, line: str) -> None:
        """One line of the client's output."""
        if self.flow.kind == "rpm":
            self.said.append(line.rstrip("\n"))
            return
        if self.flow.kind == "ping":
            found = PING.search(line)
            if found:
                self.samples.append({"at": time.time(), "rtt_ms": float(found[1])})
            return
        try:
            event = json.loads(line)
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        if event.get("event") == "error" or "error" in event:
            self.state = f"failed: {event.get('data') or event.get('error')}"
        if event.get("event") != "interval" or not isinstance(event.get("data"), dict):
            return
        data = event["data"]
        total = data.get("sum") if isinstance(data.get("sum"), dict) else {}
        streams = [s for s in data.get("streams", []) if isinstance(s, dict)]
        first = streams[0] if streams else {}
        rtt = first.get("rtt")
        self.samples.append({
            "at": time.time(), "bits_per_second": total.get("bits_per_second"),
            "rtt_ms": rtt / 1000 if isinstance(rtt, (int, float)) else None,
            "cwnd_bytes": first.get("snd_cwnd"),
            "lost_percent": total.get("lost_percent")})

    def ended(self, code: int) -> None:
        """An rpm flow's client has ended with status `code`: its result, read by the
        runner `lab run` reads it with."""
        if self.flow.kind != "rpm":
            return
        outcome = FlowOutcome(self.flow, self.address)
        kinds.runners(None)["rpm"].read(outcome, self.said, "", code)
        if outcome.rpm is not None:
            self.rpm = float(outcome.rpm)
            self.samples.append({"at": time.time(), "bits_per_second": outcome.throughput,
                                 "rpm": self.rpm})
        elif self.state == "running":
            self.state = f"failed: {outcome.error or 'its client gave no responsiveness'}"

    def along(self, routed: Topology) -> None:
        """Its path, and theory's goodput and base RTT, along `routed`'s routes (a routed
        lab's as its kernels hold them now)."""
        self.path = _path(routed, self.flow.source, self.address)
        outcome = FlowOutcome(self.flow, self.address)
        with contextlib.suppress(TopologyError, ValueError, KeyError):  # else it just runs
            theory.predict(routed, [outcome], system_congestion_control(), [self.seconds])
            self.predicted, self.base_rtt = outcome.predicted, outcome.base_rtt


class PageFlows:
    """The flows the page has started, every lab's."""

    def __init__(self) -> None:
        self.running: dict[int, PageFlow] = {}
        self.numbers = itertools.count(1)
        self._lock = threading.Lock()

    def of(self, lab: str) -> list[dict[str, Any]]:
        with self._lock:
            return [flow.view() for flow in self.running.values() if flow.lab == lab]

    def start(self, lab: str, model: Topology, asked: Any) -> PageFlow:
        """A flow across `lab` as `asked`; blocks while its server comes up."""
        flow = _flow_of(model, asked)
        with self._lock:
            if sum(f.state in ("starting", "running") for f in self.running.values()) >= \
                    MAX_FLOWS:
                raise FlowError(f"{MAX_FLOWS} flows run already: stop one first")
            number = next(self.numbers)
        address = flow.address or str(model.address_of(flow.target))
        outcome = FlowOutcome(flow, address)
        seconds = flow.spec.duration(flow, _timing(flow))
        started = PageFlow(number, lab, flow, address, seconds)
        started.along(_routed(model))
        with self._lock:
            ended = [n for n, f in self.running.items() if f.state not in ("starting",
                                                                            "running")]
            for old in ended[:max(0, len(self.running) - 2 * MAX_FLOWS)]:
                del self.running[old]  # the oldest ended flows leave the page
            self.running[number] = started
        try:
            self._launch(started, outcome)
        except (OSError, FlowError) as error:
            started.state = f"failed: {error}"
            self.stop(number)
            raise FlowError(str(error)) from None
        journal.note(lab, f"flow {number} started: {flow.kind} {flow.source} -> "
                          f"{flow.target} for {seconds:g} s", "page")
        return started

    def reroute(self, lab: str, model: Topology) -> None:
        """After a change to `lab`: its running flows' paths along the routes now, and
        theory's goodput along them."""
        with self._lock:
            moving = [flow for flow in self.running.values()
                      if flow.lab == lab and flow.state in ("starting", "running")]
        if moving:
            routed = _routed(model)
            for flow in moving:
                flow.along(routed)

    def _launch(self, started: PageFlow, outcome: FlowOutcome) -> None:
        flow, runner = started.flow, kinds.runners(None)[started.flow.kind]
        port = str(FIRST_PORT + started.number % 10000)
        command = runner.server(flow, started.address, port)
        if command is not None:
            server = self._recorded(started, flow.target, command, "server",
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if not runner.ready(server, READY_SECONDS, port):
                raise FlowError(f"the flow's server in {flow.target} did not start")
        client = runner.client(outcome, port, 1.0, started.seconds, _timing(flow))
        if flow.kind != "rpm":  # rpm: its whole result at its end (it has no stream)
            client = ["--json-stream" if word == "-J" else word for word in client]
        process = self._recorded(started, flow.source, client, "client",
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 text=True)
        started.state = "running"
        threading.Thread(target=self._follow, args=(started, process), daemon=True,
                         name=f"flow {started.number}").start()

    def _recorded(self, started: PageFlow, node: str, command: list[str], role: str,
                  **popen: Any) -> subprocess.Popen:
        """`command` in `node`, recorded in the lab's record (`lab down` ends it)."""
        with ownership.locked(started.lab):
            record = ownership.load(started.lab)
            if record is None:
                raise FlowError(f"lab {started.lab} is not up")
            process = ownership.start_recorded(
                record, node, command, f"lab web flow {started.number} {role}", **popen)
        started.processes.append(process)
        return process

    def _follow(self, started: PageFlow, client: subprocess.Popen) -> None:
        assert client.stdout is not None
        for line in client.stdout:
            started.read(line)
        code = client.wait()
        started.ended(code)
        if started.state == "running":
            started.state = "ended" if code == 0 or started.samples else \
                f"failed: its client ended with status {code}"
        self.stop(started.number, keep=True)

    def stop(self, number: int, keep: bool = False) -> PageFlow | None:
        """End a flow's processes (ours, by pid) and take them off the lab's record;
        `keep`: its readings stay on the page."""
        with self._lock:
            started = self.running.get(number)
        if started is None:
            return None
        if started.state in ("starting", "running"):
            started.state = "stopped"  # before its client ends: not "ended" by itself
            if started.processes:
                journal.note(started.lab, f"flow {number} stopped", "page")
        for process in started.processes:
            if process.poll() is None:
                process.terminate()
        for process in started.processes:
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        with ownership.locked(started.lab):
            record = ownership.load(started.lab)
            for process in started.processes:
                if record is not None:
                    ownership.remove_process(record, process.pid)
        started.processes = []
        if not keep:
            with self._lock:
                self.running.pop(number, None)
        return started

    def stop_all(self) -> None:
        for number in list(self.running):
            self.stop(number)


def _timing(flow: model_flows.Flow) -> model_flows.Timing:
    """A page's flow runs for its duration (DEFAULT_SECONDS without one): a ping flow
    too, a reply a second (or at its interval) unless it gives a count."""
    seconds = flow.duration or DEFAULT_SECONDS
    return model_flows.Timing(duration=seconds, ping_interval=1.0,
                              ping_count=max(1, round(seconds / (flow.interval or 1.0))))


def _path(routed: Topology, source: str, address: str) -> list[str]:
    """The links from `source` to `address`, in order (none where there is no path)."""
    try:
        return [link.name for link, _ in theory.path(routed, source, address).hops]
    except (TopologyError, ValueError):
        return []


def _routed(model: Topology) -> Topology:
    """The model with the routes a routed lab's kernels hold now (as `lab status` reads
    them); the model as it is if they cannot be read."""
    try:
        return tables.routed(model)
    except (CommandError, TopologyError, ValueError):
        return model


def _flow_of(model: Topology, asked: Any) -> model_flows.Flow:
    try:
        flow = model_flows.parse(asked, "the page's flow")
    except ExperimentError as error:
        raise FlowError(str(error)) from None
    if flow.kind not in LIVE_KINDS:
        raise FlowError(f"the page runs {', '.join(LIVE_KINDS)} flows, not {flow.kind}")
    for node in (flow.source, flow.target):
        if node not in model.nodes:
            raise FlowError(f"the page's flow: no node {node} in lab {model.name}")
    if flow.source == flow.target:
        raise FlowError("the page's flow: from and to are the same node")
    if flow.kind == "rpm" and (flow.tool != "simpleperf" or flow.meter == "mach"):
        raise FlowError("the page's rpm flows are simpleperf's, server and client "
                        "(nginx and mach run in experiments: simpleperf lab run "
                        "responsiveness)")
    return flow
