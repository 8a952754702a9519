"""Helpers shared by the lab tests that use real namespaces."""

from __future__ import annotations

import os
import re
import subprocess
import threading
from pathlib import Path

import pytest
from helpers import SIMPLEPERF

from simpleperf.lab.net import ownership
from simpleperf.lab.net.lifecycle import DELAY_LINE_MODULE
from simpleperf.lab.net.shaping.probe import SHAPER_ENV
from simpleperf.lab.net.system import existing_namespaces

needs_lab = [pytest.mark.lab, pytest.mark.root]  # real namespaces: root and iproute2
PORTFOLIO_NAMESPACES = {f"h{i}" for i in range(1, 10)} | {"r1", "r2", "r3", "r4", "s1", "s2",
                                                          "portfolio-wire"}


def session_shaper() -> str:
    """The backend this test session's labs are built with (conftest's --shaper)."""
    return os.environ[SHAPER_ENV]


def lab(*args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    done = subprocess.run(SIMPLEPERF + ["lab", *args], capture_output=True, text=True,
                          timeout=timeout)
    if check:
        assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done


def in_node(node: str, *command: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", node, *command], capture_output=True,
                          text=True, timeout=timeout)


def ping_rtts(node: str, address: str, count: int, interval: float = 0.05) -> list[float]:
    done = in_node(node, "ping", "-n", "-c", str(count), "-i", str(interval), "-W", "2",
                   address)
    return [float(m) for m in re.findall(r"time=([\d.]+) ms", done.stdout)]


def delay_line_pids() -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if DELAY_LINE_MODULE.encode() in cmdline.read():
                    found.add(int(entry))
        except (OSError, ValueError):
            continue
    return found


def assert_gone(names: set[str]) -> None:
    assert not names & existing_namespaces()




class Ready:
    """A process in a node, returned once it printed a line containing `ready` on stdout
    (a server that listens): a slow machine, such as the emulated netem guest, makes any
    fixed wait too short. Its output is drained meanwhile, so it never blocks on a full
    pipe; `lines` holds it."""

    def __init__(self, node: str, *command: str, ready: str, seconds: float = 60) -> None:
        self.process = subprocess.Popen(["ip", "netns", "exec", node, *command],
                                        stdout=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        seen = threading.Event()

        def drain() -> None:
            assert self.process.stdout is not None
            for line in self.process.stdout:
                self.lines.append(line)
                if ready in line:
                    seen.set()
            seen.set()  # ended: the check below says so

        self.reader = threading.Thread(target=drain, daemon=True)
        self.reader.start()
        if not seen.wait(seconds) or not any(ready in line for line in self.lines):
            self.stop()
            raise AssertionError(f"{command[:3]} in {node} never printed {ready!r}: "
                                 f"{''.join(self.lines)[-300:]}")

    def output(self, seconds: float = 60) -> str:
        """Everything it printed, once it has ended by itself."""
        self.process.wait(seconds)
        self.reader.join(seconds)
        return "".join(self.lines)

    def stop(self) -> str:
        self.process.terminate()
        return self.output(10)


def made_by_this_session(before: set[str], records: list) -> list[str]:
    """The labs that appeared meanwhile and carry this test session's mark: a user's lab,
    or another run's, brought up beside the suite is never among them."""
    mine = os.environ.get(ownership.SESSION_ENV)
    return [record.lab for record in records
            if record.lab not in before and mine and record.session == mine]


def bash_blocks(page: Path) -> list[str]:
    """A documentation page's ```bash blocks, as a reader copies them."""
    return re.findall(r"^```bash\n(.*?)^```", page.read_text(), re.S | re.M)


def run_blocks(blocks: list[str], folder: Path) -> list[str]:
    """Each block run as a reader pastes it, in `folder`, in order: each must succeed
    without a traceback; what each printed."""
    outputs = []
    for block in blocks:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=folder,
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, (block, done.stdout[-2000:], done.stderr[-2000:])
        assert "Traceback" not in done.stderr, block
        outputs.append(done.stdout)
    return outputs
