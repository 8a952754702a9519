"""The record of what a lab created, so that exactly that, and nothing else, is removed.

One JSON file per lab under /run/simpleperf/labs (tmpfs: gone after a reboot, as are the
namespaces). It is written before anything is created (the namespaces it is about to make)
and updated as things appear (namespace inodes, processes), so a lab whose owner was killed
with SIGKILL at any moment can still be cleared. A namespace is removed only if it is named
in a record with its inode and is still that same namespace: one whose inode was never
recorded (its owner was killed in the instant between creating and recording it) cannot be
told from one someone else made since, so it is reported and left.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .system import (
    existing_namespaces,
    is_same_process,
    namespace_inode,
    process_start_time,
    process_stat,
    processes_in_namespaces,
    run,
)

RECORD_DIR = Path(os.environ.get("SIMPLEPERF_LAB_DIR", "/run/simpleperf/labs"))
# A mark a lab records for whoever started it (a test session, a CI job), so that such a
# caller can take down the labs it made, and none of anyone else's.
SESSION_ENV = "SIMPLEPERF_LAB_SESSION"
RECORD_SUFFIX = ".record.json"
# Files a running lab keeps beside its record, which go with it: its journal (journal.py)
# and where the console's page placed its nodes.
JOURNAL_SUFFIX, POSITIONS_SUFFIX = ".journal.jsonl", ".positions.json"
_SAVING = threading.Lock()


@dataclass
class OwnedProcess:
    pid: int
    start_time: int | None
    what: str


@dataclass
class LabRecord:
    lab: str
    backend: str
    owner_pid: int
    owner_start_time: int | None
    persistent: bool  # `lab up` leaves it standing; `lab run` takes it down itself
    topology: dict  # how to rebuild the model: {"file": text} or {"pair": {...}}
    namespaces: dict[str, int | None] = field(default_factory=dict)  # name -> inode
    processes: list[OwnedProcess] = field(default_factory=list)
    folders: list[str] = field(default_factory=list)  # made for the lab's runs (keys, files)
    complete: bool = False
    created: float = field(default_factory=time.time)
    shaper_reason: str = ""  # why this backend: asked for, or what the kernel has
    links_down: list[str] = field(default_factory=list)  # set down while the lab runs
    link_changes: dict[str, dict] = field(default_factory=dict)  # link: shaping fields set
    session: str = ""  # $SIMPLEPERF_LAB_SESSION of the command that made it

    @property
    def shaper(self) -> str:
        """The backend and why, as `lab up`, `lab status` and results say it."""
        return f"{self.backend} ({self.shaper_reason})" if self.shaper_reason else self.backend

    @property
    def path(self) -> Path:
        return RECORD_DIR / f"{self.lab}{RECORD_SUFFIX}"

    def save(self) -> None:
        # A step's events change the record from a thread while the runner records the
        # processes it starts: one writer at a time.
        with _SAVING:
            RECORD_DIR.mkdir(parents=True, exist_ok=True)
            temporary = self.path.with_suffix(".tmp")
            temporary.write_text(json.dumps(asdict(self), indent=1))
            os.replace(temporary, self.path)

    def owner_alive(self) -> bool:
        return is_same_process(self.owner_pid, self.owner_start_time)

    @property
    def state(self) -> str:
        """'up' (usable), 'building' (its owner is still at work) or 'remains'."""
        if self.complete and (self.persistent or self.owner_alive()):
            return "up"
        return "building" if self.owner_alive() else "remains"


def new_record(lab: str, shaper: tuple[str, str], persistent: bool,
               topology: dict[str, Any]) -> LabRecord:
    """shaper: (backend, why it was chosen)."""
    pid = os.getpid()
    backend, reason = shaper
    return LabRecord(lab, backend, pid, process_start_time(pid), persistent, topology,
                     shaper_reason=reason, session=os.environ.get(SESSION_ENV, "")[:200])


def load(lab: str) -> LabRecord | None:
    path = RECORD_DIR / f"{lab}{RECORD_SUFFIX}"
    try:
        data = json.loads(path.read_text())
        data["processes"] = [OwnedProcess(**p) for p in data.get("processes", [])]
        return LabRecord(**data)
    except (OSError, ValueError, TypeError, AttributeError):
        return None  # absent, or not a record this version wrote


def all_records() -> list[LabRecord]:
    if not RECORD_DIR.is_dir():
        return []
    records = [load(path.name[: -len(RECORD_SUFFIX)])
               for path in sorted(RECORD_DIR.glob(f"*{RECORD_SUFFIX}"))]
    return [record for record in records if record is not None]


def lock_path(lab: str) -> Path:
    return RECORD_DIR / f"{lab}.lock"


@contextmanager
def locked(lab: str) -> Iterator[None]:
    """One lab operation at a time per lab (two `up`s, or `exec` updating the record)."""
    RECORD_DIR.mkdir(parents=True, exist_ok=True)
    with open(lock_path(lab), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def record_namespaces_created(record: LabRecord) -> None:
    for name in record.namespaces:
        record.namespaces[name] = namespace_inode(name)
    record.save()


def add_process(record: LabRecord, pid: int, what: str) -> None:
    record.processes.append(OwnedProcess(pid, process_start_time(pid), what))
    record.save()


# A child waits for this line before it becomes its command: a run killed between starting
# a process and recording it leaves nothing behind (the child reads the end of its input
# and exits without running anything).
_GATE = 'IFS= read -r line && [ "$line" = go ] && exec "$@"'


def start_recorded(record: LabRecord, namespace: str, command: list[str], what: str,
                   **popen: Any) -> subprocess.Popen:
    """Start `command` in a namespace, in a session of its own, recorded before it runs."""
    process = subprocess.Popen(["ip", "netns", "exec", namespace, "sh", "-c", _GATE, "sh",
                                *command], stdin=subprocess.PIPE, start_new_session=True,
                               **popen)
    assert process.stdin is not None
    try:
        add_process(record, process.pid, what)
        process.stdin.write("go\n" if popen.get("text") else b"go\n")
    finally:
        with suppress(OSError):
            process.stdin.close()
        process.stdin = None  # communicate() must not write to it again
    return process


def add_folder(record: LabRecord, path: Path) -> None:
    record.folders.append(str(path))
    record.save()


def remove_process(record: LabRecord, pid: int) -> None:
    record.processes = [p for p in record.processes if p.pid != pid]
    record.save()


def owned_namespaces(record: LabRecord) -> list[str]:
    """The recorded namespaces that still exist and are still the ones the lab made."""
    present = existing_namespaces()
    return [name for name, inode in record.namespaces.items()
            if name in present and inode is not None and namespace_inode(name) == inode]


def unverifiable_namespaces(record: LabRecord) -> list[str]:
    """Namespaces named in the record, present, but not provably the lab's."""
    present = existing_namespaces()
    return [name for name, inode in record.namespaces.items()
            if name in present and (inode is None or namespace_inode(name) != inode)]


@dataclass
class TearDown:
    removed: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)  # what the lab could not prove its own


def tear_down(record: LabRecord) -> TearDown:
    """Stop the lab's processes and delete its namespaces; what was removed, and left."""
    result = TearDown()
    removed, left = result.removed, result.left
    for process in record.processes:
        if is_same_process(process.pid, process.start_time):
            _stop(process.pid)
            removed.append(f"process {process.pid} ({process.what})")
    namespaces = owned_namespaces(record)
    inodes = {namespace_inode(n) for n in namespaces} - {None}
    strangers = processes_in_namespaces(inodes) if inodes else {}  # type: ignore[arg-type]
    if namespaces:
        run(["ip", "-batch", "-"], stdin="".join(f"netns del {n}\n" for n in namespaces))
        removed += [f"namespace {n}" for n in namespaces]
    for name in unverifiable_namespaces(record):
        left.append(f"namespace {name}, which nothing shows the lab made (if it is a leftover: "
                    f"ip netns delete {name})")
    for pid, command in sorted(strangers.items()):
        left.append(f"process {pid} '{command}', not started by the lab, which still runs in "
                    "a removed namespace (the namespace lingers until it exits)")
    for folder in record.folders:
        if os.path.isdir(folder):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(f"folder {folder}")
    record.path.unlink(missing_ok=True)
    for leftover in RECORD_DIR.glob(f"{record.lab}.delayline*"):
        leftover.unlink(missing_ok=True)
    for suffix in (JOURNAL_SUFFIX, POSITIONS_SUFFIX):
        for kept in (f"{record.lab}{suffix}", f"{record.lab}{suffix}.tmp"):  # one half saved
            (RECORD_DIR / kept).unlink(missing_ok=True)
    return result


def _stop(pid: int, grace: float = 1.0) -> None:
    """SIGTERM, then SIGKILL after `grace`. A process the lab started in a session of its own
    (servers, captures, delay lines) is stopped with its process group: what it started
    (a command flow's shell and its children) goes with it."""
    try:
        group = os.getpgid(pid) == pid
        os.killpg(pid, signal.SIGTERM) if group else os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    start = process_start_time(pid)
    while time.monotonic() < deadline:
        if process_start_time(pid) != start or _is_zombie(pid):
            return
        time.sleep(0.01)
    with suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL) if group else os.kill(pid, signal.SIGKILL)


def _is_zombie(pid: int) -> bool:
    fields = process_stat(pid)
    return fields is None or fields[0] == "Z"
