"""iperf3 on the wire, both ways, with Debian's real iperf3: its clients against our
server (every option of the issue), and our client against its server."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import threading
import time

import pytest
from helpers import IPERF3_321, free_port, run_simpleperf, start_server

from simpleperf.protocol import iperf3

pytestmark = [pytest.mark.iperf3, pytest.mark.loopback]


def iperf3_client(port: int, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), *args],
                          capture_output=True, text=True, timeout=timeout)


def iperf3_json(port: int, *args: str) -> dict:
    done = iperf3_client(port, "-J", *args)
    assert done.returncode == 0, done.stdout[-800:] + done.stderr
    return json.loads(done.stdout)


def max_receive_buffer() -> int:
    with open("/proc/sys/net/ipv4/tcp_rmem") as rmem:
        return int(rmem.read().split()[2])


def agree(a: float, b: float, within: float = 0.01) -> bool:
    return a > 0 and abs(a - b) <= within * max(a, b)


@pytest.fixture(scope="module")
def our_server():
    live, port = start_server()
    yield live, port
    live.close()


@pytest.mark.parametrize("args", [
    ["-t", "2"], ["-t", "2", "-P", "4"], ["-t", "2", "-R"], ["-t", "2", "--bidir"],
    ["-n", "200M"], ["-t", "3", "-O", "1"], ["-t", "2", "-w", "256K"],
    ["-t", "2", "-l", "32K"], ["-t", "2", "-R", "-P", "2"],
])
def test_iperf3_tcp_clients_get_correct_results(our_server, args):
    _, port = our_server
    end = iperf3_json(port, *args)["end"]
    if "-R" in args:
        # We send; iperf3 3.12's client stops reading at TEST_END, and what its kernel had
        # acknowledged but it had not read is counted sent by us, not read by it: at most a
        # full receive buffer per stream (46 MB of 2.85 GB seen with -P 2, 32 MB buffers).
        sent, read = end["sum_sent"]["bytes"], end["sum_received"]["bytes"]
        streams = len(end["streams"])
        assert read > 0 and abs(sent - read) <= max(0.01 * sent,
                                                    streams * max_receive_buffer()), end
    else:
        assert agree(end["sum_sent"]["bytes"], end["sum_received"]["bytes"]), end["sum_sent"]
    if "--bidir" in args:
        # The half we send: iperf3 3.12's client is one thread doing both directions, and it
        # stops reading when it says TEST_END; what sat unread in its receive buffer is
        # missing from its count, with iperf3's own server just the same (1.2-1.4 % seen
        # here). We report what its kernel acknowledged: never off by more than that buffer.
        sent = end["sum_sent_bidir_reverse"]["bytes"]
        read = end["sum_received_bidir_reverse"]["bytes"]
        assert read > 0 and abs(sent - read) <= max(0.01 * sent, max_receive_buffer())
    if "-n" in args:
        assert end["sum_sent"]["bytes"] >= 200 * 1024 * 1024
    streams = 4 if "4" in args else 2 if ("2" in args[3:] or "--bidir" in args) else 1
    assert len(end["streams"]) == streams


@pytest.mark.parametrize("args", [["-u", "-b", "100M", "-t", "2"],
                                  ["-u", "-b", "50M", "-R", "-t", "2"],
                                  ["-u", "-b", "20M", "-l", "1000", "-t", "2", "-P", "2"]])
def test_iperf3_udp_clients_get_jitter_and_loss(our_server, args):
    _, port = our_server
    end = iperf3_json(port, *args)["end"]
    total = end["sum"]
    assert total["packets"] > 0 and total["lost_packets"] <= 0.01 * total["packets"]
    assert 0 <= total["jitter_ms"] < 50
    rate = float(args[args.index("-b") + 1].rstrip("M")) * 1e6
    streams = 2 if "-P" in args else 1
    assert 0.9 * rate * streams < total["bits_per_second"] < 1.1 * rate * streams
    if "-l" in args:
        assert end["streams"][0]["udp"]["bytes"] == end["streams"][0]["udp"]["packets"] * 1000


def test_get_server_output_carries_our_report(our_server):
    _, port = our_server
    document = iperf3_json(port, "-t", "1", "--get-server-output")
    assert "receiver" in document["server_output_text"]
    text = iperf3_client(port, "-t", "1", "--get-server-output")
    assert text.returncode == 0 and "Server output:" in text.stdout


def test_ten_iperf3_clients_at_once(our_server):
    live, port = our_server
    processes = [subprocess.Popen(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", "3",
                                   "-J"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for _ in range(10)]
    results = [process.communicate(timeout=60) for process in processes]
    assert [p.returncode for p in processes] == [0] * 10, [r[1] for r in results]
    for out, _ in results:
        end = json.loads(out)["end"]
        assert agree(end["sum_sent"]["bytes"], end["sum_received"]["bytes"])


def test_classic_native_and_iperf3_clients_share_the_port(our_server):
    _, port = our_server
    outcome: dict[str, subprocess.CompletedProcess] = {}
    runs = {"classic": lambda: run_simpleperf("-c", "-p", str(port), "-t", "2"),
            "native": lambda: run_simpleperf("-c", "-p", str(port), "-t", "2", "-u", "-J"),
            "iperf3": lambda: iperf3_client(port, "-t", "2")}
    threads = [threading.Thread(target=lambda n=name, f=run: outcome.__setitem__(n, f()))
               for name, run in runs.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert {name: done.returncode for name, done in outcome.items()} == {
        "classic": 0, "native": 0, "iperf3": 0}


def test_authentication_is_refused_with_a_message_iperf3_prints(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("s3cret")
    live, port = start_server("--auth-secret-file", str(secret))
    try:
        done = iperf3_client(port, "-t", "1")
        assert done.returncode != 0
        assert "test authorization failed" in done.stdout + done.stderr
    finally:
        live.close()


def _raw_iperf3_test(port: int, parameters: dict) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(iperf3.make_cookie())
        assert sock.recv(1) == iperf3.state(iperf3.PARAM_EXCHANGE)
        sock.sendall(iperf3.encode_json(parameters))
        sock.settimeout(10)
        reply = b""
        while len(reply) < 9:
            chunk = sock.recv(64)
            if not chunk:
                break
            reply += chunk
        return reply


@pytest.mark.parametrize("key,code", [("sctp", iperf3.IENOSCTP), ("file", iperf3.IEUNIMP)])
def test_unsupported_options_get_a_server_error(our_server, key, code):
    _, port = our_server
    reply = _raw_iperf3_test(port, {"tcp": True, "time": 1, "parallel": 1, key: "x"})
    assert reply[:1] == iperf3.state(iperf3.SERVER_ERROR)
    assert struct.unpack("!ii", reply[1:9])[0] == code


def test_a_flow_label_is_taken_as_iperf3_s_server_takes_it(our_server):
    """iperf3 3.21's -L: the label is its client's (set where it connects); its server
    takes the parameter and labels nothing of its own, and so do we (before: IEUNIMP)."""
    _, port = our_server
    for extra in ([], ["-u", "-b", "10M"]):
        done = subprocess.run([IPERF3_321, "-c", "::1", "-6", "-p", str(port), "-L", "77",
                               "-t", "1", "-J", *extra], capture_output=True, text=True,
                              timeout=30)
        assert done.returncode == 0 and "error" not in json.loads(done.stdout), done.stdout
        end = json.loads(done.stdout)["end"]
        if extra:  # UDP: every datagram came
            assert end["sum"]["packets"] > 0 and end["sum"]["lost_packets"] == 0, end["sum"]
        else:
            assert end["sum_sent"]["bytes"] > 0
            assert agree(end["sum_sent"]["bytes"], end["sum_received"]["bytes"])


# Our client against iperf3's own server ------------------------------------------------------


@pytest.fixture(scope="module")
def iperf3_server():
    port = free_port()
    process = subprocess.Popen(["iperf3", "-s", "-p", str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    yield port
    process.terminate()
    process.wait(10)


@pytest.mark.parametrize("args", [["-t", "2"], ["-t", "2", "-P", "3"], ["-t", "2", "-R"],
                                  ["-t", "2", "--bidir"], ["-u", "-b", "50M", "-t", "2"],
                                  ["-u", "-b", "20M", "-R", "-t", "2"]])
def test_our_client_against_an_iperf3_server(iperf3_server, args):
    done = run_simpleperf("-c", "-p", str(iperf3_server), "--iperf3", "-J", *args)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["start"]["protocol"] == "iperf3"
    end = document["end"]
    assert agree(end["sum_sent"]["bytes"], end["sum_received"]["bytes"])
    if "-u" in args:
        assert end["sum"]["lost_percent"] <= 1 and end["sum"]["jitter_ms"] >= 0
    text = run_simpleperf("-c", "-p", str(iperf3_server), "--iperf3", "-t", "1")
    assert text.returncode == 0 and text.stdout.rstrip().endswith("receiver")


def test_our_fq_rate_paces_what_an_iperf3_server_sends():
    """--fq-rate reaches an iperf3 server as its own client sends it ("fqrate"): with -R
    the server's socket paces itself (unpaced, loopback carries gigabits). 3.21's server:
    3.12's does not pace what it sends even for its own client."""
    from helpers import start_iperf3_server

    process, port = start_iperf3_server("3.21")
    try:
        done = run_simpleperf("-c", "-p", str(port), "--iperf3", "-J", "-R", "-t", "2",
                              "--fq-rate", "40M")
        assert done.returncode == 0, done.stderr
        received = json.loads(done.stdout)["end"]["sum_received"]["bits_per_second"]
        assert 30e6 <= received <= 44e6
    finally:
        process.terminate()
        process.wait(10)


def test_an_iperf3_server_is_recognised_by_itself(iperf3_server):
    done = run_simpleperf("-c", "-p", str(iperf3_server), "-J", "-t", "1", "-R")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["start"]["protocol"] == "iperf3"


def test_a_busy_iperf3_server_is_said_so(iperf3_server):
    long_test = subprocess.Popen(["iperf3", "-c", "127.0.0.1", "-p", str(iperf3_server), "-t",
                                  "4"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1)
        done = run_simpleperf("-c", "-p", str(iperf3_server), "--iperf3", "-t", "1")
        assert done.returncode == 1
        assert "busy" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    finally:
        long_test.wait(30)


def test_a_cookie_and_then_nothing_holds_no_test_slot():
    """Slots are taken once the parameters are valid: two connections that send an iperf3
    cookie and go quiet cannot keep a --max-clients 1 server busy."""
    live, port = start_server("--max-clients", "1")
    quiet = []
    try:
        for _ in range(2):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(b"a" * 36 + b"\0")
            quiet.append(sock)
        time.sleep(0.5)
        done = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", "1"],
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        assert "busy" not in done.stderr
    finally:
        for sock in quiet:
            sock.close()
        live.close()


def key_paths(value, prefix: str = "") -> set[str]:
    """Every key of a JSON document as a path: /end/streams[]/sender/max_rtt."""
    found = set()
    if isinstance(value, dict):
        for key, item in value.items():
            found |= {f"{prefix}/{key}"} | key_paths(item, f"{prefix}/{key}")
    elif isinstance(value, list):
        for item in value:
            found |= key_paths(item, f"{prefix}[]")
    return found


@pytest.mark.parametrize("args", [[], ["-R"], ["-P", "2", "--bidir"], ["-u", "-b", "10M"],
                                  ["-u", "-b", "10M", "-R"]])
def test_json_has_every_key_iperf3_3_12_writes(our_server, args):
    """The same test, written by iperf3 3.12 against its own server and by simpleperf against
    its own, in this run: every key path of iperf3's document is in ours (cookie,
    tcp_mss_default, sock_bufsize, sndbuf_actual, rcvbuf_actual, tos, snd_wnd, pmtu, min_rtt,
    max_rtt, max_snd_wnd, receiver_tcp_congestion, cpu_utilization_percent, ...)."""
    process = subprocess.Popen(["iperf3", "-s", "-1", "-p", str(port := free_port())],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not subprocess.run(
                ["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True).stdout:
            time.sleep(0.05)
        theirs = iperf3_json(port, "-t", "1", *args)
    finally:
        process.kill()
        process.wait(10)
    _, our_port = our_server
    done = run_simpleperf("-c", "127.0.0.1", "-p", str(our_port), "-t", "1", "-J", *args)
    assert done.returncode == 0, done.stderr
    ours = json.loads(done.stdout)
    assert theirs["start"]["version"].startswith("iperf 3.12")
    assert sorted(key_paths(theirs) - key_paths(ours)) == []
    start = ours["start"]
    assert start["cookie"] and start["sock_bufsize"] == 0 and start["sndbuf_actual"] > 0
    assert start["rcvbuf_actual"] > 0 and start["test_start"]["tos"] == 0
    cpu = ours["end"]["cpu_utilization_percent"]
    assert cpu["remote_total"] == pytest.approx(cpu["remote_user"] + cpu["remote_system"])
    if "-u" not in args:
        assert 0 < start["tcp_mss_default"] <= 65535
        sender = ours["end"]["streams"][0]["sender"]
        assert 0 < sender["min_rtt"] <= sender["mean_rtt"] <= sender["max_rtt"]
        assert sender["max_snd_wnd"] > 0
        assert ours["end"]["receiver_tcp_congestion"] == ours["end"]["sender_tcp_congestion"]
        assert ours["intervals"][0]["streams"][0]["pmtu"] == 65535  # loopback's MTU, less 1


@pytest.mark.parametrize("version", ["3.12", "3.21"])
def test_fq_rate_paces_what_our_server_sends_and_is_accepted_where_the_client_sends(
        our_server, version):
    """iperf3's --fq-rate was refused (IEUNIMP): now the socket of every stream our server
    sends on paces itself to it (SO_MAX_PACING_RATE), and a client that sends paces its own."""
    from helpers import IPERF3_BINARIES

    _, port = our_server
    for direction in (["-R"], []):
        done = subprocess.run([IPERF3_BINARIES[version], "-c", "127.0.0.1", "-p", str(port),
                               "-t", "2", "--fq-rate", "40M", "-J", *direction],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout[-800:] + done.stderr
        received = json.loads(done.stdout)["end"]["sum_received"]["bits_per_second"]
        assert 30e6 <= received <= 44e6, (direction, received)  # unpaced: gigabits


def _receive_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        assert chunk, f"the server closed after {len(data)} of {count} bytes"
        data += chunk
    return data


def _until_state(sock: socket.socket, wanted: int) -> None:
    while (got := _receive_exactly(sock, 1)) != iperf3.state(wanted):
        assert iperf3.signed(got[0]) > 0, f"server state {iperf3.signed(got[0])}"


def test_bytes_that_arrive_after_test_end_are_counted_up_to_what_the_client_wrote(our_server):
    """A busy host or a slow path can hold a client's last bytes past its TEST_END (CI saw
    our server count 1% short beside a busy core): the server reads on until it has what the
    client's results say it wrote. Here the client sends its last 2 MB 0.5 s after TEST_END,
    far past any quiet moment the server could wait for."""
    _, port = our_server
    block = bytes(128 * 1024)
    early, late = 8 * len(block), 16 * len(block)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as control:
        cookie = iperf3.make_cookie()
        control.sendall(cookie)
        _until_state(control, iperf3.PARAM_EXCHANGE)
        control.sendall(iperf3.encode_json({"tcp": True, "omit": 0, "time": 0,
                                            "num": early + late, "parallel": 1,
                                            "len": len(block), "client_version": "3.12"}))
        _until_state(control, iperf3.CREATE_STREAMS)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as data:
            data.sendall(cookie)
            _until_state(control, iperf3.TEST_START)
            _until_state(control, iperf3.TEST_RUNNING)
            for _ in range(early // len(block)):
                data.sendall(block)
            control.sendall(iperf3.state(iperf3.TEST_END))
            time.sleep(0.5)
            for _ in range(late // len(block)):
                data.sendall(block)
            _until_state(control, iperf3.EXCHANGE_RESULTS)
            control.sendall(iperf3.encode_json(iperf3.results_message(
                [{"bytes": early + late, "seconds": 0.6, "sender": True}], [1], (0.0, 0.0), 1)))
            length = struct.unpack("!I", _receive_exactly(control, 4))[0]
            ours = json.loads(_receive_exactly(control, length))
    assert [stream["bytes"] for stream in ours["streams"]] == [early + late]
