"""-m/--mptcp (iperf3 3.19's flag): the test's TCP connections as Multipath TCP, each
stream's subflows in JSON and -V, plain TCP where the other end has no MPTCP (a fallback
that is reported, not hidden), and iperf3 3.21's -m both ways."""

from __future__ import annotations

import json
import subprocess

import pytest
from helpers import IPERF3_321, LiveProcess, free_port, run_simpleperf, start_server

pytestmark = pytest.mark.loopback


def _streams(document: dict) -> list[dict]:
    return document["end"]["streams"]


def test_both_ends_multipath_report_their_subflow():
    live, port = start_server("-m")
    try:
        done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-m", "-t", "1", "-P", "2",
                              "-J", "--native")
        assert done.returncode == 0, done.stderr
        for stream in _streams(json.loads(done.stdout)):
            assert stream["sender"]["mptcp_subflows"] == 1  # ours
            assert stream["receiver"]["mptcp_subflows"] == 1  # the server's
        text = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-m", "-t", "1", "-V")
        assert text.returncode == 0 and "1 subflow" in text.stdout
    finally:
        live.close()


def test_trip_times_over_mptcp_time_writes_and_capture_no_subflow():
    """A capture of one subflow sees part of the connection, and the sender's kernel stamps
    no departures on an MPTCP socket: the receiver times writes (write to read) and takes no
    capture (a packet's parsing each, for nothing; on the lab's campus it cost MPTCP a tenth
    of its goodput)."""
    live, port = start_server("-m")
    try:
        done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-m", "-t", "1",
                              "--trip-times", "-J")
        assert done.returncode == 0, done.stderr
        (stream,) = _streams(json.loads(done.stdout))
        assert stream["receiver"]["mptcp_subflows"] == 1
        assert stream["receiver"]["one_way_delay"]["arrival"] == "read"
        assert stream["receiver"]["write_to_read_delay"]["count"] > 0
    finally:
        live.close()


def test_a_server_without_mptcp_makes_it_plain_tcp_and_says_so():
    live, port = start_server()
    try:
        done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-m", "-t", "1", "-J",
                              "--native")
        assert done.returncode == 0, done.stderr
        (stream,) = _streams(json.loads(done.stdout))
        assert stream["sender"]["mptcp_subflows"] == 0
        assert "mptcp_subflows" not in stream["receiver"]  # a plain TCP socket there
        text = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-m", "-t", "1", "-V")
        assert "fell back to plain TCP" in text.stdout
    finally:
        live.close()


@pytest.mark.iperf3
def test_iperf3_321_multipath_both_ways():
    port = free_port()
    live = LiveProcess("-s", "-p", str(port), "-m", "-J")
    try:
        live.wait_for(lambda lines: True, timeout=1)
        subprocess.run(["sleep", "1"], check=True)
        by_iperf3 = subprocess.run([IPERF3_321, "-c", "127.0.0.1", "-p", str(port), "-m", "-t",
                                    "1", "-J"], capture_output=True, text=True, timeout=30)
        assert by_iperf3.returncode == 0, by_iperf3.stdout
        # what iperf3 says its receiver (our server) got: iperf3's sender counts what it
        # wrote into its socket, the unsent tail included
        their_view = json.loads(by_iperf3.stdout)["end"]["sum_received"]["bytes"]
        document = json.loads("\n".join(live.wait_for(
            lambda lines: lines and lines[-1] == "}")))
        (stream,) = document["end"]["streams"]
        assert stream["receiver"]["mptcp_subflows"] == 1
        assert document["end"]["sum_received"]["bytes"] == their_view > 0
    finally:
        live.close()
    iperf3_port = free_port()
    server = subprocess.Popen([IPERF3_321, "-s", "-m", "-p", str(iperf3_port), "-1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        subprocess.run(["sleep", "1"], check=True)
        done = run_simpleperf("-c", "127.0.0.1", "-p", str(iperf3_port), "-m", "-t", "1", "-J")
        assert done.returncode == 0, done.stderr
        document = json.loads(done.stdout)
        assert document["start"]["protocol"] == "iperf3"
        assert _streams(document)[0]["sender"]["mptcp_subflows"] == 1
    finally:
        server.kill()
        server.wait(5)


def test_mptcp_is_tcp_only():
    done = run_simpleperf("-c", "127.0.0.1", "-m", "-u")
    assert done.returncode == 2 and "-m/--mptcp" in done.stderr
