"""Fixtures and the test markers' rules: a test marked `root` or `iperf3` fails, rather
than skips, where its requirement is missing (CI installs everything; a developer without
root deselects with -m "not root").

Lab tests build their links with the shaper `--shaper` names (own by default: it needs only
NFQUEUE, which nearly every kernel has). scripts/test runs them again with netem in a guest
kernel that has it. A test about one shaper's machinery is marked with it and left out
(deselected, not skipped) of a session with the other. A test of real processes gets one
rerun (pytest-rerunfailures) before it counts as failed."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from typing import Any

import pytest
from helpers import SIMPLEPERF, free_port, start_server
from lab_helpers import made_by_this_session

from simpleperf.lab.net import ownership
from simpleperf.lab.net.shaping.probe import SHAPER_ENV

SHAPER_MARKERS = {"own": "own_shaper", "netem": "netem_shaper"}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--shaper", choices=tuple(SHAPER_MARKERS), default="own",
                     help="the shaper lab tests build links with (default own; netem needs a "
                          "kernel with netem, as in scripts/test's guest)")


def pytest_configure(config: pytest.Config) -> None:
    os.environ[SHAPER_ENV] = config.getoption("--shaper")  # every `lab up` and `lab run`
    # every lab this session makes records it: the session takes down only those
    os.environ.setdefault(ownership.SESSION_ENV, f"pytest-{os.getpid()}-{time.time_ns()}")


# Tests that measure real processes on a shared machine: a neighbour taking the CPU for a
# second turns a right rate into a wrong one. Each gets one more run before it fails (a
# real fault fails both; the summary line counts the reruns).
RERUN_MARKERS = ("loopback", "lab", "iperf3", "iperf2", "timing")


# Why each rerun test failed its first run (the rerun's pass hides it otherwise): said after
# the run, so that a flaky fault in CI's log can be found
RERUN_REASONS: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.outcome == "rerun":
        errors = [line[1:].strip() for line in report.longreprtext.splitlines()
                  if line.startswith("E ")]
        reason = " / ".join(dict.fromkeys([errors[0], errors[-1]])) if errors else \
            (report.longreprtext.strip().splitlines() or [""])[-1]
        RERUN_REASONS.append(f"{report.nodeid}: {reason[:500]}")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if RERUN_REASONS:
        terminalreporter.section("why tests were run again")
        for line in RERUN_REASONS:
            terminalreporter.write_line(line)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if (any(item.get_closest_marker(marker) for marker in RERUN_MARKERS)
                and item.get_closest_marker("flaky") is None):
            item.add_marker(pytest.mark.flaky(reruns=1, reruns_delay=2))
    shaper = config.getoption("--shaper")
    others = [marker for name, marker in SHAPER_MARKERS.items() if name != shaper]
    left_out = [item for item in items
                if any(item.get_closest_marker(marker) for marker in others)]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if item not in left_out]


@pytest.fixture(autouse=True)
def _labs_taken_down(request: pytest.FixtureRequest):
    """A lab test that fails half-way must not leave its lab up for the next ones."""
    if request.node.get_closest_marker("lab") is None or os.geteuid() != 0:
        yield
        return
    before = {record.lab for record in ownership.all_records()}
    yield
    for lab_name in made_by_this_session(before, ownership.all_records()):
        subprocess.run(SIMPLEPERF + ["lab", "down", lab_name], capture_output=True,
                       timeout=120)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("root") and os.geteuid() != 0:
        pytest.fail("this test needs root (network namespaces): run it as root, or leave it "
                    "out with -m 'not root'", pytrace=False)
    if item.get_closest_marker("iperf3") and shutil.which("iperf3") is None:
        pytest.fail("iperf3 is not installed: run bash scripts/setup, or leave it out with "
                    "-m 'not iperf3'", pytrace=False)
    if item.get_closest_marker("iperf2") and shutil.which("iperf") is None:
        pytest.fail("iperf (iperf2) is not installed: run bash scripts/setup, or leave it out "
                    "with -m 'not iperf2'", pytrace=False)
    if item.get_closest_marker("lab"):
        missing = [t for t in ("ip", "tc", "iptables-restore", "ethtool", "ping")
                   if shutil.which(t) is None]
        if missing:
            pytest.fail(f"the lab needs {', '.join(missing)}: run bash scripts/setup",
                        pytrace=False)


@pytest.fixture
def empty_namespace():
    """A namespace with only loopback: nothing sent from it can leave the machine."""
    name = f"sptest-{free_port()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True)


@pytest.fixture
def server():
    """A simpleperf server reporting in bytes; yields (process, port)."""
    live, port = start_server("-f", "B")
    yield live, port
    live.close()
