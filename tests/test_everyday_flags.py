"""iperf3's everyday flags: -1/--one-off, -k/--blockcount, --connect-timeout."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time

import pytest
from helpers import SIMPLEPERF, free_port, run_simpleperf

pytestmark = pytest.mark.loopback


@pytest.mark.parametrize("client", [["-t", "1"], ["-t", "1", "--native"],
                                    ["-t", "1", "-u", "-b", "10M"]])
def test_a_one_off_server_serves_one_test_then_exits_0(client):
    port = free_port()
    server = subprocess.Popen(SIMPLEPERF + ["-s", "-1", "-p", str(port)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert "listening" in "".join(server.stdout.readline() for _ in range(2))
        done = run_simpleperf("-c", "-p", str(port), *client, timeout=30)
        assert done.returncode == 0, done.stderr
        assert server.wait(10) == 0  # the echo connection of latency probes is no test
    finally:
        server.kill()
        server.wait()


def test_blockcount_sends_that_many_blocks(server):
    _, port = server
    tcp = run_simpleperf("-c", "-p", str(port), "-k", "10", "-l", "100K", "-J", "--native",
                         "--no-latency")
    assert tcp.returncode == 0, tcp.stderr
    assert json.loads(tcp.stdout)["end"]["sum_received"]["bytes"] == 10 * 100_000
    udp = run_simpleperf("-c", "-p", str(port), "-u", "-b", "50M", "-l", "1000", "-k", "500",
                         "-J")
    assert udp.returncode == 0, udp.stderr
    assert json.loads(udp.stdout)["end"]["sum"]["packets"] == 500
    both = run_simpleperf("-c", "-p", str(port), "-k", "5", "-t", "2")
    assert both.returncode == 2 and "-k/--blockcount cannot be used with" in both.stderr


def test_connect_timeout_bounds_a_handshake_that_never_completes():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)  # one pending connection fills it: later handshakes go unanswered
    filler = socket.create_connection(listener.getsockname(), timeout=5)
    try:
        started = time.monotonic()
        done = run_simpleperf("-c", "-p", str(listener.getsockname()[1]), "--connect-timeout",
                              "300", "-t", "1", timeout=30)
        took = time.monotonic() - started
    finally:
        filler.close()
        listener.close()
    assert done.returncode == 1 and "no answer within 0.3 s" in done.stderr
    assert took < 5  # the kernel alone would retry the handshake for about two minutes


def test_title_and_timestamps_begin_every_line_of_text(server):
    _, port = server
    done = run_simpleperf("-c", "-p", str(port), "-t", "1", "-T", "run 7",
                          "--timestamps=%Y-%m-%dT%H:%M:%S ")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) >= 4
    for line in lines:
        assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d run 7:  ", line), line
    document = run_simpleperf("-c", "-p", str(port), "-t", "1", "-T", "run 7", "-J",
                              "--no-latency")
    assert json.loads(document.stdout)["title"] == "run 7"  # JSON stays whole
    bad = run_simpleperf("-c", "-p", str(port), "-T", "two\nlines")
    assert bad.returncode == 2 and "-T/--title must be one line" in bad.stderr
