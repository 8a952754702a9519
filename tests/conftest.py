"""Fixtures and the test markers' rules: a test marked `root` or `iperf3` fails, rather
than skips, where its requirement is missing (CI installs everything; a developer without
root deselects with -m "not root")."""

from __future__ import annotations

import os
import shutil

import pytest
from helpers import start_server


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("root") and os.geteuid() != 0:
        pytest.fail("this test needs root (network namespaces): run it as root, or leave it "
                    "out with -m 'not root'", pytrace=False)
    if item.get_closest_marker("iperf3") and shutil.which("iperf3") is None:
        pytest.fail("iperf3 is not installed: run bash scripts/setup, or leave it out with "
                    "-m 'not iperf3'", pytrace=False)
    if item.get_closest_marker("lab"):
        missing = [t for t in ("ip", "tc", "iptables-restore", "ethtool", "ping")
                   if shutil.which(t) is None]
        if missing:
            pytest.fail(f"the lab needs {', '.join(missing)}: run bash scripts/setup",
                        pytrace=False)


@pytest.fixture
def server():
    """A simpleperf server reporting in bytes; yields (process, port)."""
    live, port = start_server("-f", "B")
    yield live, port
    live.close()
