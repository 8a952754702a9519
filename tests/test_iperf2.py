"""iperf2's protocol both ways, against Debian's real iperf 2.1.8 on loopback: its client at
our server (TCP, -P, -R, UDP with the server report, --trip-times) and our client at its
servers (--iperf2), and the bytes at both ends agreeing. Refusals are one line, and the
server keeps serving every other client."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import struct
import subprocess
import time

import pytest
from helpers import (
    SIMPLEPERF,
    LiveProcess,
    end_iperf_server,
    free_port,
    proc_status,
    run_simpleperf,
    start_server,
)

from simpleperf.protocol import iperf2
from simpleperf.transport import compiled

pytestmark = [pytest.mark.loopback, pytest.mark.iperf2]


def _documents(lines: list[str]) -> list[dict]:
    """The server's -J documents so far, in order."""
    text, decoder, found, at = "\n".join(lines), json.JSONDecoder(), [], 0
    while True:
        start = text.find("{", at)
        if start < 0:
            return found
        try:
            value, at = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            return found
        found.append(value)


def _iperf(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(["iperf", *args], capture_output=True, text=True, timeout=timeout)


def _csv_bytes(output: str, streams: int = 1) -> list[int]:
    """Each stream's bytes from iperf2's -y C rows (its SUM row left out)."""
    rows = [line.split(",") for line in output.splitlines() if line.count(",") >= 8]
    return [int(row[7]) for row in rows if row[5] != "-1"][:streams]


def _await_listening(port: int, udp: bool = False) -> None:
    """Listening, read from the kernel (a connection to find out would be a test)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not subprocess.run(
            ["ss", "-Hlun" if udp else "-Hltn", f"sport = :{port}"], capture_output=True,
            text=True).stdout:
        time.sleep(0.05)


@pytest.fixture
def json_server():
    """A simpleperf server writing a -J document per test (and no banner to wait for)."""
    port = free_port()
    live = LiveProcess("-s", "-p", str(port), "-J")
    _await_listening(port)
    yield live, port
    live.close()


def _wait_documents(live, count: int) -> list[dict]:
    live.wait_for(lambda lines: len(_documents(lines)) >= count)
    return _documents(live.lines)


def test_an_iperf2_tcp_client_is_served_and_both_ends_count_the_same_bytes(json_server):
    live, port = json_server
    done = _iperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", "-y", "C")
    assert done.returncode == 0, done.stderr
    (theirs,) = _csv_bytes(done.stdout)
    (document,) = _wait_documents(live, 1)
    assert document["start"]["protocol"] == "iperf2 2.1.8"
    assert document["end"]["sum_received"]["bytes"] == theirs
    assert "error" not in document


def test_parallel_connections_are_one_test(json_server):
    live, port = json_server
    done = _iperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", "-P", "3", "-y", "C")
    assert done.returncode == 0, done.stderr
    theirs = _csv_bytes(done.stdout, 3)
    (document,) = _wait_documents(live, 1)
    assert document["start"]["test_start"]["num_streams"] == 3
    assert document["end"]["sum_received"]["bytes"] == sum(theirs)


def test_reverse_tcp_the_server_sends_and_the_client_receives_it_all(json_server):
    live, port = json_server
    done = _iperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", "-R", "-y", "C")
    assert done.returncode == 0, done.stderr
    (theirs,) = _csv_bytes(done.stdout)
    (document,) = _wait_documents(live, 1)
    assert document["start"]["test_start"]["reverse"] == 1
    assert document["end"]["sum_sent"]["bytes"] == theirs > 0


def test_tradeoff_and_dual_tests_connect_back_to_the_client(json_server):
    """-r: after the client's test, ours to its port (-L); -d: both at once."""
    live, port = json_server
    tradeoff = _iperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", "-r", "-L",
                      str(free_port()), "-y", "C")
    assert tradeoff.returncode == 0, tradeoff.stderr
    theirs_sent, theirs_received = _csv_bytes(tradeoff.stdout, 2)
    forward, back = _wait_documents(live, 2)
    assert forward["end"]["sum_received"]["bytes"] == theirs_sent
    assert back["start"]["test_start"]["reverse"] == 1
    assert back["end"]["sum_sent"]["bytes"] == theirs_received > 0
    dual = _iperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", "-d", "-L",
                  str(free_port()), "-y", "C")
    assert dual.returncode == 0, dual.stderr
    rows = {int(row[2]) == port or int(row[4]) == port: int(row[7])
            for row in (line.split(",") for line in dual.stdout.splitlines())}
    both = _wait_documents(live, 3)[2]["end"]
    assert both["sum_received"]["bytes"] == rows[True]  # the client's stream to us
    assert both["sum_sent_bidir_reverse"]["bytes"] == rows[False] > 0  # ours to it


@pytest.mark.parametrize("bare", [(), ("-C",)], ids=["header", "no-header"])
def test_an_iperf2_udp_client_gets_the_server_report(json_server, bare):
    """-C: 2.1.8 as iperf 2.0 clients send UDP, no header at all (told by its digits)."""
    live, port = json_server
    done = _iperf("-c", "127.0.0.1", "-p", str(port), "-u", "-b", "20M", "-t", "1", *bare)
    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stdout + done.stderr  # no "did not receive ack"
    sent = int(re.search(r"Sent (\d+) datagrams", done.stdout).group(1))
    report = re.search(r"Server Report:\n.*\n.*?([\d.]+) ms +(\d+)/(\d+)", done.stdout)
    assert report is not None, done.stdout
    lost, total = int(report.group(2)), int(report.group(3))
    (document,) = _wait_documents(live, 1)
    (stream,) = document["end"]["streams"]
    ours = stream["udp"]
    assert (ours["lost_packets"], ours["packets"]) == (lost, total) == (0, sent - 1)
    assert abs(float(report.group(1)) - ours["jitter_ms"]) < 0.0015


def test_an_iperf_2_0_udp_client_with_32_bit_numbers_is_served(json_server):
    """iperf 2.0 before 2.0.10: 12 bytes (a 32-bit number, the send time) then its digits;
    its last datagram, numbered negative, is answered with the report of all it sent."""
    live, port = json_server
    digits = bytes(0x30 + i % 10 for i in range(1470))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as conn:
        conn.connect(("127.0.0.1", port))
        for number in [*range(1, 201), -201]:
            now = time.time()
            conn.send(struct.pack("!iII", number, int(now), int(now % 1 * 1e6)) + digits[12:])
            time.sleep(0.001)
        conn.settimeout(5)
        report = iperf2.parse_report(conn.recv(65536))
    # the last counted, as 2.1.8's own server reports these datagrams (checked by hand)
    assert (report.datagrams, report.lost, report.out_of_order) == (201, 0, 0)
    assert report.num_bytes == 201 * 1470
    (document,) = _wait_documents(live, 1)
    assert document["end"]["streams"][0]["udp"]["packets"] == 201


def test_a_reverse_udp_client_receives_what_we_send_at_its_rate():
    """iperf2's UDP client cannot prove its address: the operator allows what it may be
    sent (--unproven-udp; tests/test_forged_udp.py: refused without)."""
    port = free_port()
    live = LiveProcess("-s", "-p", str(port), "-J", "--unproven-udp", "20M/5")
    _await_listening(port)
    try:
        _reverse_udp_client(live, port)
    finally:
        live.close()


def _reverse_udp_client(live: LiveProcess, port: int) -> None:
    done = _iperf("-c", "127.0.0.1", "-p", str(port), "-u", "-R", "-b", "10M", "-t", "2",
                  "-y", "C")
    assert done.returncode == 0, done.stderr
    (row,) = [r.split(",") for r in done.stdout.splitlines() if r.count(",") >= 12]
    received, lost, total = int(row[7]), int(row[10]), int(row[11])
    assert lost == 0 and total > 1500 and 9.5e6 < int(row[8]) < 10.5e6
    (document,) = _wait_documents(live, 1)
    sent = document["end"]["sum_sent"]
    assert document["start"]["test_start"]["reverse"] == 1
    assert sent["packets"] in (total, total - 1)  # iperf2 counts our last datagram too
    assert sent["bytes"] <= received


def test_udp_trip_times_reach_the_iperf2_client_as_its_latency(json_server):
    live, port = json_server
    done = _iperf("-c", "127.0.0.1", "-p", str(port), "-u", "-b", "5M", "-t", "1",
                  "--trip-times")
    assert done.returncode == 0, done.stderr
    latency = re.search(r"\d+/\d+ \(\d+%\) ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms",
                        done.stdout)
    assert latency is not None, done.stdout  # iperf2 prints -/-/- without our delays
    mean, low, high = (float(latency.group(i)) for i in (1, 2, 3))
    assert low <= mean <= high < 50
    (document,) = _wait_documents(live, 1)
    delays = document["end"]["streams"][0]["receiver"]["one_way_delay"]
    assert abs(delays["mean_ms"] - mean) < 0.002
    # the report carries whole microseconds (iperf2's timeval): a loopback minimum can be
    # below one, which iperf2 then prints as 0.000
    assert abs(delays["min_ms"] - low) <= 0.001 and delays["min_ms"] > 0


def test_an_iperf2_tcp_client_without_a_header_is_served_as_iperf2(json_server):
    """2.1.8's -C (as iperf 2.0's client without -r or -d): no header, its digits from the
    first byte; an iperf2 test of all its bytes, not a classic one cut short."""
    live, port = json_server
    done = _iperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", "-C", "-y", "C")
    assert done.returncode == 0, done.stderr
    (theirs,) = _csv_bytes(done.stdout)
    (document,) = _wait_documents(live, 1)
    assert document["start"]["protocol"] == "iperf2" and "error" not in document
    assert document["end"]["sum_received"]["bytes"] == theirs


@pytest.mark.parametrize("udp", [(), ("-u", "-b", "10M")], ids=["tcp", "udp"])
def test_full_duplex_both_directions_on_one_connection_counted_alike(json_server, udp):
    live, port = json_server
    done = _iperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", "--full-duplex", "-y", "C",
                  *udp)
    assert done.returncode == 0, done.stderr
    (document,) = _wait_documents(live, 1)
    end = document["end"]
    ours = [end["sum_received"]["bytes"], end["sum_sent_bidir_reverse"]["bytes"]]
    assert min(ours) > 0 and document["start"]["test_start"]["bidir"] == 1
    assert sorted(_csv_bytes(done.stdout, 2)) == sorted(ours)
    assert len(end["streams"]) == 2  # one direction each
    if udp:  # no final exchange (2.1.8's --full-duplex), yet nothing lost either way
        assert end["sum_received"]["lost_packets"] == 0 and "error" not in document
        assert re.search(r",0,[1-9]\d*,0\.000,0$", done.stdout, re.M), done.stdout


def test_the_header_is_acknowledged_with_our_version_as_2_1_8_does(json_server):
    live, port = json_server
    done = _iperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", "-X", "--trip-times")
    assert done.returncode == 0, done.stderr
    check = re.search(r"Clock sync check \(ms\): RTT/Half=\(([\d.]+)/([\d.]+)\)",
                      done.stdout + done.stderr)
    assert check is not None, done.stdout + done.stderr  # it read our acknowledgement's times
    assert 0 < float(check.group(1)) < 100
    header = iperf2.encode_header(iperf2.ClientHeader(
        flags=iperf2.EXTEND | iperf2.PEER_DETECT | iperf2.VERSION2, amount=-10,
        version=iperf2.VERSION), udp=False)
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(header)
        conn.settimeout(10)
        assert iperf2.parse_ack(conn.recv(iperf2.ACK.size, socket.MSG_WAITALL)) == "2.1.8"


def _iperf_bounces(port: int, seconds: int, *flags: str) -> tuple[int, float, float]:
    """iperf 2.1.8's bounceback client at our server: its round trips and their mean and
    least (ms), from its final line."""
    done = _iperf("-c", "127.0.0.1", "-p", str(port), "-t", str(seconds), "--bounceback",
                  *flags)
    assert done.returncode == 0, done.stderr
    final = re.search(rf"0\.0+-{seconds}\.\d+ sec .* (\d+)=([\d.]+)/([\d.]+)/", done.stdout)
    assert final is not None, done.stdout
    return int(final.group(1)), float(final.group(2)), float(final.group(3))


def test_an_iperf2_bounceback_client_gets_every_message_back(json_server):
    live, port = json_server
    count, mean, low = _iperf_bounces(port, 2, "--bounceback-hold", "2")
    assert count >= 20 and 2.0 <= low <= mean < 50  # each held 2 ms by us
    (document,) = _wait_documents(live, 1)
    assert document["end"]["sum_received"]["bytes"] == count * iperf2.DEFAULT_BOUNCE_SIZE


def test_back_to_back_bounceback_from_iperf_2_1_8_is_served_by_the_compiled_loop(
        json_server):
    """Back to back (no hold, no period): our server's compiled loop, at iperf 2.1.8's
    client; the client's last message (its stop flag) is not counted as bounced."""
    live, port = json_server
    count, _, _ = _iperf_bounces(port, 1, "--bounceback-period", "0")
    assert count >= 500  # thousands a second on loopback
    (document,) = _wait_documents(live, 1)
    assert document["end"]["sum_received"]["bytes"] == count * iperf2.DEFAULT_BOUNCE_SIZE


def _iperf_amount(number: str, unit: str) -> tuple[float, float]:
    """An amount iperf printed (`38.1`, `M`) in bytes, and half its last digit's worth:
    what its rounding may hide."""
    scale = 1024 ** "KMG".index(unit) * 1024
    digits = len(number.partition(".")[2])
    return float(number) * scale, 0.5 * 10 ** -digits * scale


def test_iperf_2_1_8s_bounceback_congest_is_served_both_ways(json_server):
    """--bounceback-congest: 2.1.8's client adds a full-duplex TCP test of its own beside
    the round trips; we serve both at once. What it wrote we received, to its rounding;
    what we sent it read, less what was still on its way when it stopped reading."""
    live, port = json_server
    done = _iperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", "--bounceback",
                  "--bounceback-period", "0", "--bounceback-congest", "-e")
    assert done.returncode == 0, done.stderr
    wrote = re.search(r"^\[ *\d+\] 0\.0+-1\.\d+ sec\s+([\d.]+) ([KMG])Bytes\s+\S+ \S+/sec"
                      r"\s+\d+/\d+ ", done.stdout, re.M)
    read = re.search(r"^\[ \*\d+\] 0\.0+-1\.\d+ sec\s+([\d.]+) ([KMG])Bytes", done.stdout,
                     re.M)
    bounces = re.search(r" (\d+)=[\d.]+/[\d.]+/[\d.]+/[\d.]+ ms", done.stdout)
    assert wrote is not None and read is not None and bounces is not None, done.stdout
    documents = _wait_documents(live, 2)
    (duplex,) = [d for d in documents if d["end"].get("sum_received_bidir_reverse")]
    (bounced,) = [d for d in documents if d is not duplex]
    assert bounced["end"]["sum_received"]["bytes"] == \
        int(bounces.group(1)) * iperf2.DEFAULT_BOUNCE_SIZE
    theirs, rounding = _iperf_amount(*wrote.groups())
    assert abs(duplex["end"]["sum_received"]["bytes"] - theirs) <= rounding
    theirs, rounding = _iperf_amount(*read.groups())
    assert duplex["end"]["sum_sent_bidir_reverse"]["bytes"] >= theirs - rounding > 0


def test_our_bounceback_asks_2_1_8s_server_for_quick_acks_unless_told_not_and_congests():
    """Our client's messages carry 2.1.8's quick-ack flag (its server prints "bb
    w/quickack") unless --bounceback-no-quickack; --bounceback-congest=up adds a TCP test
    whose rate we report as the server measured it."""
    process, port = _iperf_server("-e", csv=False)
    try:
        runs = [run_simpleperf("-c", "127.0.0.1", "-p", str(port), "--bounceback",
                               "--bounceback-period", "0", "-t", "1", "-J", *flags)
                for flags in ([], ["--bounceback-no-quickack"], ["--bounceback-congest=up"])]
        time.sleep(0.5)
    finally:
        output = end_iperf_server(process)
    assert all(done.returncode == 0 for done in runs), [done.stderr for done in runs]
    connections = re.findall(r"^\[ *(\d+)\] local .*?port \d+ connected with .*$", output,
                             re.M)
    kinds = [line for line in output.splitlines() if " connected with " in line]
    assert len(kinds) == 4, output
    assert "(bb w/quickack " in kinds[0] and "(bb len/hold" in kinds[1]
    assert "(bb w/quickack " in kinds[2] and "(bb" not in kinds[3]  # the load's test
    load_id = connections[3]
    row = re.search(rf"^\[ *{load_id}\] 0\.0+-(\d\.\d+) sec\s+[\d.]+ \w+\s+([\d.]+) "
                    r"(G|M)bits/sec", output, re.M)
    assert row is not None, output
    theirs = float(row.group(2)) * (1e9 if row.group(3) == "G" else 1e6)
    documents = [json.loads(done.stdout) for done in runs]
    assert [d["start"]["test_start"]["quickack"] for d in documents] == [True, False, True]
    assert documents[0]["end"]["working_load"] is None
    load = documents[2]["end"]["working_load"]
    assert load["direction"] == "up" and load["down_bits_per_second"] is None
    assert abs(load["up_bits_per_second"] / theirs - 1) < 0.05, (load, theirs)
    assert documents[2]["end"]["round_trips"] > 100


def test_our_bounceback_congest_both_ways_at_our_server():
    live, port = start_server()
    try:
        done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "--bounceback",
                              "--bounceback-period", "0", "-t", "1",
                              "--bounceback-congest=bidir,2")
    finally:
        live.close()
    assert done.returncode == 0, done.stderr
    load = re.search(r"^working load \(2 TCP streams, bidir\): up ([\d.]+) ([GM])bits/sec, "
                     r"down ([\d.]+) ([GM])bits/sec$", done.stdout, re.M)
    assert load is not None and float(load.group(1)) > 0 and float(load.group(3)) > 0, \
        done.stdout
    assert re.search(r"^(\d+) probes sent, \1 answered, 0% lost", done.stdout, re.M)


@pytest.mark.parametrize("pure", ["0", "1"])
def test_back_to_back_bounceback_at_iperf_2_1_8s_server(pure):
    """Back to back: our client's compiled loop (and, with SIMPLEPERF_PURE_PYTHON=1,
    Python's) at iperf 2.1.8's server."""
    process, iperf_port = _iperf_server()
    env = {**os.environ, compiled.PURE_PYTHON_VARIABLE: pure}

    def bounce(*flags: str) -> subprocess.CompletedProcess:
        return subprocess.run([*SIMPLEPERF, "-c", "127.0.0.1", "-p", str(iperf_port),
                               "--bounceback", "--bounceback-period", "0", *flags],
                              capture_output=True, text=True, timeout=30, env=env)
    try:
        ours = bounce("-t", "1", "-i", "0.5")
        # -J prints no rows, and its round trips go on past the first row's end
        short, long = (json.loads(bounce("-t", seconds, "-J").stdout)["end"]["round_trips"]
                       for seconds in ("0.5", "1.5"))
    finally:
        end_iperf_server(process)
    assert long > 2 * short > 0, (short, long)
    assert ours.returncode == 0, ours.stderr
    rows = re.findall(r"^\d\.\d-\d\.\d s  (\d+) round trips  rtt avg/min/max = "
                      r"([\d.]+)/([\d.]+)/", ours.stdout, re.M)
    assert len(rows) == 2 and all(int(n) >= 200 and 0 < float(low) <= float(avg) < 50
                                  for n, avg, low in rows), ours.stdout


def test_a_permit_key_is_checked_as_2_1_8_checks_it():
    port = free_port()
    live = LiveProcess("-s", "-p", str(port), "--permit-key", "sesame1", "-J")
    _await_listening(port)
    try:
        right = _iperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", "--permit-key=sesame1",
                       "-y", "C")
        for wrong in (["--permit-key=sesame2"], []):
            _iperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", *wrong, "-y", "C")
        served, *refused = _wait_documents(live, 3)
    finally:
        live.close()
    assert served["end"]["sum_received"]["bytes"] == _csv_bytes(right.stdout)[0] > 0
    assert [d["error"] for d in refused] == [
        "the wrong permit key", "no permit key (this server has --permit-key)"]
    process, iperf_port = _iperf_server("--permit-key=sesame3")
    try:
        ours = run_simpleperf("-c", "127.0.0.1", "-p", str(iperf_port), "--iperf2",
                              "--permit-key", "sesame3", "-t", "1", "-J")
        time.sleep(0.5)
    finally:
        output = end_iperf_server(process)
    assert ours.returncode == 0, ours.stderr
    theirs = _csv_bytes(output)[0]  # 2.1.8's server leaves the key out of its count
    assert json.loads(ours.stdout)["end"]["sum_sent"]["bytes"] == theirs + len("sesame3")


def test_a_server_that_requires_authentication_refuses_iperf2_in_one_line(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("correct horse battery staple\n")
    port = free_port()
    live = LiveProcess("-s", "-p", str(port), "-J", "--auth-secret-file", str(secret))
    _await_listening(port)
    try:
        tcp = _iperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", "-y", "C")
        udp = _iperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", "-u", "-y", "C")
        refused = _wait_documents(live, 2)
        native = run_simpleperf("-c", "-p", str(port), "--native", "-t", "1",
                                "--auth-secret-file", str(secret), timeout=30)
    finally:
        live.close()
    assert tcp.returncode == 0 and udp.returncode == 0  # iperf2 ends as with a lost server
    assert [d["error"] for d in refused] == ["this server requires authentication, which "
                                             "iperf2's protocol cannot carry"] * 2
    assert native.returncode == 0, native.stderr  # and it goes on serving


def test_hostile_headers_end_one_connection_each_and_leave_nothing_behind():
    live, port = start_server()
    try:
        before = proc_status(live.process.pid)
        v1 = iperf2.CLIENT_V1
        bad = [
            v1.pack(iperf2.EXTEND | iperf2.LEN_BIT | 60 << 1, 10**6, 5001, 0,
                    0, -100),  # a million threads
            v1.pack(iperf2.EXTEND | iperf2.LEN_BIT | 60 << 1, 1, 5001,
                    2**31 - 1, 0, -100),  # a 2 GB buffer
            v1.pack(iperf2.EXTEND | iperf2.LEN_BIT | 60 << 1, 1, 5001, 0, 0,
                    -(2**31) + 1),  # 248 days
            struct.pack("!I", iperf2.EXTEND | iperf2.LEN_BIT | (60 << 1)),  # then silence
            _bounce(size=2**30), _bounce(hold=3600 * 10**6),  # a GB message, an hour's hold
            _bounce()[:40],  # a bounceback message cut short
        ]
        for header in bad:
            with socket.create_connection(("127.0.0.1", port)) as conn:
                conn.sendall(header)
                conn.shutdown(socket.SHUT_WR)
                conn.settimeout(10)
                # the server closed it (a reset when it left bytes unread)
                with contextlib.suppress(ConnectionResetError):
                    assert conn.recv(1) == b""
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as flood:
            forged = iperf2.DATAGRAM.pack(7, 0, 0, 0) + iperf2.encode_header(
                iperf2.ClientHeader(threads=10**5), udp=True)
            for _ in range(50):
                flood.sendto(forged, ("127.0.0.1", port))
        live.wait_for(lambda lines: sum("Refused iperf2" in line for line in lines) >= 7)
        done = _iperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", "-y", "C")
        assert done.returncode == 0 and _csv_bytes(done.stdout)[0] > 0
        time.sleep(1)
        after = proc_status(live.process.pid)
        assert after["threads"] <= before["threads"] and after["fds"] <= before["fds"]
    finally:
        live.close()


def _bounce(size: int = 64, hold: int = 0) -> bytes:
    message = iperf2.encode_bounce(iperf2.Bounce(64, 1, 0, 0, hold, time.time()))
    struct.pack_into("!I", message, 4, size)
    return bytes(message)


# Our client at iperf2's servers ------------------------------------------------------------

def _iperf_server(*args: str, csv: bool = True) -> tuple[subprocess.Popen, int]:
    port = free_port()
    process = subprocess.Popen(["iperf", "-s", "-p", str(port), *(["-y", "C"] if csv else []),
                                *args],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _await_listening(port, udp="-u" in args)
    return process, port


def _at_iperf2_server(server: tuple[str, ...], *client: str, csv: bool = True
                     ) -> tuple[subprocess.CompletedProcess, str]:
    """Our client (--iperf2 and `client`) at a fresh iperf 2.1.8 server (`server`), and
    what the server printed, its last rows included."""
    process, port = _iperf_server(*server, csv=csv)
    try:
        done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "--iperf2", *client)
        time.sleep(0.5)
    finally:
        output = end_iperf_server(process)
    return done, output


def test_an_iperf2_server_sending_tcp_keeps_to_our_b():
    """-R -b over TCP: 2.1.8's server reads the rate from our header and paces to it (it
    was not told, and sent as fast as loopback goes)."""
    done, _ = _at_iperf2_server((), "-t", "2", "-J", "-R", "-b", "20M")
    assert done.returncode == 0, done.stderr
    received = json.loads(done.stdout)["end"]["sum_received"]["bits_per_second"]
    assert 15e6 < received < 25e6, received


@pytest.mark.parametrize("extra", [(), ("-P", "2"), ("-R",)], ids=["tcp", "parallel", "reverse"])
def test_our_client_at_an_iperf2_tcp_server(extra):
    done, output = _at_iperf2_server((), "-t", "1", "-J", *extra)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    streams = 2 if "-P" in extra else 1
    theirs = _csv_bytes(output, streams)
    assert len(theirs) == streams, output
    side = "sum_received" if "-R" in extra else "sum_sent"
    assert document["end"][side]["bytes"] == sum(theirs)
    assert document["start"]["protocol"] == "iperf2"


def test_our_dual_test_at_an_iperf2_server_counts_both_directions_as_it_does():
    done, output = _at_iperf2_server((), "-d", "-t", "1", "-J")
    assert done.returncode == 0, done.stderr
    end = json.loads(done.stdout)["end"]
    ours = sorted([end["sum_sent"]["bytes"], end["sum_received_bidir_reverse"]["bytes"]])
    assert min(ours) > 0
    assert sorted(_csv_bytes(output, 2)) == ours


@pytest.mark.parametrize(("flag", "udp"), [("--full-duplex", ()), ("--bidir", ()),
                                           ("--full-duplex", ("-u", "-b", "10M"))],
                         ids=["full-duplex", "bidir", "udp"])
def test_our_full_duplex_at_an_iperf2_server_both_ways_on_each_connection(flag, udp):
    done, output = _at_iperf2_server(udp[:1], flag, "-t", "1", "-J", *udp)
    assert done.returncode == 0, done.stderr
    end = json.loads(done.stdout)["end"]
    ours = sorted([end["sum_sent"]["bytes"], end["sum_received_bidir_reverse"]["bytes"]])
    assert min(ours) > 0
    assert sorted(_csv_bytes(output, 2)) == ours
    if udp:  # its datagrams read as ours are, none lost (no report either way)
        assert end["sum_received_bidir_reverse"]["lost_packets"] == 0


def test_our_peer_detection_learns_the_iperf2_servers_version():
    process, port = _iperf_server()
    try:
        done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "--iperf2", "-X", "-t",
                              "1", "-J")
        text = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "--iperf2", "-X", "-t",
                              "1")
        time.sleep(0.5)
    finally:
        output = end_iperf_server(process)
    assert done.returncode == 0 and text.returncode == 0, done.stderr + text.stderr
    assert json.loads(done.stdout)["start"]["protocol"] == "iperf2 2.1.8"
    assert text.stdout.startswith("The server is iperf 2.1.8")
    assert json.loads(done.stdout)["end"]["sum_sent"]["bytes"] == _csv_bytes(output)[0]


def test_our_bounceback_at_an_iperf2_server_and_at_ours():
    process, port = _iperf_server()
    try:
        theirs = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "--bounceback=5",
                                "--bounceback-period", "0.5", "--bounceback-hold", "2",
                                "-t", "1.2", "-J")
    finally:
        end_iperf_server(process)
    live, ours_port = start_server()
    try:
        ours = run_simpleperf("-c", "127.0.0.1", "-p", str(ours_port), "--bounceback=5",
                              "--bounceback-period", "0.5", "--bounceback-hold", "2",
                              "-t", "1.2", "-J")
    finally:
        live.close()
    for done in (theirs, ours):
        assert done.returncode == 0, done.stderr
        end = json.loads(done.stdout)["end"]
        assert end["round_trips"] == 15  # bursts of 5 at 0, 0.5 and 1 s
        assert end["rtt"]["min_ms"] >= 2.0 and 1.9 <= end["server_hold_mean_ms"] < 10


def test_our_tcp_trip_times_at_an_iperf2_server_both_ways():
    """Our writes as 2.1.8's timed bursts (its server times each one, and they add up to
    our bytes after the header), and its -R writes timed by us, one delay per write."""
    process, port = _iperf_server("-e", csv=False)
    try:
        forward = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "--iperf2",
                                 "--trip-times", "-l", "64K", "-t", "1", "-J")
        time.sleep(0.3)
        reverse = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "--iperf2",
                                 "--trip-times", "-R", "-t", "1", "-J")
        time.sleep(0.3)
        frames = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "--iperf2",
                                "--isochronous", "30:5m,0", "-t", "1", "-J")
        time.sleep(0.5)
    finally:
        output = end_iperf_server(process)
    assert forward.returncode == 0 and reverse.returncode == 0, forward.stderr + reverse.stderr
    bursts = re.search(r"Burst Latency avg/min/max/stdev \(cnt/size\).*\n.* sec .* "
                       r"([\d.]+)/([\d.]+)/[\d.]+/[\d.]+ ms \((\d+)/(\d+)\)", output)
    assert bursts is not None, output
    mean, low, count, size = float(bursts[1]), float(bursts[2]), int(bursts[3]), int(bursts[4])
    sent = json.loads(forward.stdout)["end"]["sum_sent"]["bytes"]
    assert size == 64000 and sent == iperf2.TCP_HEADER_SIZE + iperf2.START_FQ.size + count * size
    assert 0 < low <= mean < 50
    writes = re.search(r"Write/Err.*\n.* sec .*bits/sec +(\d+)/0 ", output)
    assert writes is not None, output
    delays = json.loads(reverse.stdout)["end"]["streams"][0]["receiver"]["write_to_read_delay"]
    assert delays["count"] == int(writes[1]) > 1000 and 0 < delays["mean_ms"] < 50
    # TCP frames: a burst each at its time (2.1.8's server times them no more than its own)
    assert frames.returncode == 0, frames.stderr
    assert "(isoch) (trip-times)" in output
    sender = json.loads(frames.stdout)["end"]["streams"][0]["sender"]
    assert 30 <= sender["frames"] <= 31 and sender["frames_slipped"] == 0
    head = iperf2.TCP_HEADER_SIZE + iperf2.START_FQ.size
    assert sender["bytes"] == head + sender["frames"] * 20833  # 5 Mbit/s, 30 frames a second


@pytest.mark.parametrize("udp", [(), ("-u", "-b", "10M")], ids=["tcp", "udp"])
def test_our_compatibility_mode_sends_no_header_as_iperf_2_0_does(udp):
    """--iperf2 -C: TCP bytes alone, UDP datagrams with the number and time and iperf2's
    digits; 2.1.8's server counts them as from its own -C client."""
    done, output = _at_iperf2_server(udp[:1], "-C", "-t", "1", "-J", *udp)
    assert done.returncode == 0, done.stderr
    end = json.loads(done.stdout)["end"]
    (theirs,) = _csv_bytes(output)
    if udp:  # its report: all of it, none lost
        assert end["sum_sent"]["bytes"] == end["sum_received"]["bytes"] == theirs
        assert end["sum_received"]["lost_packets"] == 0
    else:  # it reads 4 bytes as a header's flags and leaves them out (its own -C's too)
        assert end["sum_sent"]["bytes"] == theirs + 4


def test_our_no_udp_fin_ends_with_one_last_datagram_and_no_report():
    done, output = _at_iperf2_server(("-u",), "-u", "-b", "10M", "-t", "1", "--no-udp-fin",
                                     "-J")
    assert done.returncode == 0, done.stderr
    end = json.loads(done.stdout)["end"]
    (row,) = [r.split(",") for r in output.splitlines() if r.count(",") >= 12]
    # its row: every datagram of ours (the last included), none lost; no report to us
    assert (end["sum_sent"]["bytes"], end["sum_sent"]["packets"]) == (int(row[7]),
                                                                      int(row[11]))
    assert int(row[10]) == 0 and end["sum_received"]["bytes"] == 0


def test_our_isochronous_frames_are_counted_and_timed_by_an_iperf2_server():
    done, output = _at_iperf2_server(("-u", "-e", "--histograms"), "-u", "--isochronous",
                                     "30:5m,1m", "-l", "1000", "-t", "2", "-J", csv=False)
    assert done.returncode == 0, done.stderr
    assert "(isoch) (trip-times)" in output, output
    sent = json.loads(done.stdout)["end"]["sum_sent"]
    # its row: datagrams lost/total, then frames received/lost and their latency (ms)
    row = re.search(r" 0/(\d+) \(0%\) .* pps +(\d+)/0 +(-?[\d.]+)/(-?[\d.]+)/", output)
    assert row is not None, output
    total, frames, mean, low = int(row[1]), int(row[2]), float(row[3]), float(row[4])
    assert total == sent["packets"]  # every datagram of ours, numbered as 2.1.8 numbers
    ours = json.loads(done.stdout)["end"]["streams"][0]["sender"]["frames"]
    assert 60 <= ours <= 61  # 30 a second for 2 s (a 61st when due just before the end)
    assert frames > ours  # its counter starts at the first frame's number (2.1.8's own: 61)
    # its frame latency histogram: one sample per frame of ours, none before it was due
    histogram = re.search(r"F8\(f\)-PDF: bin\(w=100us\):cnt\((\d+)\).*obl/obu=(\d+)/",
                          output)
    assert histogram is not None, output
    assert (int(histogram[1]), int(histogram[2])) == (ours, 0)
    assert 0 <= low <= mean < 50  # from each frame's due time: none before it


def test_our_reverse_udp_receives_what_the_iperf2_server_sent():
    done, output = _at_iperf2_server(("-u",), "-u", "-R", "-b", "10M", "-t", "2", "-J")
    assert done.returncode == 0, done.stderr
    received = json.loads(done.stdout)["end"]["sum_received"]
    (row,) = [r.split(",") for r in output.splitlines() if r.count(",") >= 12]
    assert received["bytes"] == int(row[7])  # all it sent (its row: the sender's count)
    assert received["lost_packets"] == 0 and received["packets"] > 1500
    assert 9.5e6 < received["bits_per_second"] < 10.5e6


def test_our_csv_rows_read_as_iperf2s_own():
    """-y C: the rows a script parses from iperf2's client, the bytes the server's own."""
    tcp_server, tcp_port = _iperf_server()
    udp_server, udp_port = _iperf_server("-u")
    try:
        tcp = run_simpleperf("-c", "127.0.0.1", "-p", str(tcp_port), "--iperf2", "-t", "1",
                             "-P", "2", "-y", "C")
        udp = run_simpleperf("-c", "127.0.0.1", "-p", str(udp_port), "--iperf2", "-u", "-b",
                             "10M", "-t", "1", "-i", "0.5", "-y", "C")
        time.sleep(0.5)
    finally:
        tcp_theirs, udp_theirs = end_iperf_server(tcp_server), end_iperf_server(udp_server)
    assert tcp.returncode == 0 and udp.returncode == 0, tcp.stderr + udp.stderr
    rows = [line.split(",") for line in tcp.stdout.splitlines()]
    assert [len(r) for r in rows] == [9, 9, 9] and [r[5] for r in rows] == ["1", "2", "-1"]
    assert sorted(_csv_bytes(tcp.stdout, 2)) == sorted(_csv_bytes(tcp_theirs, 2))
    assert int(rows[2][7]) == sum(_csv_bytes(tcp_theirs, 2))
    rows = [line.split(",") for line in udp.stdout.splitlines()]
    assert [len(r) for r in rows] == [14, 14, 14]  # two half-second rows, then the test's
    assert [r[6] for r in rows] == ["0.0-0.5", "0.5-1.0", "0.0-1.0"]
    (theirs,) = [r.split(",") for r in udp_theirs.splitlines() if r.count(",") >= 12]
    assert rows[2][7] == theirs[7]  # bytes received, lost and total: the server's report
    assert rows[2][10:12] == theirs[10:12] and int(theirs[11]) > 800


def test_our_tradeoff_at_an_iperf2_server_is_two_tests_counted_as_it_counts_them():
    done, output = _at_iperf2_server((), "-r", "-t", "1", "--json-stream")
    assert done.returncode == 0, done.stderr
    ends = [json.loads(line)["data"] for line in done.stdout.splitlines()
            if json.loads(line)["event"] == "end"]
    assert len(ends) == 2
    sent, received = ends[0]["sum_sent"]["bytes"], ends[1]["sum_received"]["bytes"]
    assert min(sent, received) > 0
    assert sorted(_csv_bytes(output, 2)) == sorted([sent, received])


def test_our_udp_client_reads_the_iperf2_server_report():
    process, port = _iperf_server("-u")
    try:
        done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "--iperf2", "-u", "-b",
                              "20M", "-t", "1", "-J")
        assert done.returncode == 0, done.stderr
    finally:
        output = end_iperf_server(process)
    document = json.loads(done.stdout)
    (stream,) = document["end"]["streams"]
    rows = [line.split(",") for line in output.splitlines() if line.count(",") >= 12]
    (row,) = rows
    their_bytes, their_lost, their_total = int(row[7]), int(row[10]), int(row[11])
    received = document["end"]["sum_received"]
    assert (received["bytes"], received["lost_packets"], received["packets"]) == (
        their_bytes, their_lost, their_total)
    assert document["end"]["sum_sent"]["bytes"] == their_bytes  # nothing lost on loopback
    assert stream["udp"]["packets"] == their_total


@pytest.mark.parametrize("mode", ["-d", "-r"])
def test_our_udp_dual_and_tradeoff_at_an_iperf2_server_agree_with_its_rows(mode):
    """UDP -d/-r with --iperf2: our port in the header, the server's datagrams read there
    and answered with iperf2's report; both legs' bytes equal the server's -y C rows."""
    done, output = _at_iperf2_server(("-u",), "-u", mode, "-b", "5M", "-t", "1",
                                     "-J" if mode == "-d" else "--json-stream")
    assert done.returncode == 0, done.stderr
    if mode == "-d":
        end = json.loads(done.stdout)["end"]
        sent, back = end["sum_sent"], end["sum_received_bidir_reverse"]
    else:
        ends = [json.loads(line)["data"] for line in done.stdout.splitlines()
                if json.loads(line)["event"] == "end"]
        sent, back = ends[0]["sum_sent"], ends[1]["sum_received"]
    rows = {int(row[7]) for row in (line.split(",") for line in output.splitlines())
            if len(row) >= 9}
    assert sent["bytes"] in rows and back["bytes"] in rows, (output, sent, back)
    assert back["lost_packets"] == 0 and back["packets"] > 400  # 5M for 1 s: about 430


def test_our_client_says_what_an_iperf2_server_cannot_do():
    # what the header cannot tell a server that would have to honour it: refused before
    # anything connects (testspec's iperf2 column), as --iperf3 refuses
    done = run_simpleperf("-c", "127.0.0.1", "-p", str(free_port()), "--iperf2", "-u",
                          "-O", "1")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "iperf2 server" in done.stderr
    assert "--iperf2: -O/--omit needs a simpleperf server" in done.stderr
    nobody = run_simpleperf("-c", "127.0.0.1", "-p", str(free_port()), "--iperf2", "-u",
                            "-R", "-t", "1")
    assert nobody.returncode == 1 and nobody.stderr.strip().count("\n") == 0
    assert "nothing listens on that UDP port" in nobody.stderr


def test_the_servers_interval_rows_for_iperf2_clients():
    """`simpleperf -s -i 0.5`: an iperf2 test's rows as each half second closes (TCP and
    UDP); -J's intervals on the same step, adding up to the test's bytes."""
    server, port = start_server("-i", "0.5")
    try:
        done = _iperf("-c", "127.0.0.1", "-p", str(port), "-t", "1.2", "-y", "C")
        assert done.returncode == 0, done.stderr
        (theirs,) = _csv_bytes(done.stdout)
        udp = _iperf("-c", "127.0.0.1", "-p", str(port), "-u", "-b", "5M", "-t", "1.2")
        assert udp.returncode == 0, udp.stderr
        server.wait_for(lambda lines: sum("(iperf2 2.1.8)" in line for line in lines) == 2)
        text = "\n".join(server.lines)
    finally:
        server.close()
    tcp_part, udp_part = text.split("Test from")[0], text.split("TCP, forward")[1]
    rows = re.findall(r"^\S+\s+(\d+\.\d) - (\d+\.\d)\s+.* receiver$", tcp_part, re.M)
    assert [start for start, _ in rows][:2] == ["0.0", "0.5"] and len(rows) >= 3
    assert re.search(r"0\.0 - 0\.5 .* 0/\d+ \(0%\)\s+receiver", udp_part)
    json_port = free_port()
    live = LiveProcess("-s", "-p", str(json_port), "-J", "-i", "0.5")
    _await_listening(json_port)
    try:
        assert _iperf("-c", "127.0.0.1", "-p", str(json_port), "-t", "1.2").returncode == 0
        (document,) = _wait_documents(live, 1)
    finally:
        live.close()
    steps = [round(i["sum"]["end"] - i["sum"]["start"], 1) for i in document["intervals"]]
    assert steps[:2] == [0.5, 0.5]
    assert sum(i["sum"]["bytes"] for i in document["intervals"]) == \
        document["end"]["sum_received"]["bytes"]
    assert theirs > 0


def test_isochronous_clients_frames_are_judged_whole_or_lost(json_server):
    """iperf2's --isochronous over UDP: each datagram says its frame (number, size, what is
    left of it); the server counts frames whole and lost and their latency, and the frame
    the client stops inside when the test ends is neither. Over TCP the bursts are bytes:
    served, every byte counted."""
    live, port = json_server
    done = _iperf("-c", "127.0.0.1", "-p", str(port), "-u", "--isochronous=30:2m,200k",
                  "-t", "2", "-e")
    assert done.returncode == 0, done.stderr
    assert "did not receive ack" not in done.stdout + done.stderr
    (document,) = _wait_documents(live, 1)
    (stream,) = document["end"]["streams"]
    receiver = stream["receiver"]
    assert 59 <= receiver["frames"] <= 61 and receiver["frames_lost"] == 0
    assert receiver["frame_latency"]["count"] == receiver["frames"]
    sent = int(re.search(r"Sent (\d+) datagrams", done.stdout)[1])
    assert document["end"]["sum_received"]["packets"] == sent - 1  # as for plain UDP
    tcp = _iperf("-c", "127.0.0.1", "-p", str(port), "--isochronous=30:2m,200k", "-t", "1",
                 "-y", "C")
    assert tcp.returncode == 0, tcp.stderr
    (theirs,) = _csv_bytes(tcp.stdout)
    assert _wait_documents(live, 2)[1]["end"]["sum_received"]["bytes"] == theirs > 0


@pytest.mark.parametrize("mode", ["-d", "-r"])
def test_udp_dual_and_tradeoff_send_back_to_the_clients_port(json_server, mode):
    """UDP -d (both at once) and -r (ours after the client's): we send to its -L port in
    iperf2's layout at its -b, and ask for its report; both legs lose nothing and the
    counts agree at both ends (the ending datagram counts at the receiver, as iperf2's)."""
    live, port = json_server
    done = _iperf("-c", "127.0.0.1", "-p", str(port), "-u", mode, "-L", str(free_port()),
                  "-t", "1", "-b", "5M")
    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stdout + done.stderr
    sent = int(re.search(r"Sent (\d+) datagrams", done.stdout)[1])
    legs = re.findall(r"\[  2\] 0\.0+-[\d.]+ sec .* ms +(\d+)/(\d+) ", done.stdout)
    assert legs, done.stdout
    lost, received = (int(x) for x in legs[-1])
    documents = _wait_documents(live, 1 if mode == "-d" else 2)
    ends = [d["end"] for d in documents]
    assert ends[0]["sum_received"]["packets"] == sent - 1
    ours = ends[0]["sum_sent_bidir_reverse"] if mode == "-d" else ends[1]["sum_sent"]
    assert lost == 0 and received == ours["packets"] + 1 > 400  # 5M for 1 s: about 445


def test_periodic_bursts_are_served_as_a_stream(json_server):
    """--burst-period/--burst-size over TCP: bursts every half second, every byte counted."""
    live, port = json_server
    done = _iperf("-c", "127.0.0.1", "-p", str(port), "--burst-period", "0.5",
                  "--burst-size", "256K", "-t", "1", "-y", "C")
    assert done.returncode == 0, done.stderr
    (theirs,) = _csv_bytes(done.stdout)
    (document,) = _wait_documents(live, 1)
    assert document["end"]["sum_received"]["bytes"] == theirs >= 2 * 256 * 1024


def test_a_keyed_server_takes_tests_for_its_permit_key_timeout_then_ends():
    """--permit-key-timeout (iperf2's, 20 s by default): new tests only that long; a test
    begun within it runs to its end, then the server ends (status 0), as 2.1.8's does."""
    port = free_port()
    server = LiveProcess("-s", "-p", str(port), "--permit-key", "sesame1",
                         "--permit-key-timeout", "1.5")
    try:
        server.wait_for(lambda lines: any("new tests for 1.5 s" in line for line in lines))
        done = _iperf("-c", "127.0.0.1", "-p", str(port), "--permit-key=sesame1", "-t",
                      "2.5", "-y", "C")
        assert done.returncode == 0, done.stderr
        (theirs,) = _csv_bytes(done.stdout)
        server.process.wait(timeout=10)
        assert server.process.returncode == 0
        text = "\n".join(server.lines)
        assert "No new tests: the permit key's 1.5 s are over" in text
        assert re.search(r"Test from .* \(iperf2 2\.1\.8\)", text)
    finally:
        server.close()
    assert theirs > 0
    late = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "0.5")
    assert late.returncode == 1 and "connection refused" in late.stderr


def test_tcp_trip_times_each_write_is_timed_both_ways(json_server):
    """TCP --trip-times: what iperf2's client writes is read burst by burst, one
    write-to-read delay for each of its writes; with -R we write bursts as 2.1.8's server
    does, and its client prints their latency (no "Program error")."""
    live, port = json_server
    done = _iperf("-c", "127.0.0.1", "-p", str(port), "--trip-times", "-t", "1", "-l",
                  "16K", "-e")
    assert done.returncode == 0, done.stderr
    writes = int(re.search(r"sec .*?bits/sec\s+(\d+)/0", done.stdout)[1])
    (document,) = _wait_documents(live, 1)
    receiver = document["end"]["streams"][0]["receiver"]
    delays = receiver["write_to_read_delay"]
    # the client counts writes over its -t; a burst still in its socket then arrives too
    assert writes <= delays["count"] <= writes + 64 and delays["count"] * 16384 == \
        document["end"]["sum_received"]["bytes"] - 80
    assert 0 < delays["min_ms"] <= delays["mean_ms"] < 1000
    back = _iperf("-c", "127.0.0.1", "-p", str(port), "--trip-times", "-t", "1", "-R", "-e")
    assert back.returncode == 0, back.stderr
    assert "Program error" not in back.stdout + back.stderr
    latency = re.search(r"sec .*?bits/sec\s+([\d.]+)/([\d.]+)/([\d.]+)/[\d.]+ ms \((\d+)/",
                        back.stdout)
    assert latency is not None, back.stdout
    assert 0 < float(latency[2]) <= float(latency[1]) <= float(latency[3]) < 1000
    assert int(latency[4]) > 100
