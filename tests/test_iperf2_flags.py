"""A script written for iperf2 runs with simpleperf in its place: every option iperf 2.1.8's
own --help lists is one of ours, or refused in one line as not taken yet; where iperf2 and
iperf3 give one letter two meanings, iperf3's wins and --iperf2 gives iperf2's (the list
checked against both tools' --help and docs/iperf2-compat.md)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from helpers import (
    IPERF3_BINARIES,
    SIMPLEPERF,
    LiveProcess,
    dumpcap_while,
    free_port,
    run_simpleperf,
    start_iperf3_server,
    start_server,
)

from simpleperf.command_line import iperf2_flags
from simpleperf.command_line.cli import build_parser, parse_args
from simpleperf.errors import UsageError
from simpleperf.transport import socket_options, tcp

ROOT = Path(__file__).resolve().parent.parent
OPTION = re.compile(r"^\s+(?:(-[\w1]), )?(--[\w-]+)", re.MULTILINE)


def _help(command: list[str]) -> list[tuple[str, str]]:
    """(letter or "", long name) of every option a tool's --help lists."""
    done = subprocess.run([*command, "--help"], capture_output=True, text=True)
    return OPTION.findall(done.stdout + done.stderr)


def _ours() -> set[str]:
    return {name for action in build_parser()._actions for name in action.option_strings}


@pytest.mark.iperf2
def test_every_iperf2_option_is_ours_or_refused_as_not_yet():
    theirs = _help(["iperf"])
    names = {name for _, name in theirs}
    assert len(names) > 60  # the help was read
    assert names - _ours() == set()
    assert set(iperf2_flags.NOT_YET) <= names  # every one listed is iperf2's
    for name in iperf2_flags.NOT_YET:
        done = run_simpleperf("-c", "127.0.0.1", name)
        assert done.returncode == 2, name
        assert done.stderr.strip() == (f"simpleperf: error: {name} is iperf2's "
                                       f"({iperf2_flags.NOT_YET[name][1]}); simpleperf does "
                                       "not do it yet")


@pytest.mark.iperf2
@pytest.mark.iperf3
def test_the_collisions_are_exactly_the_letters_both_tools_use_differently():
    iperf2 = {letter: name for letter, name in _help(["iperf"]) if letter}
    iperf3 = {letter: name for letter, name in _help([IPERF3_BINARIES["3.21"]]) if letter}
    ours = {action.option_strings[0]: action.option_strings for action in build_parser()._actions
            if action.option_strings and len(action.option_strings[0]) == 2}
    for letter, (name, _) in iperf2_flags.COLLISIONS.items():
        assert iperf2[letter] == name
        assert letter in iperf3 or letter in ours, letter  # a meaning besides iperf2's
    same = {"-p", "-f", "-i", "-l", "-u", "-w", "-B", "-M", "-N", "-S", "-s", "-c", "-n",
            "-t", "-P", "-R", "-D", "-1", "-b", "-F", "-e", "-h", "-v"}
    for letter, name in iperf2.items():
        if letter in iperf3 and iperf3[letter] != name and letter not in same:
            assert letter in iperf2_flags.COLLISIONS, (letter, name, iperf3[letter])
    documented = (ROOT / "docs" / "iperf2-compat.md").read_text()
    for letter, (name, _) in iperf2_flags.COLLISIONS.items():
        assert f"`{letter}`" in documented and f"`{name}`" in documented


def test_after_iperf2_a_colliding_letter_means_what_iperf2_means():
    plain = parse_args(["-c", "127.0.0.1", "-d", "-Z"])
    assert plain.test.zerocopy and not plain.dualtest and plain.accepted_only  # iperf3's
    under = parse_args(["-c", "127.0.0.1", "--iperf2", "-d", "-Zreno", "-L", "5302"])
    assert (under.dualtest, under.test.congestion, under.listen_port) == (True, "reno", 5302)
    assert not under.test.zerocopy
    assert parse_args(["-c", "h", "--iperf2", "-V", "-t", "1"]).family == socket.AF_INET6
    # where iperf2's meaning is not taken, ours stays: -I still names the server; -T is
    # iperf2's --ttl after --iperf2, iperf3's --title without it
    under = parse_args(["-c", "-I", "10.0.0.2", "--iperf2", "-T", "7"])
    assert (under.host, under.ttl) == ("10.0.0.2", 7)
    assert parse_args(["-c", "h", "-T", "x"]).ttl == 0
    assert {"-d", "-Z", "-V", "-L", "-C", "-T", "-m"} == iperf2_flags.IPERF2_LETTERS
    assert parse_args(["-c", "h", "--iperf2", "-C"]).compatibility
    assert parse_args(["-c", "h", "-C", "reno"]).test.congestion == "reno"  # ours without it


@pytest.mark.parametrize(("iperf2_name", "ours"), [
    (["--bandwidth", "5M"], ["-b", "5M"]), (["--enhanced"], ["-e"]),
    (["--nodelay"], ["-N"]), (["--tcp-congestion", "reno"], ["-C", "reno"]),
    (["--ipv6_domain"], ["-6"]), (["--output", "f.log"], ["--logfile", "f.log"]),
    (["-o", "f.log"], ["--logfile", "f.log"]), (["--dualtest"], ["--bidir"])])
def test_iperf2_long_names_mean_what_ours_do(iperf2_name, ours):
    assert parse_args(["-c", "127.0.0.1", *iperf2_name]) == parse_args(
        ["-c", "127.0.0.1", *ours])


@pytest.mark.parametrize(("words", "says"), [
    (["--dualtest", "-r"], "cannot be used together"),
    (["-r", "-R"], "not with -R or --bidir"), (["-r", "-J"], "--json-stream"),
    (["--listenport", "5002"], "for --iperf2 with -d or -r"),
    (["--iperf2", "-d", "-L", "80"], "--listenport must be a port"),
    (["--tcp-write-prefetch", "0"], "--tcp-write-prefetch must be a size"),
    (["--txstart-time", "soon"], "--txstart-time must be a Unix time"),
    (["--txstart-time", "1e12"], "within a day"),
    (["--permit-key", "sesame"], "a client needs --iperf2"),
    (["--iperf2", "--permit-key", "abc"], "--permit-key must be 4 to 128"),
    (["--bounceback=0"], "a burst of 1 to"), (["--bounceback", "-u"], "not with -u"),
    (["--bounceback-period", "1"], "are --bounceback options"),
    (["--bounceback", "--bounceback-hold", "soon"], "--bounceback-hold must be milliseconds"),
    (["--bounceback-congest"], "are --bounceback options"),
    (["--bounceback-no-quickack"], "are --bounceback options"),
    (["--bounceback", "--bounceback-congest=sideways"], "takes up, down or bidir"),
    (["--bounceback", "--bounceback-congest=up,0"], "takes 1 to 128 streams, not '0'"),
    (["--bounceback", "--bounceback-congest=down,many"], "takes 1 to 128 streams"),
    (["--bounceback", "--tcp-quickack", "--bounceback-no-quickack"], "contradict"),
    (["-x", "CQ"], "-x/--reportexclude takes letters of CDMSV"),
    (["-x", ""], "-x/--reportexclude takes letters of CDMSV"),
    (["--connect-retries=many"], "--connect-retries takes 0 to"),
    (["--no-udp-fin"], "--no-udp-fin is iperf2's"),
    (["--iperf2", "-u", "-R", "--no-udp-fin"], "(not -R, -d or -r)"),
    (["--ttl", "0"], "--ttl takes 1 to 255 hops, not '0'"),
    (["--ttl", "many"], "--ttl takes 1 to 255 hops"),
    (["--iperf3", "--tcp-write-prefetch", "64K", "-R"],
     "--tcp-write-prefetch needs a simpleperf server: an iperf3 server cannot be asked"),
    (["--iperf3", "--tcp-quickack"], "--iperf3: --tcp-quickack needs a simpleperf server: "
                                     "an iperf3 server cannot be asked to acknowledge at once")])
def test_bad_iperf2_flags_are_one_line(words, says):
    done = run_simpleperf("-c", "127.0.0.1", *words)
    assert done.returncode == 2
    assert says in done.stderr and done.stderr.strip().count("\n") == 0


@pytest.mark.loopback
def test_tradeoff_runs_the_test_then_the_reverse_one():
    live, port = start_server()
    try:
        done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-r", "-t", "1",
                              "--json-stream")
    finally:
        live.close()
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    starts = [e["data"]["test_start"] for e in events if e["event"] == "start"]
    assert [start["reverse"] for start in starts] == [0, 1]
    ends = [e["data"] for e in events if e["event"] == "end"]
    assert len(ends) == 2 and all(end["sum_received"]["bytes"] > 0 for end in ends)


@pytest.mark.loopback
def test_connect_retries_wait_for_a_server_started_after_the_client():
    """--connect-retries: tried again 0.2 s apart, as iperf2's; the client started first
    runs its test once the server is up; without a server, one line saying the tries."""
    nobody = run_simpleperf("-c", "127.0.0.1", "-p", str(free_port()), "--connect-retries",
                            "2", "-t", "1")
    assert nobody.returncode == 1 and nobody.stderr.strip().count("\n") == 0
    assert "connection refused" in nobody.stderr and "(3 tries, 0.2 s apart)" in nobody.stderr
    port = free_port()
    client = subprocess.Popen([*SIMPLEPERF, "-c", "127.0.0.1", "-p", str(port), "-t", "1",
                               "-J", "--connect-retries", "50"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)  # a few tries refused before the server is there
    server = LiveProcess("-s", "-p", str(port))
    try:
        out, err = client.communicate(timeout=30)
    finally:
        server.close()
    assert client.returncode == 0, err
    assert json.loads(out)["end"]["sum_received"]["bytes"] > 0


@pytest.mark.loopback
@pytest.mark.root
def test_realtime_runs_the_client_and_its_threads_round_robin():
    """-z/--realtime (iperf2's): SCHED_RR at its lowest priority, before any thread starts
    (they inherit it): the client's every thread, looked at while the test runs."""
    live, port = start_server()
    try:
        client = subprocess.Popen([*SIMPLEPERF, "-c", "127.0.0.1", "-p", str(port), "-z",
                                   "-t", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        time.sleep(1.0)
        threads = [int(t) for t in os.listdir(f"/proc/{client.pid}/task")]
        policies = {os.sched_getscheduler(t) for t in threads}
        priorities = {os.sched_getparam(t).sched_priority for t in threads}
        out, err = client.communicate(timeout=30)
    finally:
        live.close()
    assert client.returncode == 0 and not err, err
    assert len(threads) > 1 and policies == {os.SCHED_RR}
    assert priorities == {os.sched_get_priority_min(os.SCHED_RR)}


@pytest.mark.loopback
def test_sum_only_prints_the_sum_rows_alone():
    live, port = start_server()
    try:
        done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-P", "3", "-t", "1",
                              "-i", "0.5", "--sum-only")
        single = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", "-i", "0.5",
                                "--sum-only")
    finally:
        live.close()
    for run in (done, single):
        assert run.returncode == 0, run.stderr
        rows = [line for line in run.stdout.splitlines() if " - " in line]
        # two intervals and the summary's sender and receiver: SUM rows, no stream's
        assert [row.split()[0] for row in rows] == ["SUM"] * 4, run.stdout
    assert done.stdout.count(" connected with ") == 3  # the connection lines stay


@pytest.mark.loopback
def test_hide_ips_shows_no_address_and_keeps_the_columns():
    live, port = start_server()
    try:
        text = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-P", "2", "-t", "0.5",
                              "--hide-ips")
        named = run_simpleperf("-c", "localhost", "-4", "-p", str(port), "-t", "0.5", "-J",
                               "--hide-ips")
    finally:
        live.close()
    assert text.returncode == 0 and named.returncode == 0, text.stderr + named.stderr
    assert "127.0.0.1" not in text.stdout and "*.*.*.1" in text.stdout
    lines = text.stdout.splitlines()
    column = next(line for line in lines if "Interval" in line).index("Interval")
    rows = [line for line in lines if line.startswith("*.*.*.1:")]
    assert len(rows) == 2 and {row[column - 1:column + 1] for row in rows} == {" 0"}
    document = json.loads(named.stdout)
    assert document["start"]["connecting_to"]["host"] == "(**hidden**)"
    assert "127.0.0.1" not in named.stdout and "localhost" not in named.stdout


@pytest.mark.loopback
def test_txstart_time_holds_the_start_until_then():
    live, port = start_server()
    try:
        start = time.time() + 2
        done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", "-J",
                              "--txstart-time", f"{start:.3f}")
    finally:
        live.close()
    assert done.returncode == 0, done.stderr
    began = json.loads(done.stdout)["start"]["timestamp"]["timesecs"]
    assert start - 1 <= began <= start + 1  # whole seconds in iperf3's field


def test_tcp_rx_window_clamp_is_each_data_connections_window_clamp():
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    options = parse_args(["-c", "127.0.0.1", "-p", str(port), "--tcp-rx-window-clamp", "64K"])
    control = tcp.connect_to_server(options)
    data = tcp.connect_to_server(options, stream=1)
    try:
        assert data.getsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP) == 64_000
        assert control.getsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP) != 64_000
    finally:
        for sock in (control, data, listener):
            sock.close()
    for bad in ("1K", "lots"):
        with pytest.raises(UsageError, match="--tcp-rx-window-clamp must be a size from"):
            parse_args(["-c", "127.0.0.1", "--tcp-rx-window-clamp", bad])


def test_tcp_write_prefetch_is_each_data_connections_unsent_limit():
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        options = parse_args(["-c", "127.0.0.1", "-p", str(listener.getsockname()[1]),
                              "--tcp-write-prefetch", "16K"])  # decimal: 16000
        sock = tcp.connect_to_server(options, stream=1)
        with sock:
            assert sock.getsockopt(socket.IPPROTO_TCP, socket_options.TCP_NOTSENT_LOWAT) == 16000
        control = tcp.connect_to_server(options)
        with control:  # the control connection keeps the kernel's (no limit)
            assert control.getsockopt(socket.IPPROTO_TCP, socket_options.TCP_NOTSENT_LOWAT) != 16000
    finally:
        listener.close()


@pytest.mark.iperf3
def test_an_iperf3_server_found_out_is_refused_a_write_prefetch_it_would_have_to_keep():
    """Our sender keeps its own limit against an iperf3 server; with -R the iperf3 server
    sends, and no parameter of its can carry the limit: one line, before any data."""
    process, port = start_iperf3_server("3.21")
    try:
        kept = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "0.5", "-J",
                              "--tcp-write-prefetch", "64K")
        refused = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "0.5",
                                 "--tcp-write-prefetch", "64K", "-R")
    finally:
        process.kill()
        process.wait()
    assert kept.returncode == 0, kept.stderr
    assert json.loads(kept.stdout)["end"]["sum_sent"]["bytes"] > 0
    assert refused.returncode == 1 and refused.stderr.strip().count("\n") == 0
    assert (f"port {port} is an iperf3 server, which cannot be asked to limit what it leaves "
            "unsent: --tcp-write-prefetch needs a simpleperf server") in refused.stderr


@pytest.mark.root
@pytest.mark.parametrize("flags", [[], ["-u"], ["--iperf2", "-u"]],
                         ids=["tcp", "udp", "iperf2-udp"])
def test_ttl_and_local_only_are_on_every_data_packet(tmp_path, flags):
    """--ttl (-T after --iperf2) and --local-only are options of every data socket the
    client opens, TCP or UDP, whichever server: each data packet leaves with that TTL, and
    a peer on a directly connected network (lo) is reached with SO_DONTROUTE."""
    port = free_port()
    server = subprocess.Popen(["iperf", "-s", "-u", "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) if "--iperf2" in flags else None
    live = None
    if server is None:
        live, port = start_server()
    pcap = tmp_path / "ttl.pcapng"
    ran: list[subprocess.CompletedProcess] = []

    def test() -> None:
        time.sleep(0.3)  # an iperf2 server listens
        ran.append(run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "0.5", "--ttl",
                                  "9", "--local-only", *flags))

    try:
        dumpcap_while(pcap, f"dst port {port}", test, "-s", "64")
    finally:
        if server is not None:
            server.kill()
            server.wait()
        if live is not None:
            live.close()
    done = ran[0]
    assert done.returncode == 0, done.stderr
    length = "tcp.len" if "-u" not in flags else "udp.length"
    fields = subprocess.run(["tshark", "-r", str(pcap), "-Y", f"{length} > 100", "-T",
                             "fields", "-e", "ip.ttl"], capture_output=True, text=True,
                            check=True).stdout.split()
    assert len(fields) > 10 and set(fields) == {"9"}, fields[:20]


ROW_END = {role: f" {role}\n" for role in ("sender", "receiver")}  # a summary row's end


@pytest.mark.loopback
def test_reportexclude_leaves_out_each_kind_of_report():
    """-x (iperf2's): C the connection lines, S the banner, D our rows, V the server's."""
    server, port = start_server()
    try:
        def text(*args: str) -> str:
            done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "0.5", "-i",
                                  "0.25", "--native", *args)
            assert done.returncode == 0, done.stderr
            return done.stdout

        whole = text()
        assert "connecting to server" in whole and "connected with" in whole
        assert re.search(r"\s0\.2 - 0\.5\s", whole) and ROW_END["sender"] in whole
        assert ROW_END["receiver"] in whole
        quiet = text("-x", "CS")
        assert "connecting to server" not in quiet and "connected with" not in quiet
        assert ROW_END["sender"] in quiet and ROW_END["receiver"] in quiet
        no_server = text("-x", "v")
        assert ROW_END["sender"] in no_server and ROW_END["receiver"] not in no_server
        no_data = text("-x", "D")
        assert not re.search(r"\s0\.2 - 0\.5\s", no_data)
        assert ROW_END["sender"] not in no_data and ROW_END["receiver"] in no_data
        reverse = text("-R", "-x", "V")  # the server sends: its row is the sender's
        assert ROW_END["sender"] not in reverse and ROW_END["receiver"] in reverse
        classic = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "0.5", "-x", "SD")
        assert classic.returncode == 0, classic.stderr
        assert classic.stdout.splitlines() == [f"Client connected with 127.0.0.1 port {port}"]
    finally:
        server.close()


def test_a_server_refuses_the_test_descriptions_own_client_flags():
    done = run_simpleperf("-s", "--tcp-quickack")
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0
    assert "--tcp-quickack is a client option and cannot be used with -s" in done.stderr


def _quickacks(trace: Path) -> int:
    """TCP_QUICKACK settings in an strace -f log (one per read of a receiver that asks)."""
    return sum("TCP_QUICKACK" in line for line in trace.read_text().splitlines())


def _traced(trace: Path, *command: str) -> list[str]:
    return ["strace", "-f", "-qq", "-e", "trace=setsockopt", "-o", str(trace), *command]


@pytest.mark.loopback
@pytest.mark.parametrize("peer", ["simpleperf", "simpleperf -R", "iperf 2.1.8"])
def test_tcp_quickack_is_set_before_every_read_by_the_receiver_of_each_test(tmp_path, peer):
    """--tcp-quickack (iperf2's): the receiving end sets TCP_QUICKACK before every read. A
    simpleperf server is told by the test description, iperf 2.1.8's by its header's flag
    (both traced: their setsockopt calls); with -R our client receives and sets it. Without
    the flag no end sets it."""
    port = free_port()
    receiver_trace = tmp_path / "receiver.txt"
    reverse = peer.endswith("-R")
    iperf2 = peer.startswith("iperf")
    served = subprocess.Popen(
        _traced(receiver_trace if not reverse else tmp_path / "server.txt",
                *(["iperf", "-s", "-p", str(port)] if iperf2 else
                  [*SIMPLEPERF, "-s", "-p", str(port)])),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        counts = []
        for flags in ([], ["--tcp-quickack"]):
            time.sleep(1.0)  # the server listens (under strace)
            before = 0 if reverse else _quickacks(receiver_trace)
            client_trace = tmp_path / "client.txt"
            done = subprocess.run(
                _traced(client_trace, *SIMPLEPERF, "-c", "127.0.0.1", "-p", str(port), "-t",
                        "1", "-l", "1000", "-b", "2M", "--no-latency", *flags,
                        *(["-R"] if reverse else []), *(["--iperf2"] if iperf2 else [])),
                capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            time.sleep(0.5)  # the server's log is written
            counts.append(_quickacks(client_trace if reverse else receiver_trace) - before)
    finally:
        os.killpg(served.pid, signal.SIGKILL)  # strace and the server it runs: its group
        served.wait(10)
    plain, quick = counts
    assert plain == 0 and quick > 100, counts  # 1 s of 1,000-byte writes at 2 Mbit/s: 250


def test_print_mss_is_iperf2s_line_after_the_banner():
    """-m after --iperf2 (--print_mss anywhere): iperf2's line with the first
    connection's MSS once connected (iperf 2.1.8's own is its socket's 536 before it
    connects), or with -M the size asked; at an iperf2 server and at ours alike."""
    port = free_port()
    server = subprocess.Popen(["iperf", "-s", "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    live, ours = start_server()
    try:
        time.sleep(0.3)  # the iperf2 server listens
        at_iperf2 = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "--iperf2", "-m",
                                   "-t", "0.5")
        asked = run_simpleperf("-c", "127.0.0.1", "-p", str(ours), "--print_mss", "-M",
                               "1000", "-t", "0.5")
        plain = run_simpleperf("-c", "127.0.0.1", "-p", str(ours), "-t", "0.5", "-P", "6")
    finally:
        server.kill()
        server.wait()
        live.close()
    assert at_iperf2.returncode == 0, at_iperf2.stderr
    lines = at_iperf2.stdout.splitlines()
    said = [int(found[1]) for line in lines if (found := re.fullmatch(r"MSS size (\d+) bytes",
                                                                       line))]
    # loopback's MTU is 65536: a segment far beyond Ethernet's, as TCP_MAXSEG says it
    assert len(said) == 1 and 16_000 < said[0] <= 65_536, lines[:6]
    assert lines.index(f"MSS size {said[0]} bytes") < next(
        n for n, line in enumerate(lines) if line.startswith("Client "))
    assert asked.returncode == 0, asked.stderr
    assert "MSS req size 1000 bytes (per TCP_MAXSEG)" in asked.stdout.splitlines()
    assert plain.returncode == 0 and "MSS" not in plain.stdout
    with pytest.raises(UsageError, match="--print_mss is a client option"):
        parse_args(["-s", "--print_mss"])
