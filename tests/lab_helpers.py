"""Helpers shared by the lab tests that use real namespaces."""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from helpers import SIMPLEPERF

from simpleperf.lab.net.system import existing_namespaces

needs_lab = [pytest.mark.lab, pytest.mark.root]  # real namespaces: root and iproute2
PORTFOLIO_NAMESPACES = {f"h{i}" for i in range(1, 10)} | {"r1", "r2", "r3", "r4", "s1", "s2",
                                                          "portfolio-wire"}


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
                if b"simpleperf.lab.net.shaping.delayline" in cmdline.read():
                    found.add(int(entry))
        except (OSError, ValueError):
            continue
    return found


def assert_gone(names: set[str]) -> None:
    assert not names & existing_namespaces()


