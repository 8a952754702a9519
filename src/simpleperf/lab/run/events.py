"""A step's events while its flows run: each change made at its time on the flows' clock,
every router's route changes watched (`ip -ts monitor route`), and a fine probe stream
beside each flow (ping every 10 ms) whose silence is the data plane's outage. After the
flows, each event gets its outage, convergence, throughput dip and recovery, and the
network is put back as the topology built it.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from ..analysis import events as analysis
from ..model import theory
from ..model.events import Event
from ..model.outcomes import EventFlow, EventOutcome, FlowOutcome
from ..model.topology import Topology
from ..net import changes, ownership
from ..net.routing import convergence, tables
from ..net.system import CommandError, system_congestion_control

PROBE_INTERVAL = 0.01  # seconds between probe pings: the outage's resolution
THEORY_SETTLE = 2.0  # seconds after an event at which theory reads the routes again
EVENT_INTERVAL = 0.1  # seconds per throughput sample while events happen (else 1 s)
RESTORE_BOUND = 30.0  # seconds for routing to converge again after a step's events
_MONITOR_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\dT[\d:.]+)\]")
_PING_LINE = re.compile(r"^\[(\d+\.\d+)\] \d+ bytes from")

Starter = Callable[[str, list[str], str], subprocess.Popen]
Finisher = Callable[[subprocess.Popen, float], tuple[str, str, int]]


class StepEvents:
    """Plays one step's events and measures what they did."""

    def __init__(self, record: ownership.LabRecord, model: Topology, events: tuple[Event, ...],
                 start: Starter, finish: Finisher) -> None:
        self.record, self.model, self.events = record, model, events
        self._start, self._finish = start, finish
        self.outcomes = [EventOutcome(event.describe(), event.at) for event in events]
        self._monitors: dict[str, subprocess.Popen] = {}
        self._probes: dict[int, subprocess.Popen] = {}
        self._cancel = threading.Event()
        self._player: threading.Thread | None = None
        self._start_at = 0.0
        self._flows: list[FlowOutcome] = []
        self._folder = Path()

    def begin(self, start_at: float, flows: list[FlowOutcome], launcher: list[str],
              duration: Callable[[FlowOutcome], float]) -> None:
        """Before the flows start: watch the routers, probe beside each flow from its
        start, and play the events from `start_at` (monotonic) on."""
        self._start_at = start_at
        self._flows = flows
        self._folder = Path(tempfile.mkdtemp(prefix=f"simpleperf-{self.record.lab}-events-"))
        with ownership.locked(self.record.lab):
            ownership.add_folder(self.record, self._folder)
        if self.model.runs_daemons:
            for router in self.model.routers():
                self._monitors[router] = self._start(router, ["ip", "-ts", "monitor", "route"],
                                                     f"route monitor in {router}")
        for index, outcome in enumerate(flows):
            if outcome.flow.spec.measured:
                count = max(1, int(duration(outcome) / PROBE_INTERVAL))
                # Into a file: a pipe nobody reads until the end would fill and stop ping.
                self._probes[index] = self._start(outcome.flow.source, [
                    *launcher, f"{start_at:.6f}", "--", "sh", "-c", 'out=$1; shift; exec "$@" '
                    '> "$out"', "sh", str(self._folder / f"probe{index}.txt"), "ping", "-n",
                    "-D", "-c", str(count), "-i", f"{PROBE_INTERVAL:g}", "-W", "1",
                    outcome.address], f"outage probe in {outcome.flow.source}")
        self._player = threading.Thread(target=self._play, daemon=True)
        self._player.start()

    def _play(self) -> None:
        upcoming = [event.at for event in self.events[1:]] + [None]
        for event, outcome, following in zip(self.events, self.outcomes, upcoming,
                                             strict=True):
            wait = self._start_at + event.at - time.monotonic()
            if self._cancel.wait(max(0.0, wait)):
                return
            began = time.monotonic()
            outcome.applied = began - self._start_at
            try:
                changes.apply(self.record, self.model,
                              changes.Change(event.target, event.action, event.shaping or None))
            except (CommandError, ValueError) as error:
                outcome.error = str(error)[:200]
            outcome.took = time.monotonic() - began
            # Theory for the network the event made: once routing has had time to settle,
            # or just before the next event.
            settle = THEORY_SETTLE if following is None else min(
                THEORY_SETTLE, self._start_at + following - time.monotonic() - 0.05)
            if self._cancel.wait(max(0.0, settle)):
                return
            self._theory_now(outcome)

    def _theory_now(self, outcome: EventOutcome) -> None:
        """What theory predicts for each flow along the routes and links as they are now."""
        model = tables.routed(changes.current(self.record, self.model))
        fresh = [FlowOutcome(flow.flow, flow.address) for flow in self._flows]
        theory.predict(model, fresh, system_congestion_control())
        outcome.theory = {flow.flow.label: (flow.predicted, flow.base_rtt) for flow in fresh}

    def cancel(self) -> None:
        """No more changes (Ctrl-C, or the flows have ended)."""
        self._cancel.set()
        if self._player is not None:
            self._player.join()

    def end(self, flows: list[FlowOutcome]) -> list[EventOutcome]:
        """After the flows: stop what began, and measure each event."""
        self.cancel()
        offset = time.time() - time.monotonic() + self._start_at  # wall clock -> flows'
        route_changes = []
        for process in self._monitors.values():
            process.terminate()
            out, _, _ = self._finish(process, 5)
            route_changes += [_local_time(m.group(1)) - offset
                              for m in map(_MONITOR_LINE.match, out.splitlines()) if m]
        replies: dict[int, list[float]] = {}
        for index, process in self._probes.items():
            process.send_signal(signal.SIGINT)  # the flows are over; ping flushes and ends
            self._finish(process, 10)
            written = self._folder / f"probe{index}.txt"
            lines = written.read_text(errors="replace").splitlines() if written.exists() else []
            replies[index] = [float(m.group(1)) - offset
                              for m in map(_PING_LINE.match, lines) if m]
        shutil.rmtree(self._folder, ignore_errors=True)
        ends = [o.applied for o in self.outcomes[1:]] + [None]
        last = max((o.intervals[-1][1] for o in flows if o.intervals), default=0.0)
        for outcome, following in zip(self.outcomes, ends, strict=True):
            if outcome.applied is None:
                continue
            until = following if following is not None else max(last, outcome.applied + 1)
            # The change holds from when its command returned (a few milliseconds on).
            done = outcome.applied + (outcome.took or 0.0)
            within = [t for t in route_changes if outcome.applied <= t < until]
            outcome.route_changes = len(within)
            outcome.convergence = analysis.convergence(route_changes, outcome.applied, until)
            for index, flow in enumerate(flows):
                if index not in replies:
                    continue
                dip, recovery = analysis.throughput_dip(flow.intervals, done, until)
                predicted, base_rtt = outcome.theory.get(flow.flow.label, (None, None))
                outcome.flows.append(EventFlow(
                    flow.flow.label, analysis.outage(replies[index], done, until,
                                                     PROBE_INTERVAL), dip, recovery,
                    predicted, base_rtt))
        return self.outcomes

    def restore(self, say: Callable[[str], None]) -> None:
        """The network as the topology built it, routing converged, before the next step."""
        try:
            restored = changes.restore(self.record, self.model)
        except CommandError as error:
            say(f"  warning: putting the network back failed: {error}")
            return
        if not restored or not self.model.runs_daemons:
            return
        try:
            done = convergence.wait(self.record.lab, self.model, RESTORE_BOUND, reachable=True)
            say(f"  restored {', '.join(restored)}; routing converged in {done.settled:.2f} s")
        except ValueError as error:
            say(f"  warning: after restoring {', '.join(restored)}: {error}")


def _local_time(stamp: str) -> float:
    """`ip -ts` prints the local time without a zone."""
    return datetime.fromisoformat(stamp).timestamp()
