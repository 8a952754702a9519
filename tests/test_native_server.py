"""The server's native side: one port for every protocol, falling back against classic
servers, operator limits, authentication, and peers that misbehave or vanish."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import threading
import time

import pytest
from helpers import (
    IPERF3_321,
    SIMPLEPERF,
    LiveProcess,
    free_port,
    proc_status,
    run_simpleperf,
    start_server,
)

from simpleperf.description.testspec import TestSpec
from simpleperf.description.transports import UDP
from simpleperf.engine import udp_stream
from simpleperf.engine.records import Snapshot, Stream
from simpleperf.engine.streams import run_stream
from simpleperf.protocol import native
from simpleperf.report import native as report_native
from simpleperf.transport import tcp, udp

pytestmark = pytest.mark.loopback  # real simpleperf processes on 127.0.0.1


class ThreadedClassicServer:
    """A classic server written from the spec: counts payload until a read that ends in
    BYE, answers ACK: BYE; any number of connections at once."""

    def __init__(self) -> None:
        self.port = free_port()
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.counts: list[int] = []
        self.greetings_answered = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            received = b""
            total = 0
            while True:
                data = conn.recv(1000)
                if not data:
                    return  # closed without BYE: not counted
                total += len(data)
                received = (received + data)[-3:]
                if received == b"BYE":
                    self.counts.append(total - 3)
                    conn.sendall(b"ACK: BYE")
                    return

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def classic_server():
    server = ThreadedClassicServer()
    yield server
    server.close()


def test_native_client_falls_back_on_a_classic_server(classic_server):
    done = run_simpleperf("-c", "-p", str(classic_server.port), "--native", "-P", "2",
                          "-n", "1MB", "-f", "B", timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert sorted(classic_server.counts) == [1_000_000, 1_000_000]
    rows = [line for line in done.stdout.splitlines() if line.endswith(" Mbps")]
    assert [line.split()[4] for line in rows] == ["1000000", "1000000"]


@pytest.mark.parametrize("flags,named", [(["-R"], "-R"), (["--tcp-quickack"], "--tcp-quickack"),
                                         (["--fq-rate", "50M"], "--fq-rate"),
                                         (["--print_mss"], "-m/--print_mss"),
                                         (["--sum-only"], "--sum-only")])
def test_features_a_classic_server_lacks_fail_clearly(classic_server, flags, named):
    """A test a classic server cannot run is refused in one line naming what it lacks, the
    flags the test description's fields declare too (never dropped)."""
    done = run_simpleperf("-c", "-p", str(classic_server.port), *flags, "-t", "1",
                          timeout=30)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "speaks only classic simpleperf" in lines[0]
    assert f"cannot do {named}:" in lines[0], lines


@pytest.mark.parametrize("limit,args,message", [
    (["--max-parallel", "2"], ["-P", "3", "--native", "-t", "1"], "at most 2 (--max-parallel)"),
    (["--max-duration", "2"], ["-t", "5", "--native"], "at most 2 s (--max-duration)"),
    (["--server-bitrate-limit", "100M"], ["-u", "-b", "60M", "-P", "2", "-t", "1"],
     "120 Mbits/sec in all asked, this server allows at most 100 Mbits/sec"),
])
def test_limits_refuse_with_a_clear_message(limit, args, message):
    live, port = start_server(*limit)
    try:
        done = run_simpleperf("-c", "-p", str(port), *args, timeout=30)
        assert done.returncode == 1
        assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1
        live.wait_for(lambda lines: any(line.startswith("Refused") for line in lines))
        # within every limit above (a rate limit ends an unpaced test that overruns)
        ok = run_simpleperf("-c", "-p", str(port), "--native", "-t", "1", "-b", "50M",
                            timeout=30)
        assert ok.returncode == 0, ok.stderr
    finally:
        live.close()


def test_a_test_faster_than_the_servers_rate_limit_is_ended_within_a_window():
    """--server-bitrate-limit 100M/2: unlimited TCP runs at gigabits, so the server ends it
    once a second has passed (the average over what has passed); iperf3 3.21's client is
    told in its own words. A test within the limit runs to its end."""
    live, port = start_server("--server-bitrate-limit", "100M/2")
    try:
        started = time.monotonic()
        done = run_simpleperf("-c", "-p", str(port), "--native", "-t", "10", timeout=30)
        assert done.returncode == 1 and time.monotonic() - started < 5
        assert re.fullmatch(r"simpleperf: error: the server ended the test: the test ran at "
                            r"[\d.]+ [MG]bits/sec over 1\.\d s, more than this server's limit "
                            r"of 100 Mbits/sec \(--server-bitrate-limit\)\n", done.stderr)
        by_iperf3 = subprocess.run([IPERF3_321, "-c", "127.0.0.1", "-p", str(port), "-t", "10"],
                                   capture_output=True, text=True, timeout=30)
        assert "total required bandwidth is larger than server limit" in (
            by_iperf3.stdout + by_iperf3.stderr)
        within = run_simpleperf("-c", "-p", str(port), "-u", "-b", "20M", "-t", "3",
                                timeout=30)
        assert within.returncode == 0, within.stderr
    finally:
        live.close()


@pytest.mark.parametrize("client", ["simpleperf", "iperf3 3.21"])
def test_idle_timeout_frees_the_place_of_a_client_that_stopped(client):
    """--max-clients 1 --idle-timeout 2: a client stopped (SIGSTOP) mid-test holds the only
    place until its data has stood still 2 s, then the server ends that test and the next
    client is served, long before the stopped test's own end (30 s)."""
    live, port = start_server("--max-clients", "1", "--idle-timeout", "2")
    command = (SIMPLEPERF + ["-c", "127.0.0.1", "-p", str(port), "--native"]
               if client == "simpleperf" else [IPERF3_321, "-c", "127.0.0.1", "-p", str(port)])
    stopped = None
    try:
        stopped = subprocess.Popen(command + ["-t", "30"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        time.sleep(1.5)
        stopped.send_signal(signal.SIGSTOP)
        began = time.monotonic()
        live.wait_for(lambda lines: any("--idle-timeout" in line for line in lines), 15)
        assert time.monotonic() - began < 8
        assert re.search(r"nothing moved for [\d.]+ s, this server's limit is 2 s "
                         r"\(--idle-timeout\)", "\n".join(live.lines))
        served = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", "--native")
        assert served.returncode == 0, served.stderr
    finally:
        if stopped is not None:
            stopped.kill()
            stopped.wait(10)
        live.close()


@pytest.mark.parametrize(("limit", "trickle"), [(("--idle-timeout", "2"), False),
                                               (("--rcv-timeout", "2000"), True)],
                         ids=["silent, --idle-timeout", "trickling, --rcv-timeout"])
def test_a_header_less_iperf2_stream_holds_the_only_place_only_while_it_moves(limit,
                                                                           trickle):
    """10 bytes of iperf2's digits (a stream with no header, so no stated end), then
    silence or a byte every half second: it held --max-clients 1 for 108 s, whatever
    --idle-timeout said. Now silence ends at --idle-timeout, and a test with no stated end
    that moves less than 1 KB in a --rcv-timeout ends then."""
    live, port = start_server("--max-clients", "1", *limit)
    holder = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        holder.sendall(b"0123456789")
        began = time.monotonic()
        live.wait_for(lambda lines: any("connected with" in line or "iperf2" in line
                                        for line in lines) or time.monotonic() - began > 0.5)
        busy = run_simpleperf("-c", "-p", str(port), "--native", "-t", "1", timeout=30)
        assert busy.returncode == 1 and "busy" in busy.stderr
        while time.monotonic() - began < 10 and not any(
                "ended:" in line for line in live.lines):
            if trickle:
                holder.sendall(b"0")
            time.sleep(0.5)
        assert time.monotonic() - began < 6, live.lines
        said = "\n".join(live.lines)
        assert ("less than 1000 in this server's 2 s (--rcv-timeout)" if trickle else
                "this server's limit is 2 s (--idle-timeout)") in said, said
        served = run_simpleperf("-c", "-p", str(port), "--native", "-t", "1", timeout=30)
        assert served.returncode == 0, served.stderr
    finally:
        holder.close()
        live.close()


def test_classic_clients_take_places_under_max_clients_and_queue():
    """Six classic clients at once against --max-clients 2 --queue 2 all ran at once;
    now two run, two wait for their places, and two are refused (closed: the classic
    protocol has no words for it), each connection a test."""
    live, port = start_server("--max-clients", "2", "--queue", "2")
    try:
        clients = [subprocess.Popen(SIMPLEPERF + ["-c", "-I", "127.0.0.1", "-p", str(port),
                                                  "-t", "2"], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True) for _ in range(6)]
        codes = [client.wait(60) for client in clients]
        errors = [client.stderr.read() for client in clients if client.stderr]
        assert sorted(codes) == [0, 0, 0, 0, 1, 1], errors
        assert sum("it is busy, see its --max-clients" in e for e in errors) == 2
        live.wait_for(lambda lines: sum("Received" in line for line in lines) == 4)
        assert any("a classic client: the server is busy" in line and "--max-clients" in line
                   for line in live.lines)
    finally:
        live.close()


def test_max_clients_refuses_the_extra_test_while_one_runs():
    live, port = start_server("--max-clients", "1")
    first = LiveProcess("-c", "-p", str(port), "--native", "-t", "4")
    try:
        first.wait_for(lambda lines: any("connected with" in line for line in lines))
        time.sleep(0.5)
        second = run_simpleperf("-c", "-p", str(port), "--native", "-t", "1", timeout=30)
        assert second.returncode == 1 and "busy" in second.stderr
        assert first.process.wait(30) == 0
    finally:
        first.close()
        live.close()


@pytest.mark.slow
def test_shared_secret_authentication(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("correct horse battery staple\n")
    wrong = tmp_path / "wrong"
    wrong.write_text("nope\n")
    live, port = start_server("--auth-secret-file", str(secret))
    try:
        ok = run_simpleperf("-c", "-p", str(port), "--native", "-t", "1", "--auth-secret-file",
                            str(secret), timeout=30)
        assert ok.returncode == 0, ok.stderr
        bad = run_simpleperf("-c", "-p", str(port), "--native", "-t", "1",
                             "--auth-secret-file", str(wrong), timeout=30)
        assert bad.returncode == 1 and "authentication failed" in bad.stderr
        missing = run_simpleperf("-c", "-p", str(port), "--native", "-t", "1", timeout=30)
        assert missing.returncode == 1 and "requires authentication" in missing.stderr
        live.wait_for(lambda lines: any("authentication failed" in line for line in lines))
        assert not any("correct horse" in line for line in live.lines)
        # The echo service answers only probes made with the secret, over TCP and UDP.
        for transport in ([], ["-u"]):
            probes = run_simpleperf("-c", "-p", str(port), "--rtt", "--count", "3",
                                    "--rtt-interval", "0.05", *transport,
                                    "--auth-secret-file", str(secret), timeout=30)
            assert probes.returncode == 0 and "3 answered" in probes.stdout, probes
        stranger = run_simpleperf("-c", "-p", str(port), "--rtt", "--count", "2", "-u",
                                  "--rtt-interval", "0.05", timeout=30)
        assert "0 answered" in stranger.stdout and "shared secret" in stranger.stdout
        stranger = run_simpleperf("-c", "-p", str(port), "--rtt", "--count", "1", timeout=30)
        assert stranger.returncode == 1 and "shared secret" in stranger.stderr
        forged = native.echo_probe(1, 2, b"a guess")
        untagged = native.echo_probe(1, 2, None)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(0.5)
            for probe in (forged, untagged):
                sock.sendto(native.preface(native.UDP_ECHO) + probe, ("127.0.0.1", port))
                with pytest.raises(TimeoutError):
                    sock.recv(100)
    finally:
        live.close()


def test_without_a_secret_probes_with_or_without_a_tag_are_echoed(server, tmp_path):
    _, port = server
    secret = tmp_path / "secret"
    secret.write_text("only the client has one\n")
    for options in ([], ["-u"], ["--auth-secret-file", str(secret)],
                    ["-u", "--auth-secret-file", str(secret)]):
        probes = run_simpleperf("-c", "-p", str(port), "--rtt", "--count", "2",
                                "--rtt-interval", "0.05", *options, timeout=30)
        assert probes.returncode == 0 and "2 answered" in probes.stdout, (options, probes)


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=20)
    return sock


def _read_until_closed(sock: socket.socket, limit: float = 20) -> bytes:
    sock.settimeout(limit)
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            return data
        if not chunk:
            return data
        data += chunk


def _messages(data: bytes) -> list[dict]:
    return native.MessageReader().feed(data)


@pytest.mark.slow
def test_a_silent_control_connection_is_timed_out(server):
    live, port = server
    with _connect(port) as sock:
        sock.sendall(native.preface(native.CONTROL))
        began = time.monotonic()
        reply = _read_until_closed(sock, 30)
    assert time.monotonic() - began < 15
    assert _messages(reply)[-1]["type"] == "error"


def test_a_data_connection_with_an_unknown_token_is_closed(server):
    _, port = server
    with _connect(port) as sock:
        sock.sendall(native.data_preface(b"x" * 16, 1))
        assert _read_until_closed(sock, 10) == b""


def test_wrong_order_and_malformed_messages_get_a_protocol_error(server):
    _, port = server
    for payload in (native.encode({"type": "test", "protocol": "tcp"}),  # before hello
                    b"\x00\x00\x00\x05{not}",
                    b"\xff\xff\xff\xff"):
        with _connect(port) as sock:
            sock.sendall(native.preface(native.CONTROL) + payload)
            reply = _messages(_read_until_closed(sock, 10))
        assert reply and reply[-1]["type"] == "error"
        assert "protocol error" in reply[-1]["message"]
    with _connect(port) as sock:
        sock.sendall(native.preface(native.CONTROL) + native.encode({"type": "hello"}))
        sock.sendall(native.encode({"type": "test", "protocol": "tcp", "parallel": "many",
                                    "duration": 1}))
        reply = _messages(_read_until_closed(sock, 10))
    assert reply[0]["type"] == "welcome" and reply[-1]["type"] == "error"
    assert "parallel" in reply[-1]["message"]


def test_a_client_that_vanishes_mid_test_frees_everything():
    live, port = start_server()
    try:
        baseline = proc_status(live.process.pid)
        for ended, args in enumerate((["-t", "10"], ["-t", "10", "-u", "-b", "50M"],
                                      ["-t", "10", "-R"]), start=1):
            client = LiveProcess("-c", "-p", str(port), "--native", "-i", "1", *args)
            client.wait_for(lambda lines: sum("bits/sec" in line for line in lines) >= 1)
            client.process.kill()
            client.close()
            live.wait_for(lambda lines, n=ended: sum(line.startswith("Test from") for line in
                                                     lines) >= n)
        deadline = time.monotonic() + 20
        while proc_status(live.process.pid) != baseline and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc_status(live.process.pid) == baseline
        # within every limit above (a rate limit ends an unpaced test that overruns)
        ok = run_simpleperf("-c", "-p", str(port), "--native", "-t", "1", "-b", "50M",
                            timeout=30)
        assert ok.returncode == 0, ok.stderr
    finally:
        live.close()


def test_the_server_vanishing_mid_test_is_one_line_and_exit_1():
    live, port = start_server()
    client = LiveProcess("-c", "-p", str(port), "--native", "-t", "20", "-i", "1")
    try:
        client.wait_for(lambda lines: sum("bits/sec" in line for line in lines) >= 1)
        live.process.kill()
        assert client.process.wait(30) == 1
        errors = client.stderr().strip().splitlines()
        assert len(errors) == 1 and errors[0].startswith("simpleperf: error:")
    finally:
        client.close()
        live.close()


def test_ctrl_c_on_a_native_client_prints_what_was_measured(server):
    _, port = server
    client = LiveProcess("-c", "-p", str(port), "-R", "-t", "20", "-i", "1")
    try:
        client.wait_for(lambda lines: sum("bits/sec" in line for line in lines) >= 2)
        assert client.interrupt() == 130
        assert any(line.rstrip().endswith("receiver") for line in client.lines)
    finally:
        client.close()


def test_one_port_serves_classic_and_native_clients_at_once(server):
    _, port = server
    results: dict[str, object] = {}

    def classic() -> None:
        results["classic"] = run_simpleperf("-c", "-p", str(port), "-t", "2", timeout=30)

    thread = threading.Thread(target=classic)
    thread.start()
    native_run = run_simpleperf("-c", "-p", str(port), "-J", "-t", "2", "-u", "-b", "5M",
                                timeout=30)
    thread.join(40)
    assert native_run.returncode == 0 and json.loads(native_run.stdout)["end"]["sum"]
    classic_run = results["classic"]
    assert classic_run.returncode == 0 and classic_run.stdout.rstrip().endswith("Mbps")


@pytest.mark.iperf3
def test_connections_beyond_the_limits_are_refused_in_each_protocols_words():
    live, port = start_server("--max-connections-per-host", "3")
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    try:
        time.sleep(0.3)
        native_client = run_simpleperf("-c", "-p", str(port), "--native", "-t", "1", timeout=30)
        assert native_client.returncode == 1
        lines = native_client.stderr.strip().splitlines()
        assert len(lines) == 1 and "--max-connections-per-host" in lines[0]
        iperf3_client = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", "1"],
                                       capture_output=True, text=True, timeout=30)
        assert iperf3_client.returncode != 0 and "busy" in iperf3_client.stderr
        live.wait_for(lambda lines: any("Refused a connection" in line for line in lines))
    finally:
        for sock in idle:
            sock.close()
    time.sleep(0.5)
    served = run_simpleperf("-c", "-p", str(port), "--native", "-t", "1", timeout=30)
    assert served.returncode == 0, served.stderr
    live.close()


def test_many_idle_connections_cost_at_most_the_limit_in_threads():
    live, port = start_server("--max-connections", "20")
    base = proc_status(live.process.pid)
    idle = []
    try:
        for _ in range(200):
            idle.append(socket.create_connection(("127.0.0.1", port)))
        time.sleep(1.0)
        held = proc_status(live.process.pid)
        assert held["threads"] <= base["threads"] + 20 + 1  # the workers, and the refuser
        assert held["fds"] <= base["fds"] + 20 + 64  # workers' sockets, refusals pending
    finally:
        for sock in idle:
            sock.close()
    time.sleep(1.5)
    assert proc_status(live.process.pid)["fds"] <= base["fds"]
    live.close()


def test_a_trickling_classic_connection_is_ended():
    live, port = start_server("--rcv-timeout", "1500", "-f", "B")
    with socket.create_connection(("127.0.0.1", port)) as trickle:
        ended = None
        began = time.monotonic()
        while time.monotonic() - began < 10:
            try:
                trickle.sendall(b"\0")
            except OSError:
                ended = time.monotonic() - began
                break
            time.sleep(0.25)
        live.wait_for(lambda lines: any("less than 1024 bytes in 1.5 s" in line
                                        for line in lines))
    assert ended is None or ended < 6
    live.close()


def test_with_a_secret_udp_data_without_the_tests_key_is_not_counted():
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    sender.bind(("127.0.0.1", 0))
    receiver.connect(sender.getsockname())
    sender.connect(receiver.getsockname())
    tcp.set_wake_up(receiver)
    udp.enable_receive_offload(receiver)  # coalesced reads, as in a real test
    key = native.udp_data_key(b"secret", "challenge")
    stream = Stream(1, False, "udp", receiver, "receiver", key=key)
    spec = TestSpec(protocol="udp", length=100)
    stop = threading.Event()
    thread = threading.Thread(target=run_stream, args=(stream, spec, time.monotonic(), stop))
    thread.start()
    try:
        def datagram(number: int, with_key: bytes) -> bytes:
            return native.AUTH_DATAGRAM_HEADER.pack(1, 0, number, with_key) + bytes(76)

        for number in range(1, 11):
            sender.send(datagram(number, key))
        sender.send(datagram(2**40, b"guessed!"))  # a forged, far-off datagram
        sender.send(datagram(11, b"guessed!"))
        for number in range(11, 21):
            sender.send(datagram(number, key))
        # One send the kernel segments: a coalesced run with a forged datagram inside.
        assert udp.enable_segmentation(sender, 100) > 1
        sender.send(b"".join(datagram(n, key if n != 25 else b"guessed!")
                             for n in range(21, 31)))
        time.sleep(0.5)
    finally:
        stop.set()
        thread.join(5)
        receiver.close()
        sender.close()
    account = stream.account
    assert (account.packets, account.settled_lost, account.bad) == (30, 1, 3)
    assert stream.num_bytes == 29 * 100
    entry: dict = {}
    udp_stream.fill_result(stream, entry, udp_stream.snapshot(stream), Snapshot(0))
    assert (entry["lost"], entry["forged"], entry["dropped"]) == (1, 3, 0)
    row = report_native.row("[1]", 0, 1, entry | {"bytes": stream.num_bytes}, "M", UDP,
                            False)  # reported beside the loss, which was not this host's
    assert "1/30 (3.3%: 1 in the network, 0 by the receiving host), 3 forged (not counted)" \
        in row


def test_a_udp_test_with_a_shared_secret_carries_the_key_and_loses_nothing(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("a shared secret")
    live, port = start_server("--auth-secret-file", str(secret))
    try:
        done = run_simpleperf("-c", "-p", str(port), "-u", "-b", "20M", "-t", "1", "-J",
                              "--no-latency", "--auth-secret-file", str(secret), timeout=30)
        assert done.returncode == 0, done.stderr
        total = json.loads(done.stdout)["end"]["sum"]
        assert total["packets"] > 1000 and total["lost_packets"] == 0
        short = run_simpleperf("-c", "-p", str(port), "-u", "-l", "20", "-t", "1",
                               "--auth-secret-file", str(secret), timeout=30)
        assert short.returncode == 2 and "at least 24 bytes" in short.stderr
    finally:
        live.close()


def test_a_trickling_echo_connection_is_ended():
    live, port = start_server("--rcv-timeout", "1500")
    try:
        with socket.create_connection(("127.0.0.1", port)) as trickle:
            trickle.sendall(native.preface(native.ECHO))
            trickle.settimeout(0.2)
            began = time.monotonic()
            closed = None
            while time.monotonic() - began < 10 and closed is None:
                time.sleep(0.25)  # 4 bytes a second: never a whole probe in 1.5 s
                try:
                    trickle.sendall(b"\0")
                    if trickle.recv(64) == b"":
                        closed = time.monotonic() - began
                except TimeoutError:
                    continue
                except OSError:
                    closed = time.monotonic() - began
        assert closed is not None and closed < 6
    finally:
        live.close()


def test_a_secret_refuses_classic_clients_unless_the_operator_allows_them(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("correct horse battery staple\n")
    live, port = start_server("--auth-secret-file", str(secret))
    try:
        live.wait_for(lambda lines: any("classic clients, which cannot, are refused" in line
                                        for line in lines))
        classic = run_simpleperf("-c", "-p", str(port), "-t", "0.5", timeout=30)
        assert classic.returncode == 1 and "shared secret" in classic.stderr, classic
        live.wait_for(lambda lines: any("a classic client, and this server has a shared "
                                        "secret" in line for line in lines))
        assert not any("Received" in line or "Traceback" in line for line in live.lines)
    finally:
        live.close()
    live, port = start_server("--auth-secret-file", str(secret), "--allow-classic")
    try:
        live.wait_for(lambda lines: any("are served anyway" in line for line in lines))
        classic = run_simpleperf("-c", "-p", str(port), "-t", "0.5", timeout=30)
        assert classic.returncode == 0, classic
    finally:
        live.close()


def test_a_proof_that_is_not_hex_is_a_refusal_not_a_traceback(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("correct horse battery staple\n")
    live, port = start_server("--auth-secret-file", str(secret))
    try:
        for proof in ("é", "\ud800", 7, None):
            with _connect(port) as sock:
                sock.sendall(native.preface(native.CONTROL) + native.encode({"type": "hello"}))
                sock.sendall(native.encode({"type": "auth", "proof": proof}))
                reply = _messages(_read_until_closed(sock, 10))
            assert reply[0]["type"] == "welcome" and reply[-1]["type"] == "error", proof
            assert "authentication failed" in reply[-1]["message"], proof
        ok = run_simpleperf("-c", "-p", str(port), "--native", "-t", "0.5",
                            "--auth-secret-file", str(secret), timeout=30)
        assert ok.returncode == 0, ok.stderr
        assert not any("Traceback" in line or "Error:" in line for line in live.lines)
    finally:
        live.close()
