"""Captures while a step runs: one dumpcap per capture point, started before the clients
(and seen to be capturing), stopped after them, then analysed into plain rows for the
results. A capture's file stays in the results folder; its size is capped, and a capture
the cap ended early says so."""

from __future__ import annotations

import subprocess
from pathlib import Path

from ..model.outcomes import CaptureOutcome
from ..model.topology import Topology
from ..net import capture, ownership
from ..net.system import CommandError


class StepCaptures:
    def __init__(self, model: Topology, record: ownership.LabRecord, folder: Path,
                 limit_bytes: int) -> None:
        self.model = model
        self.record = record
        self.folder = folder
        self.limit_kb = max(1, limit_bytes // 1000)
        self.running: list[tuple[capture.CapturePoint, Path, subprocess.Popen]] = []
        self.failed: list[CaptureOutcome] = []

    def start(self, places: tuple[str, ...], step_number: int) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        for where in places:
            point = capture.resolve(self.model, where)
            path = self.folder / f"step{step_number:03d}-{point.slug}.pcapng"
            try:
                bpf = capture.capture_filter(point, None)
            except (CommandError, capture.CaptureError) as error:
                self.failed.append(CaptureOutcome(where, str(path), error=str(error)))
                continue
            command = capture.dumpcap_command(point, str(path), capture.HEADERS_SNAPLEN, bpf,
                                              limit_kb=self.limit_kb)
            process = ownership.start_recorded(self.record, point.namespace, command,
                                               f"capture of {where}",
                                               stdout=subprocess.DEVNULL,
                                               stderr=subprocess.PIPE, text=True)
            problem = capture.wait_ready(process)
            if problem is not None:
                self._end(process)
                self.failed.append(CaptureOutcome(where, str(path), error=problem))
                continue
            self.running.append((point, path, process))

    def stop(self) -> list[CaptureOutcome]:
        """Stop every capture, then analyse each file."""
        outcomes = list(self.failed)
        self.failed = []
        for point, path, process in self.running:
            cut_short = process.poll() is not None  # the size cap ended it
            stderr = self._end(process)
            packets, dropped = capture.summary(stderr)
            outcome = CaptureOutcome(point.where, str(path), packets, dropped, cut_short)
            _analyse(outcome, path)
            outcomes.append(outcome)
        self.running = []
        return outcomes

    def _end(self, process: subprocess.Popen) -> str:
        stderr = capture.end(process)
        ownership.remove_process(self.record, process.pid)
        return stderr


def _analyse(outcome: CaptureOutcome, path: Path) -> None:
    from ..analysis import packets, tcp, udp  # dpkt loads only when there are captures

    try:
        found = packets.read(path)
    except packets.CaptureFileError as error:
        outcome.error = str(error)
        return
    outcome.error = found.damage
    outcome.tcp = [d.summary() for d in tcp.analyze(found.packets) if d.data_segments]
    outcome.udp = [d.summary() for d in udp.analyze(found.packets)]
