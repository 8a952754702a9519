"""iperf3's everyday flags: -1/--one-off, -k/--blockcount, --connect-timeout."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time

import pytest
from helpers import SIMPLEPERF, dumpcap_while, free_port, run_simpleperf, start_iperf3_server

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


def _capture_on_loopback(port: int, pcap, run) -> list[tuple[int, int, int]]:
    """(source port, TOS byte, payload length) of every TCP segment with payload to or from
    `port` while `run()` runs, read back by tshark."""
    dumpcap_while(pcap, f"tcp port {port}", run, "-s", "96")
    fields = subprocess.run(["tshark", "-r", str(pcap), "-Y", "tcp.len > 0", "-T", "fields",
                             "-e", "tcp.srcport", "-e", "ip.dsfield", "-e", "tcp.len"],
                            capture_output=True, text=True, check=True).stdout
    return [(int(a), int(b, 16), int(c)) for a, b, c in
            (line.split("\t") for line in fields.splitlines())]


@pytest.mark.root
@pytest.mark.parametrize("flags,tos", [(["-S", "0x28"], 0x28), (["--dscp", "EF"], 46 << 2)])
def test_tos_is_on_the_wire_in_both_directions(server, tmp_path, flags, tos):
    _, port = server

    def test() -> None:
        done = run_simpleperf("-c", "-p", str(port), "-t", "1", "--bidir", "--no-latency",
                              *flags)
        assert done.returncode == 0, done.stderr

    segments = _capture_on_loopback(port, tmp_path / "tos.pcapng", test)
    data = [(source, byte) for source, byte, length in segments if length > 10_000]
    from_server = {byte for source, byte in data if source == port}
    from_client = {byte for source, byte in data if source != port}
    assert from_server == {tos} and from_client == {tos}, (from_server, from_client)
    # From the SYN on, so that a DiffServ class sees the whole connection: the two data
    # connections' SYNs are marked, the control connection's (iperf3's too) is not.
    syns = subprocess.run(["tshark", "-r", str(tmp_path / "tos.pcapng"), "-Y",
                           "tcp.flags.syn == 1 && tcp.flags.ack == 0", "-T", "fields", "-e",
                           "ip.dsfield"], capture_output=True, text=True, check=True).stdout
    assert sorted(int(byte, 16) for byte in syns.split()) == [0, tos, tos]


@pytest.mark.parametrize("protocol", [[], ["-u"]])
def test_cport_gives_each_data_stream_its_port_in_turn(server, protocol):
    """--cport P: data stream n leaves from port P + n - 1 (TCP or UDP; --bidir's four)."""
    _, port = server
    first = free_port()
    while first > 65000:
        first = free_port()
    done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", "-P", "2", "--bidir",
                          "--cport", str(first), "-J", *protocol)
    assert done.returncode == 0, done.stderr
    connected = json.loads(done.stdout)["start"]["connected"]
    assert [c["local_port"] for c in connected] == [first, first + 1, first + 2, first + 3]


def test_cport_that_is_taken_or_too_high_is_one_line(server):
    _, port = server
    taken = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", "--cport", str(port))
    assert taken.returncode == 1
    assert taken.stderr == (f"simpleperf: error: cannot bind to local port {port}: address "
                            "already in use\n")
    high = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-P", "3", "--cport", "65534")
    assert high.returncode == 2 and "leaves no port for stream 3" in high.stderr


def _payloads_on_loopback(port: int, pcap, run) -> list[bytes]:
    """The first bytes of every large TCP segment's or UDP datagram's payload to or from
    `port` while `run()` runs (dumpcap on lo, read back raw: no dissector guesses what a
    port carries)."""
    import dpkt

    dumpcap_while(pcap, f"port {port}", run, "-P", "-s", "200")
    found = []
    with open(pcap, "rb") as capture:
        for _, frame in dpkt.pcap.Reader(capture):
            packet = dpkt.ethernet.Ethernet(frame).data
            if not isinstance(packet, dpkt.ip.IP):
                continue
            segment = packet.data
            if isinstance(segment, dpkt.tcp.TCP | dpkt.udp.UDP) and packet.len - 4 * packet.hl \
                    > 1000:
                found.append(bytes(segment.data))
    return found


@pytest.mark.root
@pytest.mark.parametrize("flags", [["-R"], ["-u", "-b", "10M", "-l", "1000"]])
def test_repeating_payload_is_on_the_wire(server, tmp_path, flags):
    """--repeating-payload: what goes out is iperf3's '0123456789...' (both ends: with -R the
    server sends it), where it is zeros without."""
    _, port = server

    def test(*extra: str) -> None:
        done = run_simpleperf("-c", "-p", str(port), "-t", "1", "--no-latency", *flags,
                              *extra)
        assert done.returncode == 0, done.stderr

    def cyclic(payload: bytes) -> bool:
        # each buffer starts the pattern again ('...0123' + '0123...' where one ends), as
        # iperf3's do: a segment may span two
        return all(b - a in (1, -9) or b == ord("0")
                   for a, b in zip(payload, payload[1:], strict=False))

    patterned = _payloads_on_loopback(port, tmp_path / "on.pcap",
                                      lambda: test("--repeating-payload"))
    skip = 32 if "-u" in flags else 0  # a datagram begins with its header
    wrong = [p[:140] for p in patterned if not (
        len(p) >= skip + 100 and cyclic(p[skip:skip + 100])
        and set(p[skip:skip + 100]) <= set(b"0123456789"))]
    assert len(patterned) > 10 and not wrong, (len(patterned), wrong[:2])
    plain = _payloads_on_loopback(port, tmp_path / "off.pcap", test)
    assert plain and all(set(p[skip:skip + 100]) == {0} for p in plain)


@pytest.mark.root
def test_affinity_puts_the_client_and_the_tests_server_streams_on_their_cpus(server):
    """-A 0,1: the client runs on CPU 0 (all of it), the server's threads of this test's two
    streams on CPU 1, its others where they were."""
    live, port = server
    client = subprocess.Popen(SIMPLEPERF + ["-c", "-p", str(port), "-t", "3", "-P", "2", "-A",
                                            "0,1", "-i", "0"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.5)
        assert _cpus_of(client.pid) == ["0"]
        server_threads = [_cpus_of(int(task), live.process.pid)
                          for task in os.listdir(f"/proc/{live.process.pid}/task")]
        assert server_threads.count(["1"]) >= 2, server_threads
    finally:
        out, err = client.communicate(timeout=30)
    assert client.returncode == 0, err
    bad = run_simpleperf("-c", "-p", str(port), "-A", "4096")
    assert bad.returncode == 2 and bad.stderr.startswith("simpleperf: error: -A/--affinity 4096:")
    far = run_simpleperf("-c", "-p", str(port), "-t", "1", "-A", "0,4095")
    assert far.returncode == 1 and "CPU 4095 is not one this server has" in far.stderr


def _cpus_of(task: int, process: int | None = None) -> list[str]:
    path = f"/proc/{process}/task/{task}/status" if process else f"/proc/{task}/status"
    with open(path) as status:
        line = next(line for line in status if line.startswith("Cpus_allowed_list"))
    return line.split()[1].split(",")


@pytest.mark.iperf3
@pytest.mark.parametrize("server_kind", ["simpleperf", "iperf3 3.21"])
def test_verbose_and_json_give_both_ends_cpu(server, server_kind):
    """-V prints iperf3's CPU line for both ends; -J has host_* and remote_* (the server
    reports its own CPU with its results, as iperf3's does)."""
    if server_kind == "simpleperf":
        _, port = server
        process = None
    else:
        process, port = start_iperf3_server("3.21")
    try:
        text = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", "-V", "-R")
        assert text.returncode == 0, text.stderr
        line = next(x for x in text.stdout.splitlines() if x.startswith("CPU Utilization"))
        assert re.fullmatch(r"CPU Utilization: local/receiver [\d.]+% \([\d.]+%u/[\d.]+%s\), "
                            r"remote/sender [\d.]+% \([\d.]+%u/[\d.]+%s\)", line), line
        document = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", "-J")
        cpu = json.loads(document.stdout)["end"]["cpu_utilization_percent"]
        assert set(cpu) == {"host_total", "host_user", "host_system", "remote_total",
                            "remote_user", "remote_system"}
        # A sender at full speed on loopback keeps a core busy: neither end is idle.
        assert cpu["host_total"] > 1 and cpu["remote_total"] > 1, cpu
        assert cpu["remote_total"] == pytest.approx(cpu["remote_user"] + cpu["remote_system"])
    finally:
        if process is not None:
            process.kill()
            process.wait(10)


def test_file_sends_its_bytes_and_reverse_writes_what_arrives(server, tmp_path):
    """-F FILE: the test sends exactly the file (all of it, without -t or -n); with -R, what
    the server sent lands in FILE; a missing file or -F with -P 2 is one line."""
    _, port = server
    source = tmp_path / "source.bin"
    source.write_bytes(os.urandom(3_000_000))
    sent = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-F", str(source), "-J")
    assert sent.returncode == 0, sent.stderr
    end = json.loads(sent.stdout)["end"]
    assert end["sum_sent"]["bytes"] == end["sum_received"]["bytes"] == 3_000_000
    kept = tmp_path / "kept.bin"
    received = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-F", str(kept), "-R", "-n",
                              "2MB", "-J")
    assert received.returncode == 0, received.stderr
    assert kept.stat().st_size == json.loads(received.stdout)["end"]["sum_received"]["bytes"]
    assert kept.stat().st_size >= 2_000_000
    missing = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-F", str(tmp_path / "none"))
    assert missing.returncode == 2 and "not a readable file" in missing.stderr
    parallel = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-F", str(source), "-P", "2")
    assert parallel.returncode == 2 and "one TCP stream" in parallel.stderr


def test_a_servers_file_serves_one_test_at_a_time(tmp_path):
    """A server's -F FILE is written by one test at a time: of two clients at once, one
    fills it and the other is refused in one line (no bytes of its in the file)."""
    from helpers import start_server

    kept = tmp_path / "kept.bin"
    live, port = start_server("-F", str(kept))
    try:
        clients = [subprocess.Popen([*SIMPLEPERF, "-c", "127.0.0.1", "-p", str(port),
                                     "--native", "-t", "2", "-J"], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True) for _ in range(2)]
        done = [(client.wait(60), *client.communicate()) for client in clients]
        served = [json.loads(out) for status, out, _ in done if status == 0]
        refused = [err for status, _, err in done if status == 1]
        assert len(served) == 1 and len(refused) == 1, done
        assert "in use by another test" in refused[0]
        assert kept.stat().st_size == served[0]["end"]["sum_received"]["bytes"] > 0
    finally:
        live.close()


@pytest.mark.root
def test_flowlabel_is_on_every_packet_the_client_sends_over_ipv6(server, tmp_path):
    """-L/--flowlabel (iperf3's): TCP and UDP tests to ::1, every packet our client sends
    (control, data, the RTT probe's) carries the label; to IPv4 it changes nothing."""
    _, port = server
    pcap = tmp_path / "flow.pcapng"

    def test() -> None:
        for extra in ([], ["-u", "-b", "1M"]):
            done = run_simpleperf("-c", "::1", "-p", str(port), "-t", "0.5", "-L", "0x12345",
                                  *extra)
            assert done.returncode == 0, done.stderr
        plain = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "0.3", "-L", "7",
                               "--native")
        assert plain.returncode == 0, plain.stderr

    dumpcap_while(pcap, f"port {port}", test, "-s", "96")
    fields = subprocess.run(["tshark", "-r", str(pcap), "-Y", f"ipv6 && !(tcp.srcport == "
                             f"{port}) && !(udp.srcport == {port})", "-T", "fields", "-e",
                             "ipv6.flow", "-e", "udp.length"], capture_output=True,
                            text=True, check=True).stdout.splitlines()
    labels = {line.split("\t")[0] for line in fields}
    assert labels == {"0x012345"}, labels
    assert any(line.split("\t")[1] for line in fields)  # the UDP test's datagrams too
