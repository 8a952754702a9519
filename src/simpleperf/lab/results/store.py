"""Results of a run in SQLite (one file per run folder), with CSV and JSON exports.

Every flow, every interval and every RTT probe is stored, with the topology, the experiment,
tool versions, kernel and shaping backend, so a run can be understood and compared later.
"""

from __future__ import annotations

import csv
import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ... import __version__
from ..analysis import tcp
from ..model.experiment import FIRST_PORT
from ..model.outcomes import StepOutcome, summarize_rtts
from ..net.system import system_congestion_control
from .errors import ResultsError

DATABASE = "results.sqlite"
SCHEMA = """
CREATE TABLE run (id INTEGER PRIMARY KEY, experiment TEXT, started REAL, finished REAL,
    quick INTEGER, interrupted INTEGER, shaper TEXT, metadata TEXT, topology_toml TEXT,
    experiment_toml TEXT, complete INTEGER DEFAULT 0);
CREATE TABLE step (id INTEGER PRIMARY KEY, position INTEGER, repetition INTEGER, "case" TEXT,
    name TEXT, start_spread_ms REAL, fairness REAL, interrupted INTEGER,
    sweep_parameter TEXT, sweep_value TEXT);
CREATE TABLE flow (id INTEGER PRIMARY KEY, step_id INTEGER REFERENCES step(id), position
    INTEGER, kind TEXT, label TEXT, source TEXT, target TEXT, address TEXT, parameters TEXT,
    ok INTEGER, error TEXT, started REAL, throughput REAL, sender_throughput REAL,
    predicted REAL, base_rtt_ms REAL, full_queue_rtt_ms REAL, rtt_min REAL, rtt_avg REAL,
    rtt_median REAL, rtt_max REAL, rtt_mdev REAL, jitter_ms REAL, lost INTEGER,
    packets INTEGER, loss_percent REAL, rate REAL, connections TEXT, window_bound REAL,
    mathis_bound REAL, retransmits INTEGER, seconds REAL, exit_status INTEGER, output TEXT,
    paths TEXT, theory_path TEXT, one_way_min_ms REAL, one_way_mean_ms REAL,
    one_way_p99_ms REAL, base_one_way_ms REAL, frames INTEGER, frames_lost INTEGER,
    frame_latency_mean_ms REAL, frame_latency_p99_ms REAL, congestion TEXT, bottleneck TEXT,
    epochs REAL, share_tolerance REAL, epoch_seconds REAL, write_to_read_mean_ms REAL,
    write_to_read_p99_ms REAL, one_way_p50_ms REAL, delivered_ce INTEGER,
    trace_capacity TEXT, loaded_rtt_ms REAL, no_theory TEXT, host_dropped INTEGER,
    mptcp_subflows INTEGER, advertised_window REAL, own_rtt_ms REAL, pftk_bound REAL,
    loss_epoch_seconds REAL, rpm REAL, rpm_theory REAL, rpm_low REAL, rpm_high REAL,
    rpm_detail TEXT);
CREATE TABLE interval (flow_id INTEGER REFERENCES flow(id), start REAL, "end" REAL,
    bits_per_second REAL);
CREATE TABLE probe (flow_id INTEGER REFERENCES flow(id), seq INTEGER, rtt_ms REAL);
CREATE TABLE rate_trial (flow_id INTEGER REFERENCES flow(id), trial INTEGER, offered REAL,
    received REAL, lost_percent REAL, queue_growth_ms REAL, good INTEGER);
CREATE TABLE capture (id INTEGER PRIMARY KEY, step_id INTEGER REFERENCES step(id),
    place TEXT, path TEXT, packets INTEGER, dropped INTEGER, cut_short INTEGER, error TEXT);
CREATE_CAPTURE_TCP
CREATE TABLE capture_udp (capture_id INTEGER REFERENCES capture(id), flow_id INTEGER, source
    TEXT, source_port INTEGER, destination TEXT, destination_port INTEGER, datagrams INTEGER,
    bytes INTEGER, gaps INTEGER, reordered INTEGER, duplicates INTEGER, jitter_ms REAL,
    one_way_min_ms REAL, one_way_avg_ms REAL, one_way_max_ms REAL);
CREATE TABLE event (id INTEGER PRIMARY KEY, step_id INTEGER REFERENCES step(id), position
    INTEGER, description TEXT, at REAL, applied REAL, took REAL, error TEXT,
    convergence REAL, route_changes INTEGER);
CREATE TABLE event_flow (event_id INTEGER REFERENCES event(id), label TEXT, outage REAL,
    dip REAL, recovery REAL, predicted REAL, base_rtt_ms REAL);
"""
# A capture's TCP direction: its ends, every count of analysis.tcp, and what follows.
TCP_TYPES = {"source": "TEXT", "source_port": "INTEGER", "destination": "TEXT",
             "destination_port": "INTEGER", **{count: "INTEGER" for count in tcp.COUNTS},
             "seconds": "REAL", "retransmission_ratio": "REAL", "rtt_min": "REAL",
             "rtt_avg": "REAL", "rtt_max": "REAL", "rtt_samples": "INTEGER",
             "throughput": "TEXT"}
TCP_COLUMNS = tuple(TCP_TYPES)
SCHEMA = SCHEMA.replace("CREATE_CAPTURE_TCP", "CREATE TABLE capture_tcp (capture_id INTEGER "
                        "REFERENCES capture(id), flow_id INTEGER, " + ", ".join(
                            f"{name} {kind}" for name, kind in TCP_TYPES.items()) + ");")
UDP_COLUMNS = ("source", "source_port", "destination", "destination_port", "datagrams",
               "bytes", "gaps", "reordered", "duplicates", "jitter_ms", "one_way_min_ms",
               "one_way_avg_ms", "one_way_max_ms")


def _version(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=5)
        return (done.stdout or done.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "not installed"


@contextmanager
def _writing(folder: Path) -> Iterator[None]:
    """A failed write (a full disk, a vanished folder) becomes one line naming the folder."""
    try:
        yield
    except (OSError, sqlite3.Error) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise ResultsError(f"cannot write the results in {folder}: {reason}") from None


def check_writable(root: Path) -> None:
    """Before a run builds anything: ResultsError if its results cannot go under `root`
    (created if missing, as the run would)."""
    with _writing(root):
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=root):
            pass


def check_readable(root: Path) -> None:
    """ResultsError for a results root that is not a readable folder."""
    if not root.is_dir():
        raise ResultsError(f"{root} is not a folder of results")
    try:
        next(root.iterdir(), None)
    except OSError as error:
        raise ResultsError(f"cannot read {root}: {error.strerror or error}") from None


class Store:
    """A run's results as they come. The run is marked complete only once everything,
    report included, is written: a run cut short by a full disk says it is incomplete."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.position = 0
        created = not folder.exists()
        try:
            with _writing(folder):
                folder.mkdir(parents=True, exist_ok=True)
                self.db = sqlite3.connect(folder / DATABASE)
                self.db.executescript(SCHEMA)
        except ResultsError:
            if created:  # nothing of it is worth keeping: leave no half-made folder
                shutil.rmtree(folder, ignore_errors=True)
            raise

    def begin(self, experiment: str, quick: bool, shaper: str, topology_toml: str,
              experiment_toml: str) -> None:
        with _writing(self.folder):
            self._begin(experiment, quick, shaper, topology_toml, experiment_toml)

    def _begin(self, experiment: str, quick: bool, shaper: str, topology_toml: str,
               experiment_toml: str) -> None:
        metadata = {"simpleperf": __version__, "python": sys.version.split()[0],
                    "kernel": platform.release(), "machine": platform.machine(),
                    "iperf3": _version(["iperf3", "--version"]),
                    "ping": _version(["ping", "-V"]), "shaper": shaper,
                    "congestion_control": system_congestion_control(),
                    "writer": {"pid": os.getpid(), "boot": boot_id()}}
        self.db.execute("INSERT INTO run VALUES (1, ?, ?, NULL, ?, 0, ?, ?, ?, ?, 0)",
                        (experiment, time.time(), int(quick), shaper, json.dumps(metadata),
                         topology_toml, experiment_toml))
        self.db.commit()

    def add_step(self, outcome: StepOutcome) -> None:
        with _writing(self.folder):
            self._add_step(outcome)

    def _add_step(self, outcome: StepOutcome) -> None:
        self.position += 1
        step_id = self.db.execute(
            "INSERT INTO step VALUES (NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (self.position, outcome.repetition, outcome.step.case, outcome.step.name,
             None if outcome.start_spread is None else outcome.start_spread * 1e3,
             outcome.fairness, int(outcome.interrupted),
             *(outcome.sweep or (None, None)))).lastrowid
        flow_ids: dict[int, int] = {}
        for position, flow in enumerate(outcome.flows, start=1):
            rtt = summarize_rtts(flow.rtts) or {}
            parameters = {k: v for k, v in asdict(flow.flow).items()
                          if k not in ("source", "target", "label", "kind")}
            flow_id = self.db.execute(
                "INSERT INTO flow VALUES (NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
                " ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
                " ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (step_id, position, flow.flow.kind, flow.flow.label, flow.flow.source,
                 flow.flow.target, flow.address, json.dumps(parameters), int(flow.ok),
                 flow.error, flow.started, flow.throughput, flow.sender_throughput,
                 flow.predicted, flow.base_rtt, flow.full_queue_rtt, rtt.get("min"),
                 rtt.get("avg"), rtt.get("median"), rtt.get("max"), rtt.get("mdev"),
                 flow.jitter_ms, flow.lost, flow.packets, flow.loss_percent, flow.rate,
                 json.dumps(flow.connection_throughputs), flow.window_bound,
                 flow.mathis_bound, flow.retransmits, flow.seconds, flow.exit_status,
                 flow.output, json.dumps(flow.paths), flow.theory_path,
                 *(flow.one_way_ms or (None, None, None)), flow.base_one_way,
                 *(flow.frames or (None, None)),
                 *(flow.frame_latency_ms or (None, None)), flow.congestion, flow.bottleneck,
                 flow.epochs, flow.share_tolerance, flow.epoch_seconds,
                 *(flow.write_delay_ms or (None, None)), flow.one_way_p50_ms,
                 flow.delivered_ce, json.dumps(flow.trace_capacity),
                 flow.loaded_rtt, flow.no_theory, flow.host_dropped,
                 flow.mptcp_subflows, flow.advertised_window, flow.own_rtt_ms,
                 flow.pftk_bound, flow.loss_epoch_seconds, flow.rpm,
                 *((flow.rpm_theory.rpm, flow.rpm_theory.low, flow.rpm_theory.high)
                   if flow.rpm_theory else (None, None, None)),
                 json.dumps(None if flow.rpm_detail is None else {
                     **flow.rpm_detail, **({} if flow.rpm_theory is None else {
                         "theory_foreign_ms": flow.rpm_theory.foreign_ms,
                         "theory_loaded_ms": flow.rpm_theory.loaded_ms})}))).lastrowid
            assert flow_id is not None
            flow_ids[position] = flow_id
            self.db.executemany("INSERT INTO interval VALUES (?, ?, ?, ?)",
                                [(flow_id, a, b, r) for a, b, r in flow.intervals])
            self.db.executemany("INSERT INTO probe VALUES (?, ?, ?)",
                                [(flow_id, i, r) for i, r in enumerate(flow.rtts, start=1)])
            self.db.executemany("INSERT INTO rate_trial VALUES (?, ?, ?, ?, ?, ?, ?)", [
                (flow_id, i, t.get("offered"), t.get("received"), t.get("lost_percent"),
                 t.get("queue_growth_ms"), int(bool(t.get("good"))))
                for i, t in enumerate(flow.probe_trials, start=1)])
        assert step_id is not None
        self._add_captures(step_id, outcome, flow_ids)
        for position, event in enumerate(outcome.events, start=1):
            event_id = self.db.execute(
                "INSERT INTO event VALUES (NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (step_id, position, event.description, event.at, event.applied, event.took,
                 event.error, event.convergence, event.route_changes)).lastrowid
            self.db.executemany("INSERT INTO event_flow VALUES (?, ?, ?, ?, ?, ?, ?)", [
                (event_id, f.label, f.outage, f.dip, f.recovery, f.predicted, f.base_rtt_ms)
                for f in event.flows])
        self.db.commit()

    def _add_captures(self, step_id: int, outcome: StepOutcome, flow_ids: dict[int, int]
                      ) -> None:
        """Each capture, and its flows matched to the step's flows by the flow's port (the
        runner gives flow n port FIRST_PORT + n - 1)."""
        by_port = {FIRST_PORT + position - 1: flow_id for position, flow_id in flow_ids.items()}
        for taken in outcome.captures:
            capture_id = self.db.execute(
                "INSERT INTO capture VALUES (NULL, ?, ?, ?, ?, ?, ?, ?)",
                (step_id, taken.where, str(Path(taken.path).relative_to(self.folder))
                 if Path(taken.path).is_relative_to(self.folder) else taken.path,
                 taken.packets, taken.dropped, int(taken.cut_short), taken.error)).lastrowid
            for row in taken.tcp:
                values = [json.dumps(row[c]) if c == "throughput" else row[c]
                          for c in TCP_COLUMNS]
                self.db.execute("INSERT INTO capture_tcp VALUES "
                                f"({', '.join('?' * (2 + len(TCP_COLUMNS)))})",
                                (capture_id, by_port.get(row["destination_port"])
                                 or by_port.get(row["source_port"]), *values))
            for row in taken.udp:
                self.db.execute(f"INSERT INTO capture_udp VALUES ({', '.join('?' * 15)})",
                                (capture_id, by_port.get(row["destination_port"]),
                                 *[row[c] for c in UDP_COLUMNS]))

    def finish(self, interrupted: bool) -> None:
        """The measurements are over: note when, and write the CSV exports."""
        with _writing(self.folder):
            self.db.execute("UPDATE run SET finished = ?, interrupted = ?",
                            (time.time(), int(interrupted)))
            self.db.commit()
            self.export()

    def complete(self) -> None:
        """Everything is written: say so, last, and write results.json."""
        with _writing(self.folder):
            self.db.execute("UPDATE run SET complete = 1")
            self.db.commit()
            (self.folder / "results.json").write_text(
                json.dumps(load_run(self.folder), indent=1))

    def export(self) -> None:
        """flows.csv, intervals.csv, probes.csv and rate_trials.csv beside the database."""
        for table, query in (
                ("flows", "SELECT s.position AS step, s.\"case\", s.name AS step_name, "
                          "s.start_spread_ms, s.fairness, f.* FROM flow f JOIN step s ON "
                          "s.id = f.step_id ORDER BY f.id"),
                ("intervals", "SELECT f.label, s.name AS step_name, i.* FROM interval i JOIN "
                              "flow f ON f.id = i.flow_id JOIN step s ON s.id = f.step_id"),
                ("probes", "SELECT f.label, s.name AS step_name, p.* FROM probe p JOIN flow f "
                           "ON f.id = p.flow_id JOIN step s ON s.id = f.step_id"),
                ("rate_trials", "SELECT f.label, s.name AS step_name, t.* FROM rate_trial t "
                                "JOIN flow f ON f.id = t.flow_id JOIN step s ON "
                                "s.id = f.step_id"),
                ("captures", "SELECT s.name AS step_name, c.* FROM capture c JOIN step s ON "
                             "s.id = c.step_id"),
                ("capture_tcp", "SELECT c.place, c.path, t.* FROM capture_tcp t JOIN capture "
                                "c ON c.id = t.capture_id"),
                ("capture_udp", "SELECT c.place, c.path, u.* FROM capture_udp u JOIN capture "
                                "c ON c.id = u.capture_id"),
                ("events", "SELECT s.name AS step_name, e.description, e.at, e.applied, "
                           "e.took, e.error, e.convergence, e.route_changes, f.label, "
                           "f.outage, f.dip, f.recovery, f.predicted, f.base_rtt_ms FROM event e "
                           "JOIN step s ON "
                           "s.id = e.step_id LEFT JOIN event_flow f ON f.event_id = e.id "
                           "ORDER BY e.id")):
            cursor = self.db.execute(query)
            with open(self.folder / f"{table}.csv", "w", newline="") as out:
                writer = csv.writer(out)
                writer.writerow([d[0] for d in cursor.description])
                writer.writerows(cursor)

    def close(self) -> None:
        self.db.close()


def boot_id() -> str:
    """This boot of the machine (a process id is only this boot's)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def run_state(run: dict[str, Any]) -> str:
    """'complete'; 'running' (its writer is alive); 'interrupted' (it ended before its
    measurements did: killed, or crashed); or 'unwritten' (measured, but writing what it
    measured failed: a full disk)."""
    if run["complete"]:
        return "complete"
    if run.get("finished") is None:
        writer = run["metadata"].get("writer") or {}
        pid = writer.get("pid")
        if isinstance(pid, int) and writer.get("boot") == boot_id() and pid > 0:
            try:
                os.kill(pid, 0)
                return "running"
            except ProcessLookupError:
                pass
            except PermissionError:
                return "running"
        return "interrupted"
    return "unwritten"


def load_run(folder: Path) -> dict[str, Any]:
    """A run as plain data: metadata, and steps with their flows. ResultsError (one line)
    for a folder that holds no readable run."""
    path = folder / DATABASE
    if not path.is_file():
        raise ResultsError(f"{folder} is not a results folder (no {DATABASE})")
    try:
        return _load(path)
    except (sqlite3.Error, TypeError, ValueError, KeyError) as error:
        raise ResultsError(f"{folder} holds no readable run ({error})") from None


def _load(path: Path) -> dict[str, Any]:
    db = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    try:
        run = dict(db.execute("SELECT * FROM run").fetchone())
        run["complete"] = bool(run.get("complete", 1))  # folders from before it was noted
        run["metadata"] = json.loads(run["metadata"])
        steps = []
        for step in db.execute("SELECT * FROM step ORDER BY position"):
            flows = []
            for flow in db.execute("SELECT * FROM flow WHERE step_id = ? ORDER BY position",
                                   (step["id"],)):
                item = dict(flow)
                item["parameters"] = json.loads(item["parameters"])
                item["connections"] = json.loads(item["connections"])
                item["paths"] = json.loads(item.get("paths") or "[]")  # older runs: none
                item["trace_capacity"] = json.loads(item.get("trace_capacity") or "null")
                item["rpm_detail"] = json.loads(item.get("rpm_detail") or "null")
                item["intervals"] = [list(r) for r in db.execute(
                    "SELECT start, \"end\", bits_per_second FROM interval WHERE flow_id = ?",
                    (flow["id"],))]
                item["rtts"] = [r[0] for r in db.execute(
                    "SELECT rtt_ms FROM probe WHERE flow_id = ? ORDER BY seq", (flow["id"],))]
                item["rate_trials"] = [dict(r) for r in db.execute(
                    "SELECT offered, received, lost_percent, queue_growth_ms, good FROM "
                    "rate_trial WHERE flow_id = ? ORDER BY trial", (flow["id"],))]
                flows.append(item)
            steps.append(dict(step) | {"flows": flows, "captures": _captures(db, step["id"]),
                                       "events": _events(db, step["id"])})
        run["steps"] = steps
        return run
    finally:
        db.close()


def _captures(db: sqlite3.Connection, step_id: int) -> list[dict[str, Any]]:
    captures: list[dict[str, Any]] = []
    if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'capture'").fetchone():
        return captures  # a run from before captures existed
    for row in db.execute("SELECT * FROM capture WHERE step_id = ? ORDER BY id", (step_id,)):
        item = dict(row)
        item["tcp"] = [dict(r) | {"throughput": json.loads(r["throughput"])} for r in
                       db.execute("SELECT * FROM capture_tcp WHERE capture_id = ?",
                                  (row["id"],))]
        item["udp"] = [dict(r) for r in db.execute(
            "SELECT * FROM capture_udp WHERE capture_id = ?", (row["id"],))]
        captures.append(item)
    return captures


def _events(db: sqlite3.Connection, step_id: int) -> list[dict[str, Any]]:
    if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'event'").fetchone():
        return []  # a run from before events existed
    events = []
    for row in db.execute("SELECT * FROM event WHERE step_id = ? ORDER BY position",
                          (step_id,)):
        item = dict(row)
        item["flows"] = [dict(r) for r in db.execute(
            "SELECT * FROM event_flow WHERE event_id = ?",
            (row["id"],))]
        events.append(item)
    return events


def find_runs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob(f"*/{DATABASE}"))
