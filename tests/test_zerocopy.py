"""-Z/--zerocopy: TCP senders use sendfile from a memory file, at either end."""

from __future__ import annotations

import json
import socket

import pytest
from helpers import run_simpleperf, start_iperf3_server

from simpleperf.description.testspec import TestSpec as Spec
from simpleperf.protocol import iperf3
from simpleperf.protocol.native import parse_spec, spec_message
from simpleperf.transport import buffers


def test_the_file_sender_sends_the_payloads_bytes():
    payload = buffers.aligned(100_000)
    payload[:] = bytes(range(256)) * 390 + bytes(160)
    left, right = socket.socketpair()
    sender = buffers.FileSender(payload, left)
    try:
        sent = 0
        while sent < 60_000:  # the first 60,000 bytes, as a send of a shorter chunk asks
            sent += sender.send(payload[: 60_000 - sent])
        left.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := right.recv(65536):
            received += chunk
    finally:
        sender.close()
        left.close()
        right.close()
    assert len(received) >= 60_000
    assert received[:60_000] == bytes(payload[:60_000])


def test_zerocopy_travels_in_both_protocols():
    spec = Spec(zerocopy=True)
    assert parse_spec(spec_message(spec)).zerocopy
    assert iperf3.parameters_message(spec, "x")["zerocopy"] is True
    assert iperf3.parse_parameters({"tcp": True, "zerocopy": True}).zerocopy


@pytest.mark.loopback
@pytest.mark.parametrize("direction", [[], ["-R"], ["--bidir"]])
def test_zerocopy_tests_agree_at_both_ends(server, direction):
    _, port = server
    done = run_simpleperf("-c", "-p", str(port), "-Z", "-t", "1", "-J", "--no-latency",
                          *direction)
    assert done.returncode == 0, done.stderr
    for stream in json.loads(done.stdout)["end"]["streams"]:
        assert stream["sender"]["bytes"] > 0
        assert stream["sender"]["bytes"] == stream["receiver"]["bytes"]


@pytest.mark.loopback
@pytest.mark.iperf3
def test_zerocopy_against_an_iperf3_server():
    process, port = start_iperf3_server("3.21")
    try:
        done = run_simpleperf("-c", "-p", str(port), "-Z", "-R", "-t", "1", "-J", timeout=30)
    finally:
        process.terminate()
        process.wait(10)
    assert done.returncode == 0, done.stderr
    end = json.loads(done.stdout)["end"]
    assert end["sum_received"]["bytes"] > 0
