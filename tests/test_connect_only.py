"""--connect-only[=N] (iperf2's): timed TCP connects and nothing else, against our server
and iperf 2.1.8's; our server tells such a connection (closed before its first byte) from
a test in one line and keeps serving, at iperf2's rate; an MPTCP listener's -1 ends."""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest
from helpers import LiveProcess, end_iperf_server, free_port, run_simpleperf, start_server

pytestmark = pytest.mark.loopback


def test_connects_are_timed_and_the_server_names_them_no_test():
    server, port = start_server()
    try:
        done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "--connect-only=5")
        assert done.returncode == 0, done.stderr
        rows = re.findall(r"^\[\s*\d+\] 127\.0\.0\.1:\d+ -> 127\.0\.0\.1:\d+  connect "
                          r"([\d.]+) ms$", done.stdout, re.M)
        assert len(rows) == 5 and all(float(ms) > 0 for ms in rows)
        assert re.search(r"connect times \(min/avg/max/stdev\) = [\d.]+/[\d.]+/[\d.]+/[\d.]+ "
                         r"ms \(total/errors\) = 5/0", done.stdout)
        server.wait_for(lambda lines: sum("closed without sending anything: no test" in line
                                          for line in lines) == 5)
        assert not any("incomplete" in line for line in server.lines)
        test = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "0.5")
        assert test.returncode == 0, test.stderr  # still serving
    finally:
        server.close()


def test_bursts_of_parallel_connects_every_interval_in_json():
    server, port = start_server()
    try:
        began = time.monotonic()
        done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "--connect-only=6", "-P",
                              "3", "-i", "0.3", "-J")
        took = time.monotonic() - began
        assert done.returncode == 0, done.stderr
        document = json.loads(done.stdout)
        assert [c["number"] for c in document["connects"]] == [1, 2, 3, 4, 5, 6]
        end = document["end"]["connect_times"]
        assert (end["total"], end["errors"]) == (6, 0)
        assert 0 < end["min_ms"] <= end["mean_ms"] <= end["max_ms"]
        assert end["seconds"] >= 0.3 and took >= 0.3  # two bursts, 0.3 s apart
    finally:
        server.close()


@pytest.mark.iperf2
def test_against_iperf2s_server_and_a_closed_port():
    port = free_port()
    iperf = subprocess.Popen(["iperf", "-s", "-p", str(port)], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(0.5)
        done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "--connect-only=3", "-J")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["end"]["connect_times"]["total"] == 3
    finally:
        log = end_iperf_server(iperf)
    assert log.count("connected with 127.0.0.1 port") == 3
    closed = run_simpleperf("-c", "127.0.0.1", "-p", str(free_port()), "--connect-only=2")
    assert closed.returncode == 1
    assert closed.stderr.strip().splitlines() == [
        "simpleperf: error: no connect succeeded (2 tried): cannot connect to 127.0.0.1 "
        f"port {closed.args[closed.args.index('-p') + 1]}: connection refused (is a "
        "simpleperf server running there?)"]


@pytest.mark.parametrize(("args", "message"), [
    (["--connect-only=x"], "--connect-only takes 0 (until -t ends) to 1000000 connects, "
                           "not 'x'"),
    (["--connect-only", "-u"], "--connect-only makes TCP connections and sends nothing: "
                               "not with -u"),
    (["--connect-only", "-R", "-n", "1M"], "not with -R/--bidir, -n"),
])
def test_bad_connect_only_is_one_line(args, message):
    done = run_simpleperf("-c", "127.0.0.1", *args)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert message in line


def test_an_mptcp_one_off_server_ends_after_its_test():
    """An MPTCP listener's accept() ignores the socket's wake-up timer: the server waits in
    poll() instead, so -1 (and Ctrl-C) are noticed."""
    port = free_port()
    server = LiveProcess("-s", "-m", "-1", "-p", str(port))
    try:
        server.wait_for(lambda lines: any("listening on port" in line for line in lines))
        done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-m", "-t", "0.5")
        assert done.returncode == 0, done.stderr
        server.process.wait(timeout=10)
        assert server.process.returncode == 0
    finally:
        server.close()
