"""`simpleperf lab run`: build the topology, run every step, store, report, tear down.

A sweep runs the steps at every value of one parameter: a link parameter of the pair
topology (the lab is rebuilt for each value) or a parameter of every tcp flow.

Ctrl-C stops the step that is running, keeps every finished measurement, writes the results
and the report for what exists, and removes the lab. A lab of the same name that is already
up (simpleperf lab up) is used as it is and left up.
"""

from __future__ import annotations

import json
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, NoReturn

from ..model import experiment as experiments
from ..model import topology
from ..model.experiment import Experiment, Step, Timing
from ..model.outcomes import StepOutcome, summarize_rtts
from ..model.verdicts import TOLERANCE, case_verdicts
from ..net import capture, lifecycle, ownership
from ..net.system import (
    CommandError,
    namespace_default_allowed,
    require_congestion,
    system_congestion_control,
)
from ..results.store import ResultsError, Store, check_writable, load_run
from ..results.tables import case_report, event_lines, path_lines, sweep_report
from .applications import Applications
from .captures import StepCaptures
from .kinds import require_programs
from .progress import StepProgress
from .step import StepRunner


def _model(plan: Experiment, value: str | None) -> tuple[topology.Topology, dict[str, Any]]:
    if plan.topology == "pair":
        parameters = experiments.link_parameters(plan, value)
        return _defaulted(plan, topology.pair(**parameters)), {"pair": parameters}
    model = topology.load(plan.topology)
    return _defaulted(plan, model), {"file": model.source}


def _defaulted(plan: Experiment, model: topology.Topology) -> topology.Topology:
    """The experiment's congestion control as the default of every node that names none
    (the topology's choice wins): what its applications' TCP (scp, http) runs too, where
    the kernel allows a namespace that default (else they run the system's, and theory
    says so)."""
    if plan.congestion is None or plan.congestion == system_congestion_control() \
            or not namespace_default_allowed(plan.congestion):
        return model
    nodes = {name: node if node.congestion is not None
             else replace(node, congestion=plan.congestion)
             for name, node in model.nodes.items()}
    return replace(model, nodes=nodes)


def _at_point(step: Step, plan: Experiment, value: str | None) -> Step:
    if value is None or plan.sweep is None:
        return step
    name = f"{step.name} [{plan.sweep.parameter}={value}]"
    if plan.sweep.of_link:
        return replace(step, name=name)
    number = experiments.flow_value(plan.sweep.parameter, value)
    changes: dict[str, Any] = {plan.sweep.parameter: number}
    flows = tuple(replace(flow, **changes) if plan.sweep.parameter in flow.spec.fields
                  else flow for flow in step.flows)
    return replace(step, name=name, flows=flows)


def quick_factor(plan: Experiment, quick: bool) -> float:
    """How much shorter a quick run's steps are than a full run's (1: not quick)."""
    if not quick or plan.timing.duration <= 0:
        return 1.0
    return min(1.0, plan.quick.duration / plan.timing.duration)


def _quick_step(step: Step, plan: Experiment, quick: bool) -> Step:
    """A quick run shortens its steps: their events keep their place in them (at 8 s of
    24 s is at 2 s of 6 s), and a transfer of a fixed size (scp, http) moves that share of
    it (scp-loss-sweep's 100 MB at 10 % loss took CUBIC over ten minutes)."""
    factor = quick_factor(plan, quick)
    if factor >= 1.0:
        return step
    flows = tuple(replace(flow, size=max(1, round(flow.size * factor)))
                  if flow.spec.moves_size and flow.size else flow for flow in step.flows)
    return replace(step, flows=flows, events=tuple(
        replace(event, at=round(event.at * factor, 3)) for event in step.events))


class _Lab:
    """The lab a run uses: built for it (and removed after), or one already up."""

    def __init__(self, model: topology.Topology, spec: dict[str, Any], shaper: str | None,
                 say) -> None:
        existing = ownership.load(model.name)
        self.reused = False
        if existing is not None and existing.state == "up" and existing.persistent:
            say(f"using lab {model.name}, which is already up (it stays up)")
            self.reused = True
            self.record = existing
        else:
            say(f"building lab {model.name} ...")
            self.record = lifecycle.up(model, spec, shaper, persistent=False, say=say)

    def release(self) -> None:
        if not self.reused:
            with ownership.locked(self.record.lab):
                ownership.tear_down(self.record)
            ownership.lock_path(self.record.lab).unlink(missing_ok=True)


def _say(line: str) -> None:
    print(line, flush=True)  # progress must show even when the output goes to a file


class _Interrupts:
    """Ctrl-C and SIGTERM while a run is on: the first ends the steps (KeyboardInterrupt);
    no later one cuts the cleanup short (a step's clients, an scp and its ssh, would live on
    in the lab's removed namespaces). Only where signals can be handled (the main thread)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.seen = False
        self.previous: dict[int, Any] = {}

    def __call__(self, signum: int, frame: Any) -> None:
        if not self.seen:
            self.seen = True
            raise KeyboardInterrupt

    def __enter__(self) -> _Interrupts:
        if threading.current_thread() is threading.main_thread():
            self.previous = {signum: signal.signal(signum, self) for signum in self.SIGNALS}
        return self

    def __exit__(self, *failure: object) -> None:
        for signum, handler in self.previous.items():
            # once interrupted, the run is ending: a later signal has nothing left to stop
            # (and would end the process by the signal, not with the interrupted status)
            signal.signal(signum, signal.SIG_IGN if self.seen else handler)


def run_experiment(name_or_path: str, quick: bool, results_root: Path, shaper: str | None = None,
                   say=_say, allow_commands: bool = False,
                   congestion: str | None = None) -> Path:
    with _Interrupts():
        return _run(name_or_path, quick, results_root, shaper, say, allow_commands, congestion)


def _run(name_or_path: str, quick: bool, results_root: Path, shaper: str | None, say,
         allow_commands: bool, congestion: str | None) -> Path:
    plan = experiments.load(name_or_path, congestion)
    progress = StepProgress(sys.stdout) if say is _say else None  # drawn between our lines
    say = progress.say if progress is not None else say
    _commands_allowed(plan, name_or_path, allow_commands, say)
    first_model, _ = _model(plan, plan.sweep.values[0] if plan.sweep else None)
    _preflight(plan, first_model)
    lifecycle.require_root()
    check_writable(results_root)  # before anything is built
    folder = results_root / f"{plan.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    points: list[str | None] = list(plan.sweep.values) if plan.sweep else [None]
    rounds = plan.sweep.repeat if plan.sweep else 1
    total = len(points) * rounds * sum(step.repeat for step in plan.steps)
    factor = quick_factor(plan, quick)
    if factor < 1.0 and any(flow.spec.moves_size and flow.size
                            for step in plan.steps for flow in step.flows):
        say(f"quick run: steps of {plan.quick.duration:g} s (of {plan.timing.duration:g}), and "
            f"fixed-size transfers move {factor:.2g} x their size")
    store: Store | None = None
    lab: _Lab | None = None
    runner: StepRunner | None = None
    interrupted = False
    failure: ResultsError | None = None
    done, began = 0, time.monotonic()
    try:
        for value in points:
            model, spec = _model(plan, value)
            if lab is None or (plan.sweep is not None and plan.sweep.of_link):
                if lab is not None:
                    lab.release()
                    lab = None
                lab = _Lab(model, spec, shaper, say)
            if store is None:
                store = Store(folder)
                store.begin(plan.name, quick, lab.record.shaper,
                            model.source or "pair " + json.dumps(spec["pair"]), plan.source)
            if runner is not None and runner.applications is not None:
                runner.applications.remove()  # the lab is rebuilt: so are its servers' files
            runner = _runner(plan, model, lab.record, plan.quick if quick else plan.timing,
                             say, folder, progress)
            for round_number in range(1, rounds + 1):
                for step in plan.steps:
                    here = _quick_step(_at_point(step, plan, value), plan, quick)
                    for repetition in range(1, step.repeat + 1):
                        done += 1
                        say(_step_line(here, done, total, began, (repetition, step.repeat),
                                       (round_number, rounds)))
                        outcome = runner.run_step(here, (round_number - 1) * step.repeat
                                                  + repetition, done)
                        if plan.sweep is not None:
                            outcome.sweep = (plan.sweep.parameter, str(value))
                        store.add_step(outcome)
                        for line in _progress(outcome):
                            say("    " + line)
    except KeyboardInterrupt:
        interrupted = True
        say("interrupted: keeping the finished measurements, cleaning up ...")
        if runner is not None:
            runner.stop_all()
    except ResultsError as error:  # the disk filled up: stop measuring what cannot be kept
        failure = error
    finally:
        unfinished = _clean_up(runner, lab, store, interrupted)  # always, first
        failure = failure or unfinished
    if failure is not None:
        _give_up(failure, store)
    if store is None:  # interrupted before the first lab was up: nothing was measured
        raise KeyboardInterrupt
    try:
        _report(store, plan, say)
    finally:
        store.close()
    if interrupted:
        raise KeyboardInterrupt
    return folder


def _clean_up(runner: StepRunner | None, lab: _Lab | None, store: Store | None,
              interrupted: bool) -> ResultsError | None:
    """After the steps, whatever ended them: servers' files, the lab, and the results
    marked finished (or the error that kept them from it). Ctrl-C and SIGTERM wait for it."""
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in _Interrupts.SIGNALS}
    try:
        if runner is not None and runner.applications is not None:
            runner.applications.remove()
        if lab is not None:
            lab.release()
        if store is not None:
            store.finish(interrupted)
    except ResultsError as error:
        return error
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return None


def _step_line(step: Step, done: int, total: int, began: float, repetition: tuple[int, int],
               round_: tuple[int, int]) -> str:
    """`[3/10] case 2: name`, with the time left estimated from the steps run so far."""
    line = (f"[{done}/{total}] case {step.case}: {step.name}"
            + (f" (repetition {repetition[0]})" if repetition[1] > 1 else "")
            + (f" (round {round_[0]})" if round_[1] > 1 else ""))
    if done > 1:
        left = (time.monotonic() - began) / (done - 1) * (total - done + 1)
        line += f"  [about {_duration(left)} left]"
    return line


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def _give_up(failure: ResultsError, store: Store | None) -> NoReturn:
    if store is not None:
        store.close()
    raise ResultsError(f"{failure} (the lab is down; what was written is marked "
                       "incomplete)" if store is not None else f"{failure} (the lab is "
                       "down; nothing was written)")


def _runner(plan: Experiment, model: topology.Topology, record: ownership.LabRecord,
            timing: Timing, say: Callable[[str], None], folder: Path,
            progress: StepProgress | None) -> StepRunner:
    """A runner for one build of the lab. The applications' keys and files go in a folder
    the lab's record holds, so that even a killed run's `lab down` removes it."""
    captures = (StepCaptures(model, record, folder / "captures", plan.capture_limit)
                if plan.captures() else None)
    applications = None
    if any(f.spec.application for step in plan.steps for f in step.flows):
        made = Path(tempfile.mkdtemp(prefix=f"simpleperf-{record.lab}-"))
        with ownership.locked(record.lab):
            ownership.add_folder(record, made)
        applications = Applications(made)
    return StepRunner(model, record, timing, say, applications, captures, progress)


def _commands_allowed(plan: Experiment, name_or_path: str, allowed: bool,
                      say: Callable[[str], None]) -> None:
    """An experiment file of one's own may run command flows only when its user says so:
    they run as root, and the lab's namespaces share the machine's files. Those that run
    are said first."""
    commands = plan.commands()
    if commands and not plan.shipped and not allowed:
        raise experiments.ExperimentError(
            f"{name_or_path} runs {len(commands)} command line{'s' * (len(commands) > 1)} as "
            "root on this machine (the lab's nodes share its files): read them, then give "
            "--allow-commands")
    if commands:
        say("Command flows run as root in the lab's nodes, which share this machine's files: "
            + "; ".join(commands))


def _preflight(plan: Experiment, model: topology.Topology) -> None:
    """What a run needs and can be known before it starts: the programs of its application
    flows, and capture points that exist (one line each, nothing built)."""
    experiments.check_against(plan, set(model.nodes), {link.name for link in model.links})
    try:
        flows = [flow for step in plan.steps for flow in step.flows]
        require_programs({flow.kind for flow in flows}, {flow.tool for flow in flows},
                         {flow.meter for flow in flows if flow.spec.responsiveness})
        require_congestion(plan.congestion_controls())
        if plan.captures():
            capture.require_dumpcap()
            capture.require_dpkt()
            for where in sorted(plan.captures()):
                capture.resolve(model, where)
    except (CommandError, capture.CaptureError) as error:
        raise experiments.ExperimentError(str(error)) from None


def _report(store: Store, plan: Experiment, say: Callable[[str], None]) -> None:
    """Tables, plots and report.html; only then is the run marked complete."""
    folder = store.folder
    run = load_run(folder)
    say(sweep_report(run) if plan.sweep else case_report(run, plan.cases))
    say(f"\nVerdicts ({TOLERANCE}):")
    for verdict in case_verdicts(run["steps"]):
        say(f"  case {verdict.case}: {verdict.summary()}")
        for note in verdict.notes:
            say(f"    {note}")
    from ..results.report import NO_PLOTS, plotting_available, write_report

    if not plotting_available():
        say(f"note: {NO_PLOTS}")

    try:
        report = write_report(folder, run, plan.cases)
    except OSError as error:
        raise ResultsError(f"cannot write the report in {folder}: "
                           f"{error.strerror or error} (the run is marked incomplete)") from None
    store.complete()
    say(f"\nresults: {folder} (results.sqlite, flows.csv, intervals.csv, probes.csv, "
        f"events.csv, rate_trials.csv, results.json, plots, {report.name})")


def _progress(outcome: StepOutcome) -> list[str]:
    lines = []
    for flow in outcome.flows:
        if not flow.ok:
            lines.append(f"{flow.flow.label}: FAILED: {flow.error}")
            continue
        parts = [f"{flow.flow.label} ({flow.flow.kind})"]
        rtt = summarize_rtts(flow.rtts)
        if rtt:
            parts.append(f"RTT avg {rtt['avg']:.1f} ms (idle theory {flow.base_rtt:.1f})")
        if flow.throughput is not None:
            parts.append(f"{flow.throughput / 1e6:.2f} Mbit/s"
                         + (f" (theory {flow.predicted / 1e6:.2f})" if flow.predicted else ""))
        if flow.seconds is not None:
            parts.append(f"{flow.seconds:.2f} s, exit status {flow.exit_status}")
        if flow.delivered_ce and flow.flow.spec.tcp:
            parts.append(f"{flow.delivered_ce} segments echoed CE-marked, {flow.retransmits} "
                         "retransmitted")
        elif flow.delivered_ce:
            parts.append(f"{flow.delivered_ce} datagrams arrived CE-marked")
        if flow.loss_percent is not None:
            parts.append(f"jitter {flow.jitter_ms:.3f} ms, loss {flow.loss_percent:.3f} %")
        if flow.one_way_ms is not None:
            least, mean, p99 = flow.one_way_ms
            parts.append(f"path one-way delay {mean:.1f} ms (min {least:.1f}, p99 {p99:.1f}; "
                         f"theory at least {flow.base_one_way or 0:.1f})")
        if flow.write_delay_ms is not None:
            parts.append(f"write-to-read (the application's, sender's buffer included) "
                         f"{flow.write_delay_ms[0]:.1f} ms")
        if flow.frames is not None and flow.frame_latency_ms is not None:
            whole, lost = flow.frames
            frame_mean, frame_p99 = flow.frame_latency_ms
            parts.append(f"frames {whole} whole, {lost} lost, latency {frame_mean or 0:.1f} ms "
                         f"(p99 {frame_p99 or 0:.1f})")
        lines.append(", ".join(parts))
    if outcome.fairness is not None:
        lines.append(f"Jain's fairness index {outcome.fairness:.3f}")
    for flow in outcome.flows:
        lines += path_lines({"label": flow.flow.label, "paths": flow.paths,
                             "theory_path": flow.theory_path,
                             "mptcp_subflows": flow.mptcp_subflows})
    for event in outcome.events:
        lines += event_lines(asdict(event))
    for taken in outcome.captures:
        if taken.error and not taken.tcp and not taken.udp:
            lines.append(f"capture {taken.where}: FAILED: {taken.error}")
            continue
        lines.append(f"capture {taken.where}: {taken.packets} packets -> {taken.path}"
                     + (" (CUT SHORT by the size cap: capture_limit)" if taken.cut_short
                        else "")
                     + (f" ({taken.dropped} dropped by the capture itself)" if taken.dropped
                        else ""))
        for row in taken.tcp:
            ratio = row["retransmission_ratio"] or 0
            lines.append(f"  TCP {row['source_port']}->{row['destination_port']}: "
                         f"{row['data_segments']} segments, {row['retransmissions']} "
                         f"retransmitted ({ratio * 100:.3f} %)")
    return lines
