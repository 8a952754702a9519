"""Captures started from the page: `lab capture`'s capture points and filters
(net/capture.py), dumpcap recorded as the lab's process (so `lab down` ends it), its file in
a folder the lab owns (so `lab down` removes it), capped in size and time, downloaded as
pcapng when it has ended, and read per flow as `lab analyze` reads one."""

from __future__ import annotations

import contextlib
import itertools
import math
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from ..model.experiment import DEFAULT_CAPTURE_LIMIT
from ..model.topology import Topology
from ..net import capture, journal, ownership
from ..net.system import CommandError

MAX_RUNNING = 4  # captures at once, every lab together
DEFAULT_SECONDS, MAX_SECONDS = 60.0, 3600.0
ANALYSIS_LINES = 40  # of `lab analyze`'s table, on the page
KEPT = 32  # ended captures the page lists


class PageCaptureError(ValueError):
    """A capture the page cannot start: one line."""


def folder(lab: str) -> Path:
    return ownership.RECORD_DIR / f"{lab}.captures"


class PageCapture:
    def __init__(self, number: int, lab: str, point: capture.CapturePoint, path: Path,
                 bpf: str | None, seconds: float) -> None:
        self.number, self.lab, self.point, self.path = number, lab, point, path
        self.bpf, self.seconds = bpf, seconds
        self.state = "starting"
        self.began = time.time()
        self.packets: int | None = None
        self.dropped: int | None = None
        self.analysis: list[str] = []
        self.process: subprocess.Popen | None = None

    def view(self) -> dict[str, Any]:
        try:
            size = self.path.stat().st_size
        except OSError:
            size = None
        return {"id": self.number, "lab": self.lab, "where": self.point.where,
                "describe": self.point.describe, "filter": self.bpf, "state": self.state,
                "seconds": self.seconds, "began": self.began, "bytes": size,
                "packets": self.packets, "dropped": self.dropped, "analysis": self.analysis,
                "file": f"{self.lab}-{self.point.slug}-{self.number}.pcapng"}


class PageCaptures:
    def __init__(self) -> None:
        self.captures: dict[int, PageCapture] = {}
        self.numbers = itertools.count(1)
        self._lock = threading.Lock()

    def of(self, lab: str) -> list[dict[str, Any]]:
        with self._lock:
            return [found.view() for found in self.captures.values() if found.lab == lab]

    def start(self, lab: str, model: Topology, asked: Any) -> PageCapture:
        """`asked`: {"where": LINK | NODE[:IFACE], "filter": BPF, "seconds": N}. Blocks
        until dumpcap captures."""
        where, bpf, seconds = _asked(asked)
        capture.require_dumpcap()
        with self._lock:
            if sum(c.state == "capturing" for c in self.captures.values()) >= MAX_RUNNING:
                raise PageCaptureError(f"{MAX_RUNNING} captures run already: stop one first")
            number = next(self.numbers)
        try:
            point = capture.resolve(model, where)
            full = capture.capture_filter(point, bpf)
            capture.check_filter(point, full, bpf)
        except (capture.CaptureError, CommandError) as error:
            raise PageCaptureError(str(error).splitlines()[0]) from None
        started = PageCapture(number, lab, point, folder(lab) / f"{number}-{point.slug}.pcapng",
                              bpf, seconds)
        command = capture.dumpcap_command(point, str(started.path), capture.HEADERS_SNAPLEN,
                                          full, limit_kb=DEFAULT_CAPTURE_LIMIT // 1000,
                                          duration=seconds)
        with ownership.locked(lab):
            record = ownership.load(lab)
            if record is None:
                raise PageCaptureError(f"no lab named {lab} is up")
            if str(folder(lab)) not in record.folders:
                ownership.add_folder(record, folder(lab))
            folder(lab).mkdir(parents=True, exist_ok=True)
            started.process = ownership.start_recorded(
                record, point.namespace, command, f"lab web capture {number} of {where}",
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        problem = capture.wait_ready(started.process)
        if problem is not None:
            self._end(started)
            raise PageCaptureError(f"capture of {where}: {problem}")
        started.state = "capturing"
        with self._lock:
            ended = [n for n, c in self.captures.items() if c.state != "capturing"]
            for old in ended[:max(0, len(ended) - KEPT)]:
                del self.captures[old]
            self.captures[number] = started
        journal.note(lab, f"capture {number} of {where} started"
                          + (f" (filter {bpf})" if bpf else ""), "page")
        threading.Thread(target=self._follow, args=(started,), daemon=True,
                         name=f"capture {number}").start()
        return started

    def _follow(self, started: PageCapture) -> None:
        """Until dumpcap ends: by its time or size, or stopped."""
        assert started.process is not None
        started.process.wait()
        if started.state == "capturing":
            self.stop(started.number)

    def stop(self, number: int) -> PageCapture | None:
        with self._lock:
            found = self.captures.get(number)
            if found is None or found.state != "capturing":
                return found
            found.state = "stopping"
        self._end(found)
        found.state = "ended"
        journal.note(found.lab, f"capture {number} of {found.point.where} ended: "
                                f"{found.packets if found.packets is not None else '?'} "
                                "packets", "page")
        found.analysis = _analysis(found.path)
        return found

    def _end(self, found: PageCapture) -> None:
        process = found.process
        if process is None:
            return
        found.packets, found.dropped = capture.summary(capture.end(process))
        with ownership.locked(found.lab):
            record = ownership.load(found.lab)
            if record is not None:
                ownership.remove_process(record, process.pid)
        found.process = None

    def download(self, lab: str, number: int) -> PageCapture | None:
        """An ended capture of `lab` whose file is still there."""
        with self._lock:
            found = self.captures.get(number)
        if found is None or found.lab != lab or found.state != "ended" or \
                not found.path.is_file():
            return None
        return found

    def stop_all(self) -> None:
        for number in list(self.captures):
            self.stop(number)


def _asked(asked: Any) -> tuple[str, str | None, float]:
    if not isinstance(asked, dict) or not isinstance(asked.get("where"), str) or \
            not asked["where"].strip():
        raise PageCaptureError("a capture is {\"where\": LINK or NODE:IFACE, \"filter\": "
                               "BPF, \"seconds\": N}")
    unknown = set(asked) - {"where", "filter", "seconds"}
    if unknown:
        raise PageCaptureError(f"a capture takes where, filter and seconds, not "
                               f"{', '.join(sorted(unknown))}")
    bpf = asked.get("filter") or None
    if bpf is not None and (not isinstance(bpf, str) or len(bpf) > 500 or "\n" in bpf):
        raise PageCaptureError("a capture's filter is one line of BPF, at most 500 characters")
    seconds = asked.get("seconds", DEFAULT_SECONDS)
    if isinstance(seconds, str):
        with contextlib.suppress(ValueError):
            seconds = float(seconds.strip().removesuffix("s") or DEFAULT_SECONDS)
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or \
            not math.isfinite(seconds) or not 1 <= seconds <= MAX_SECONDS:
        raise PageCaptureError(f"a capture's seconds are from 1 to {MAX_SECONDS:g}")
    return asked["where"].strip(), bpf, float(seconds)


def _analysis(path: Path) -> list[str]:
    """`lab analyze`'s tables of a capture, as lines (none without dpkt)."""
    try:
        from ..analysis import packets, text
    except ImportError:
        return []
    try:
        found = packets.read(path)
    except packets.CaptureFileError as error:
        return [str(error)]
    lines = [f"{len(found.packets)} TCP/UDP packets"]
    lines += text.tables(found.packets)
    if found.damage:
        lines.append(found.damage)
    return lines[:ANALYSIS_LINES]
