"""`simpleperf lab run`: build the topology, run every step, store, report, tear down.

Ctrl-C stops the step that is running, keeps every finished measurement, writes the results
and the report for what exists, and removes the lab. A lab of the same name that is already
up (simpleperf lab up) is used as it is and left up.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from . import experiment as experiments
from . import lifecycle, ownership, topology
from .runner import Runner, StepOutcome, summarize_rtts
from .store import Store, load_run
from .tables import case_report


def run_experiment(name_or_path: str, quick: bool, results_root: Path, shaper: str = "auto",
                   say=print) -> Path:
    plan = experiments.load(name_or_path)
    model = topology.load(plan.topology)
    experiments.check_against(plan, set(model.nodes))
    timing = plan.quick if quick else plan.timing
    lifecycle.require_root()
    folder = results_root / f"{plan.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    existing = ownership.load(model.name)
    reuse = existing is not None and existing.state == "up" and existing.persistent
    if reuse:
        say(f"using lab {model.name}, which is already up (it stays up)")
        record = existing
    else:
        say(f"building lab {model.name} ...")
        record = lifecycle.up(model, {"file": model.source}, shaper, persistent=False, say=say)
    store = Store(folder)
    store.begin(plan.name, quick, record.backend, model.source, plan.source)
    interrupted = False
    runner = Runner(model, record, timing, say)
    total = sum(step.repeat for step in plan.steps)
    done = 0
    try:
        for step in plan.steps:
            for repetition in range(1, step.repeat + 1):
                done += 1
                say(f"[{done}/{total}] case {step.case}: {step.name}"
                    + (f" (repetition {repetition})" if step.repeat > 1 else ""))
                outcome = runner.run_step(step, repetition)
                store.add_step(outcome)
                for line in _progress(outcome):
                    say("    " + line)
    except KeyboardInterrupt:
        interrupted = True
        say("interrupted: keeping the finished measurements, cleaning up ...")
        runner.stop_all()
    finally:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # let the cleanup finish
        try:
            if not reuse:
                with ownership.locked(model.name):
                    ownership.tear_down(record)
            store.finish(interrupted)
            store.close()
        finally:
            signal.signal(signal.SIGINT, previous)
    run = load_run(folder)
    say(case_report(run, plan.cases))
    from .html import write_report  # matplotlib loads only when a report is written
    report = write_report(folder, run, plan.cases)
    say(f"\nresults: {folder} (results.sqlite, flows.csv, intervals.csv, probes.csv, "
        f"results.json{', ' + report.name if report else ''})")
    if interrupted:
        raise KeyboardInterrupt
    return folder


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
        if flow.loss_percent is not None:
            parts.append(f"jitter {flow.jitter_ms:.3f} ms, loss {flow.loss_percent:.3f} %")
        lines.append(", ".join(parts))
    if outcome.fairness is not None:
        lines.append(f"Jain's fairness index {outcome.fairness:.3f}")
    return lines
