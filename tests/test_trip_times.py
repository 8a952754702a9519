"""--trip-times, --histograms, --isochronous and a server's -F between real simpleperf
processes on loopback (one machine: the clocks agree), and against a real iperf3 server."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from helpers import free_port, run_simpleperf, start_iperf3_server, start_server

pytestmark = pytest.mark.loopback


def _receiver(document: dict, number: int = 0) -> dict:
    return document["end"]["streams"][number]["receiver"]


@pytest.mark.parametrize("direction", [[], ["-R"], ["--bidir"]])
def test_udp_trip_times_time_every_datagram_in_each_direction(server, direction):
    _, port = server
    done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-u", "-b", "20M", "-t", "1.5",
                          "--trip-times", "-J", "--no-latency", *direction)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    streams = document["end"]["streams"]
    assert len(streams) == (2 if direction == ["--bidir"] else 1)
    for number in range(len(streams)):
        receiver = _receiver(document, number)
        delay = receiver["one_way_delay"]
        received = receiver["packets"] - receiver["lost_packets"]
        assert delay["count"] == received > 2000
        assert 0 < delay["min_ms"] <= delay["p50_ms"] <= delay["p99_ms"] <= delay["max_ms"] \
            < 1000
        assert sum(count for _, count in delay["histogram"]["bins"]) + \
            delay["histogram"]["below"] + delay["histogram"]["above"] == delay["count"]
    # interval rows carry the delays where this end received: with -R and --bidir
    rows = [s for i in document["intervals"] for s in i["streams"] if "one_way_delay" in s]
    assert (len(rows) >= 1) == bool(direction)
    assert all(not row["sender"] for row in rows)


def test_tcp_trip_times_time_every_write_and_print_iperf2s_histograms(server):
    _, port = server
    done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "1.5", "-R", "-l", "64K",
                          "--trip-times", "--histograms", "--no-latency")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert sum("T8-PDF: bin(w=100us)" in line for line in lines) >= 1  # per interval
    final = [line for line in lines
             if "one-way delay of writes, path: kernel send to arrival (receiver)" in line]
    assert len(final) == 1 and "avg/min/max/stdev" in final[0]
    application = [line for line in lines if "write-to-read delay (application" in line]
    assert len(application) == 1 and "avg/min/max/stdev" in application[0]
    assert any("T8(f)-PDF" in line for line in lines)
    json_run = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-n", "10000000", "-l",
                              "100000", "--trip-times", "-J", "--no-latency")
    receiver = _receiver(json.loads(json_run.stdout))
    assert receiver["write_to_read_delay"]["count"] == 100  # every write of the 10 MB
    # the path's: every write whose departure a later write reported, which leaves out
    # those still in the sender's buffer (at most its largest size) when writing ended
    with open("/proc/sys/net/ipv4/tcp_wmem") as limits:
        buffered = -(-int(limits.read().split()[2]) // 100_000)
    assert 100 - buffered - 1 <= receiver["one_way_delay"]["count"] <= 99
    assert receiver["one_way_delay"]["mean_ms"] < receiver["write_to_read_delay"]["mean_ms"]
    assert receiver["bytes"] == 10_000_000


@pytest.mark.parametrize("protocol", [["-u"], []])
def test_isochronous_frames_arrive_whole_at_their_rate(server, protocol):
    _, port = server
    done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), *protocol, "-t", "2",
                          "--isochronous=30:8M,1M", "-J", "--no-latency")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["start"]["test_start"]["isochronous"]["frames_per_second"] == 30
    assert document["start"]["test_start"]["trip_times"] is True
    stream = document["end"]["streams"][0]
    sent, received = stream["sender"], stream["receiver"]
    assert 58 <= sent["frames"] <= 62  # 30 a second for 2 s
    assert received["frames"] + received["frames_lost"] == sent["frames"]
    assert received["frames_lost"] == 0 and sent["frames_slipped"] == 0
    assert received["frame_latency"]["count"] == received["frames"]
    assert 0 < received["frame_latency"]["max_ms"] < 1000
    # 8 Mbit/s as frames: about 1 MB a second
    assert 1.5e6 < sent["bytes"] < 2.6e6


def test_omitted_seconds_are_left_out_of_the_delays_and_the_frames(server):
    _, port = server
    done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-u", "-O", "1", "-t", "1",
                          "--isochronous=30:2M", "-J", "--no-latency", "-R")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    sent, received = (document["end"]["streams"][0][role] for role in ("sender", "receiver"))
    assert 26 <= sent["frames"] <= 33  # one measured second, not two
    assert received["frames"] + received["frames_lost"] == sent["frames"]
    assert received["frame_latency"]["count"] == received["frames"]
    assert received["one_way_delay"]["count"] == received["packets"] - received["lost_packets"]
    omitted = [s for i in document["intervals"] for s in i["streams"] if s["omitted"]]
    assert omitted and all(s["one_way_delay"]["count"] > 0 for s in omitted)


@pytest.mark.iperf3
def test_a_server_sends_its_file_to_reverse_clients_and_keeps_what_others_send(tmp_path):
    source = tmp_path / "served"
    source.write_bytes(bytes(range(256)) * 4000)
    live, port = start_server("-F", str(source))
    try:
        kept = tmp_path / "kept"
        done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-R", "-F", str(kept), "-t",
                              "5", "--no-latency")
        assert done.returncode == 0, done.stderr
        assert kept.read_bytes() == source.read_bytes()
        # an iperf3 client is served the file too, as iperf3's own server -F serves it
        by_iperf3 = tmp_path / "by-iperf3"
        iperf3 = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-R", "-F",
                                 str(by_iperf3), "-t", "2"], capture_output=True, text=True,
                                timeout=30)
        assert iperf3.returncode == 0, iperf3.stdout + iperf3.stderr
        assert by_iperf3.read_bytes() == source.read_bytes()
    finally:
        live.close()
    target = tmp_path / "written"
    live, port = start_server("-F", str(target))
    try:
        done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-F", str(source),
                              "--no-latency")
        assert done.returncode == 0, done.stderr
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (
                not target.exists() or target.stat().st_size < source.stat().st_size):
            time.sleep(0.05)
        assert target.read_bytes() == source.read_bytes()
    finally:
        live.close()


@pytest.mark.iperf3
@pytest.mark.parametrize("version", ["3.12", "3.21"])
def test_trip_times_against_an_iperf3_server_is_one_line_within_a_second(version):
    process, port = start_iperf3_server(version)
    try:
        began = time.monotonic()
        done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "2", "--trip-times")
        assert time.monotonic() - began < 3
        assert done.returncode == 1
        assert done.stderr.strip().count("\n") == 0
        assert "iperf3 server, which measures no one-way delay" in done.stderr
    finally:
        process.kill()
        process.wait()


def test_a_classic_server_refuses_trip_times_in_one_line():
    import socket
    import threading

    port = free_port()
    listener = socket.create_server(("127.0.0.1", port))

    def drain() -> None:  # a classic server: reads and says nothing
        conn, _ = listener.accept()
        with conn:
            while conn.recv(65536):
                pass

    threading.Thread(target=drain, daemon=True).start()
    try:
        done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", "--trip-times",
                              timeout=30)
        assert done.returncode == 1
        assert "speaks only classic simpleperf, which cannot do --trip-times" in done.stderr
    finally:
        listener.close()
