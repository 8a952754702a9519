"""A script written for iperf3 runs with simpleperf in its place: every long option iperf3's
own --help lists (3.12's and 3.21's) is one of ours, with iperf3's meaning, or in the short
list of those not taken yet (docs/iperf3-compat.md says which)."""

from __future__ import annotations

import json
import re
import socket
import subprocess

import pytest
from helpers import IPERF3_BINARIES, free_port, run_simpleperf, start_iperf3_server, start_server

from simpleperf.command_line.cli import build_parser, parse_args
from simpleperf.transport import tcp

# Not taken yet: SCTP (Debian's 3.12 is built with it).
NOT_YET = {"--sctp", "--xbind", "--nstreams"}


def _ours() -> set[str]:
    return {name for action in build_parser()._actions for name in action.option_strings}


@pytest.mark.iperf3
@pytest.mark.parametrize("version", ["3.12", "3.21"])
def test_every_iperf3_long_option_is_ours_or_listed_as_not_yet(version):
    shown = subprocess.run([IPERF3_BINARIES[version], "--help"], capture_output=True,
                           text=True).stdout + subprocess.run(
        [IPERF3_BINARIES[version], "--help"], capture_output=True, text=True).stderr
    theirs = set(re.findall(r"(?<![\w-])--[a-z0-9][a-z0-9-]+", shown))
    assert len(theirs) > 40  # the help was read
    missing = theirs - _ours() - NOT_YET
    assert missing == set()
    assert NOT_YET & _ours() == set()  # what is taken must leave the list


@pytest.mark.parametrize(("iperf3_name", "ours"), [
    (["--length", "64K"], ["-l", "64K"]), (["--bytes", "10M"], ["-n", "10M"]),
    (["--set-mss", "1000"], ["-M", "1000"]), (["--version4"], ["-4"]),
    (["--version6"], ["-6"])])
def test_iperf3_long_names_mean_what_ours_do(iperf3_name, ours):
    assert parse_args(["-c", "127.0.0.1", "--native", *iperf3_name]) == parse_args(
        ["-c", "127.0.0.1", "--native", *ours])


def test_server_max_duration_is_the_servers_time_limit():
    assert parse_args(["-s", "--server-max-duration", "30"]).max_duration == 30.0


def test_fq_rate_paces_every_sender_of_the_test():
    options = parse_args(["-c", "127.0.0.1", "--fq-rate", "50M", "-R"])
    assert options.needs_native and options.test.fq_rate == 50e6
    done = run_simpleperf("-c", "127.0.0.1", "--fq-rate", "1x")
    assert done.returncode == 2 and "--fq-rate" in done.stderr


def test_flags_that_change_nothing_say_why_under_verbose_only():
    quiet = parse_args(["-c", "127.0.0.1", "--gsro", "--skip-rx-copy", "-d"])
    assert len(quiet.accepted_only) == 3
    assert all(": " in note for note in quiet.accepted_only)
    server = parse_args(["-s", "--forceflush", "--debug=2"])  # iperf3 -s takes them too
    assert server.port


@pytest.mark.loopback
def test_extra_data_and_the_full_output_after_the_stream():
    live, port = start_server()
    try:
        done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "1",
                              "--json-stream-full-output", "--extra-data", "run 7")
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        events = [json.loads(line) for line in lines if line.startswith('{"event"')]
        assert [e["event"] for e in events][0] == "start" and events[-1]["event"] == "end"
        assert events[0]["data"]["extra_data"] == "run 7"
        document = json.loads(done.stdout[done.stdout.index("\n{\n") + 1:])
        assert document["extra_data"] == "run 7"
        assert document["end"]["sum_sent"]["bytes"] == events[-1]["data"]["sum_sent"]["bytes"]
        fast = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "2", "-J",
                              "--fq-rate", "40M")
        # the sender's socket paced to 40 Mbit/s (the receiver's count: what the sender
        # counts includes what still waits in its socket buffer)
        received = json.loads(fast.stdout)["end"]["sum_received"]["bits_per_second"]
        assert 30e6 < received < 44e6
    finally:
        live.close()


def test_control_keepalive_is_set_as_asked():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        options = parse_args(["-c", "127.0.0.1", "-p", str(port), "--cntl-ka=30//4"])
        with tcp.connect_to_server(options) as control:
            assert control.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert control.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 30
            assert control.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 4
    for bad in ("--cntl-ka=1/2/3/4", "--cntl-ka=x", "--cntl-ka=-1"):
        done = run_simpleperf("-c", "127.0.0.1", bad)
        assert done.returncode == 2 and "--cntl-ka" in done.stderr


@pytest.mark.loopback
@pytest.mark.root
def test_bind_dev_keeps_every_socket_on_the_interface():
    live, port = start_server("--bind-dev", "lo")
    try:
        for extra in ([], ["-u", "-b", "10M"]):
            done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", "-J",
                                  "--bind-dev", "lo", *extra)
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout)["end"]["sum_received"]["bytes"] > 0
    finally:
        live.close()
    missing = run_simpleperf("-c", "127.0.0.1", "-p", str(free_port()), "--bind-dev",
                             "nosuchdev0")
    assert missing.returncode == 1
    assert missing.stderr.strip() == ("simpleperf: error: cannot bind to device nosuchdev0: "
                                      "no interface has that name")


@pytest.mark.iperf3
def test_get_server_output_prints_the_iperf3_servers_own_report():
    server, port = start_iperf3_server("3.12")
    try:
        text = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "--iperf3", "-t", "1",
                              "--get-server-output")
        assert text.returncode == 0, text.stderr
        own = text.stdout.split("\nServer output:\n", 1)[1]
        assert "Accepted connection from 127.0.0.1" in own and "receiver" in own
        document = json.loads(run_simpleperf("-c", "127.0.0.1", "-p", str(port), "--iperf3",
                                             "-t", "1", "-J", "--get-server-output").stdout)
        assert "Accepted connection" in document["server_output_text"]
    finally:
        server.kill()
        server.wait(5)
