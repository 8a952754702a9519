"""The native protocol end to end: real servers and clients on loopback, both ends' view,
UDP, reverse and bidirectional tests, kernel statistics, latency, JSON."""

from __future__ import annotations

import json
import re

import pytest
from helpers import run_simpleperf, start_server

from simpleperf.command_line.cli import parse_args

pytestmark = pytest.mark.loopback  # real simpleperf processes on 127.0.0.1

IPERF3_END_KEYS = {"streams", "sum_sent", "sum_received"}


def run_json(port: int, *args: str, timeout: float = 60) -> dict:
    done = run_simpleperf("-c", "-p", str(port), "-J", *args, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def views(document: dict) -> list[tuple[dict, dict]]:
    return [(s["sender"], s["receiver"]) for s in document["end"]["streams"]]


def test_b_is_the_bind_address_for_a_server_and_the_rate_for_a_client():
    assert parse_args(["-s", "-b", "10.0.0.1"]).bind == "10.0.0.1"
    client = parse_args(["-c", "-u", "-b", "25M"])
    assert client.test.rate == 25e6 and client.test.transport.datagrams
    assert client.test.length == 1460
    assert client.needs_native


def test_a_classic_invocation_stays_classic():
    assert not parse_args(["-c", "-P", "5", "-t", "3", "-i", "1", "-w", "64K"]).needs_native
    for extra in (["-R"], ["--bidir"], ["-e"], ["-J"], ["-P", "6"], ["-O", "1"], ["--native"],
                  ["-u"], ["-b", "10M"]):
        assert parse_args(["-c", *extra]).needs_native, extra


def test_tcp_forward_both_views_agree_exactly(server):
    _, port = server
    document = run_json(port, "-t", "2", "-P", "2")
    assert set(document["end"]) >= IPERF3_END_KEYS
    assert document["start"]["test_start"]["num_streams"] == 2
    for sender, receiver in views(document):
        assert sender["sender"] is True and receiver["sender"] is False
        assert sender["bytes"] > 0 and sender["bytes"] == receiver["bytes"]
        assert 1.5 < sender["seconds"] < 3
    total = document["end"]["sum_sent"]["bytes"]
    assert total == sum(s["bytes"] for s, _ in views(document))
    assert document["end"]["sum_received"]["bytes"] == total
    assert len(document["intervals"]) >= 2
    interval = document["intervals"][0]
    assert {"socket", "start", "end", "seconds", "bytes", "bits_per_second"} <= set(
        interval["streams"][0])


def test_exact_amount_with_n(server):
    _, port = server
    document = run_json(port, "-n", "10MB", "--native")
    sender, receiver = views(document)[0]
    assert sender["bytes"] == receiver["bytes"] == 10_000_000


@pytest.mark.parametrize("direction", ["-R", "--bidir"])
def test_reverse_and_bidirectional(server, direction):
    live, port = server
    document = run_json(port, "-t", "2", direction)
    streams = views(document)
    assert len(streams) == (1 if direction == "-R" else 2)
    for sender, receiver in streams:
        assert sender["bytes"] > 0 and sender["bytes"] == receiver["bytes"]
    assert document["start"]["test_start"]["reverse" if direction == "-R" else "bidir"] == 1
    if direction == "--bidir":
        assert document["end"]["sum_sent_bidir_reverse"]["bytes"] > 0
        assert document["end"]["sum_sent"]["bytes"] > 0
    live.wait_for(lambda lines: any("sender" in line and "Mbps" in line for line in lines))


def test_udp_counts_every_datagram_and_keeps_the_rate(server):
    _, port = server
    document = run_json(port, "-u", "-b", "20M", "-t", "2", "-l", "1000")
    end = document["end"]
    stream = end["streams"][0]["udp"]
    sender = end["streams"][0]["sender"]
    assert sender["packets"] > 0 and sender["bytes"] == sender["packets"] * 1000
    assert stream["lost_packets"] == 0 and stream["packets"] == sender["packets"]
    assert end["sum"]["lost_percent"] == 0.0 and end["sum"]["jitter_ms"] >= 0
    assert 0.9 * 20e6 < sender["bits_per_second"] < 1.1 * 20e6
    assert {"jitter_ms", "lost_packets", "packets", "lost_percent"} <= set(end["sum"])


def test_udp_reverse(server):
    _, port = server
    document = run_json(port, "-u", "-b", "10M", "-t", "2", "-R")
    sender, receiver = views(document)[0]
    assert receiver["packets"] == sender["packets"] > 0
    assert receiver["lost_packets"] == 0
    assert document["intervals"][0]["streams"][0]["sender"] is False


def test_extended_kernel_statistics_in_table_and_json(server):
    _, port = server
    done = run_simpleperf("-c", "-p", str(port), "-t", "2", "-e", "-i", "1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("ID") and "Retr" in line and "Cwnd" in line for line in lines)
    assert any(line.rstrip().endswith("sender") for line in lines)
    assert any(line.rstrip().endswith("receiver") for line in lines)
    document = run_json(port, "-t", "1", "-e")
    sender = views(document)[0][0]
    assert "retransmits" in sender and sender["max_snd_cwnd"] > 0 and sender["mean_rtt"] > 0
    assert "snd_cwnd" in document["intervals"][0]["streams"][0]


def test_omit_leaves_the_first_seconds_out(server):
    _, port = server
    document = run_json(port, "-t", "1", "-O", "1")
    flags = [interval["sum"]["omitted"] for interval in document["intervals"]]
    assert flags[0] is True and flags[-1] is False
    sender = views(document)[0][0]
    measured = sum(i["sum"]["bytes"] for i in document["intervals"] if not i["sum"]["omitted"])
    assert sender["bytes"] == measured


def test_json_stream_is_one_object_per_line(server):
    _, port = server
    done = run_simpleperf("-c", "-p", str(port), "-t", "2", "--json-stream")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line)["event"] for line in done.stdout.splitlines()]
    assert events[0] == "start" and events[-1] == "end"
    assert events.count("interval") >= 2


def test_latency_under_load_is_reported(server):
    _, port = server
    document = run_json(port, "-t", "2")
    latency = document["end"]["latency"]
    assert latency["idle"]["count"] == 5
    assert latency["loaded"]["count"] >= 10
    assert 0 < latency["loaded"]["p50_ms"] <= latency["loaded"]["p99_ms"]
    assert latency["loaded"]["rpm"] > 0


@pytest.mark.parametrize("protocol", [[], ["-u"]])
def test_rtt_test_prints_like_ping(server, protocol):
    _, port = server
    done = run_simpleperf("-c", "-p", str(port), "--rtt", "--count", "5", "--rtt-interval",
                          "0.05", *protocol)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert sum(line.startswith("probe ") and "time=" in line for line in lines) == 5
    assert "5 probes sent, 5 answered, 0% lost" in done.stdout
    assert any(line.startswith("rtt min/avg/max/mdev = ") for line in lines)


def test_text_output_of_a_udp_test(server):
    _, port = server
    done = run_simpleperf("-c", "-p", str(port), "-u", "-b", "5M", "-t", "1", "-f", "KB")
    assert done.returncode == 0, done.stderr
    receiver = [line for line in done.stdout.splitlines() if line.endswith("receiver")]
    assert len(receiver) == 1 and "/" in receiver[0] and " ms " in receiver[0]
    assert "KB" in receiver[0]


def test_local_address_ipv6_mss_and_nodelay(server):
    _, port = server
    document = run_json(port, "-t", "1", "-B", "127.0.0.2", "-M", "1000", "-N", "-C", "cubic")
    assert document["start"]["connected"][0]["local_host"] == "127.0.0.2"
    assert views(document)[0][1]["bytes"] > 0
    six = run_simpleperf("-c", "::1", "-p", str(port), "-6", "-J", "-t", "1", "-R")
    assert six.returncode == 0, six.stderr
    assert json.loads(six.stdout)["start"]["connected"][0]["local_host"] == "::1"
    four_only = run_simpleperf("-c", "::1", "-p", str(port), "-4", "-J", "-t", "1")
    assert four_only.returncode == 1 and "resolve" in four_only.stderr


def test_a_server_with_6_serves_ipv6_only_tcp_and_udp():
    live, port = start_server("-6")
    try:
        for transport in ([], ["-u", "-b", "10M"]):
            six = run_simpleperf("-c", "::1", "-p", str(port), "-J", "-t", "1", *transport)
            assert six.returncode == 0, six.stderr
            assert json.loads(six.stdout)["end"]["sum_received"]["bytes"] > 0
        four = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", "--native")
        assert four.returncode == 1 and "refused" in four.stderr
    finally:
        live.close()


def test_native_tests_print_a_row_per_second_unless_i_0(server):
    _, port = server
    rows = run_simpleperf("-c", "-p", str(port), "-t", "2", "--native", "--no-latency")
    assert rows.returncode == 0, rows.stderr
    assert re.search(r"0\.0 - 1\.0 .*\n.*1\.0 - 2\.0 ", rows.stdout), rows.stdout
    quiet = run_simpleperf("-c", "-p", str(port), "-t", "2", "--native", "--no-latency",
                           "-i", "0")
    assert quiet.returncode == 0, quiet.stderr
    assert "0.0 - 1.0" not in quiet.stdout and "0.0 - 2.0" in quiet.stdout
    classic = run_simpleperf("-c", "-p", str(port), "-t", "1")
    assert "0.0 - 1.0" in classic.stdout and classic.stdout.count("Mbps") == 1


@pytest.mark.parametrize("args,rate", [([], r"[\d.]+ [KMG]?bits/sec"),
                                       (["-f", "m"], r"[\d.]+ Mbits/sec"),
                                       (["-f", "K"], r"[\d.]+ KBytes/sec"),
                                       (["-f", "MB"], r"[\d.]+ Mbps")])
def test_native_rows_take_iperf3_units_and_classic_ones(server, args, rate):
    _, port = server
    done = run_simpleperf("-c", "-p", str(port), "-t", "1", "--native", "--no-latency", *args)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.endswith(("sender", "receiver"))]
    assert len(rows) == 2 and all(re.search(rate, row) for row in rows), done.stdout
    if "MB" not in args:
        assert all(re.search(r"[\d.]+ [KMG]?Bytes ", row) for row in rows), rows


@pytest.mark.parametrize("path", ["compiled", "python", "keyed", "trip-times"])
def test_what_the_receiving_socket_dropped_is_told_apart_from_the_network(
        path, monkeypatch, tmp_path):
    """A receiver whose socket holds 32 KB, flooded at -b 0 on loopback: everything lost
    was dropped by the receiving socket, and each receive path (C, Python's batches, keyed
    datagrams, one-way delays) says so from the drops the kernel gives with each read."""
    extra: list[str] = []
    if path == "python":
        monkeypatch.setenv("SIMPLEPERF_PURE_PYTHON", "1")
    if path == "keyed":
        secret = tmp_path / "secret"
        secret.write_text("a shared secret\n")
        extra = ["--auth-secret-file", str(secret)]
    live, port = start_server(*extra)
    try:
        if path == "trip-times":
            extra = ["--trip-times"]
        document = run_json(port, "-u", "-b", "0", "-t", "1", "-w", "16K", *extra)
        total = document["end"]["sum"]
        assert total["lost_packets"] > 1000
        # loopback loses nothing on the way: all of it was the receiving host's
        assert total["receiver_dropped_packets"] == total["lost_packets"]
        (stream,) = document["end"]["streams"]
        assert stream["receiver"]["receiver_dropped_packets"] == total["lost_packets"]
        if path == "compiled":
            done = run_simpleperf("-c", "-p", str(port), "-u", "-b", "0", "-t", "1", "-w",
                                  "16K", "--native")
            assert done.returncode == 0, done.stderr
            assert re.search(r"%: 0 in the network, \d+ by the receiving host\)", done.stdout)
    finally:
        live.close()


def test_an_unlimited_sender_slows_to_what_the_receiving_host_takes(server):
    """-b 0 against a receiver whose socket holds 512 KB: unpaced, about half the datagrams
    were dropped there (45 % here, quiet); told of the drops, the sender slows to what the
    receiver reads (4-7 % lost, quiet; 15-32 % with two more processes spinning on the two
    cores) and says how often it did. Bound 50 %: a sender that does not slow, or slows to
    a trickle it cannot leave (97 % lost in an early version), fails it."""
    _, port = server
    document = run_json(port, "-u", "-b", "0", "-t", "2", "-w", "256K")
    total = document["end"]["sum"]
    (stream,) = document["end"]["streams"]
    assert total["receiver_dropped_packets"] > 0  # a burst overflows it at least at first
    assert stream["sender"]["paced_by_receiver"] >= 1
    assert total["lost_percent"] < 50
    assert total["receiver_dropped_packets"] == total["lost_packets"]  # loopback
    reverse = run_json(port, "-u", "-b", "0", "-t", "2", "-w", "256K", "-R")["end"]
    assert reverse["streams"][0]["sender"]["paced_by_receiver"] >= 1  # the server's sender
    assert reverse["sum"]["lost_percent"] < 50
