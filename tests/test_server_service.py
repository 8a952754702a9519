"""A server run as a service, as iperf3 users run one: -D in the background with --pidfile
and --logfile, and -J on the server (one JSON document per test, whatever the client)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from helpers import IPERF3_321, SIMPLEPERF, free_port, run_simpleperf

pytestmark = pytest.mark.loopback


def documents(text: str) -> list[dict]:
    """The JSON documents written one after another (pretty-printed, as iperf3 writes them)."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while at < len(text):
        if text[at].isspace():
            at += 1
            continue
        document, at = decoder.raw_decode(text, at)
        found.append(document)
    return found


def wait_gone(pid: int, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def daemon(tmp_path):
    """A -D -J server with a pid file and a log; stopped by its pid at the end."""
    pidfile, log = tmp_path / "server.pid", tmp_path / "server.log"
    port = free_port()
    started = time.monotonic()
    done = run_simpleperf("-s", "-p", str(port), "-D", "-J", "--pidfile", str(pidfile),
                          "--logfile", str(log), timeout=20)
    assert done.returncode == 0 and done.stdout == "" and done.stderr == "", done
    assert time.monotonic() - started < 10
    pid = int(pidfile.read_text())
    yield port, pid, pidfile, log
    if pidfile.exists():
        os.kill(pid, signal.SIGTERM)
        wait_gone(pid)


def test_a_daemon_listens_when_the_command_returns_and_logs_one_document_per_test(daemon):
    port, pid, pidfile, log = daemon
    assert os.getsid(pid) != os.getsid(0)  # a session of its own, away from the terminal
    native = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", "-P", "2", "-J")
    classic = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "1")
    by_iperf3 = subprocess.run([IPERF3_321, "-c", "127.0.0.1", "-p", str(port), "-t", "1",
                                "-u", "-b", "20M", "-R"], capture_output=True, text=True,
                               timeout=30)
    assert native.returncode == classic.returncode == by_iperf3.returncode == 0
    os.kill(pid, signal.SIGTERM)
    assert wait_gone(pid) and not pidfile.exists()  # the pid file goes with the server
    found = documents(log.read_text())
    assert [d["start"]["protocol"] for d in found] == ["native", "classic", "iperf3 3.21"]
    tcp, old, udp = found
    client_end = json.loads(native.stdout)["end"]
    assert tcp["start"]["test_start"]["num_streams"] == 2 and len(tcp["end"]["streams"]) == 2
    # Both ends' totals: what the server received is what the client was told it received.
    assert tcp["end"]["sum_received"]["bytes"] == client_end["sum_received"]["bytes"]
    assert tcp["end"]["sum_sent"]["bytes"] == client_end["sum_sent"]["bytes"]
    assert tcp["intervals"] and tcp["end"]["cpu_utilization_percent"]["host_total"] >= 0
    assert "remote_total" in tcp["end"]["cpu_utilization_percent"]  # the client's, it said
    assert old["end"]["sum_received"]["bytes"] > 0 and "error" not in old
    # iperf3 -R: the server sent UDP; the iperf3 client received and counted loss.
    assert udp["end"]["sum_sent"]["bytes"] > 0 and udp["end"]["sum_sent"]["sender"]
    assert udp["end"]["sum"]["packets"] > 0 and "lost_packets" in udp["end"]["sum"]
    assert "listening" not in log.read_text()  # -J: documents only, no text


def test_a_daemon_that_cannot_listen_says_why_on_the_terminal(tmp_path):
    with socket_taken() as port:
        done = run_simpleperf("-s", "-p", str(port), "-D", "--pidfile",
                              str(tmp_path / "pid"), timeout=20)
    assert done.returncode == 1 and "already in use" in done.stderr, done
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not (tmp_path / "pid").exists()


def test_an_unwritable_pid_file_or_log_is_one_line_and_no_daemon(tmp_path):
    missing = tmp_path / "no" / "such"
    for flag in ("--pidfile", "--logfile"):
        port = free_port()
        started = time.monotonic()
        done = run_simpleperf("-s", "-p", str(port), "-D", flag, str(missing / "f"),
                              timeout=20)
        assert done.returncode == 1, done
        assert done.stderr.startswith("simpleperf: error: cannot ") and flag in done.stderr
        assert "No such file or directory" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
        assert time.monotonic() - started < 10
        probe = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "1",
                               "--connect-timeout", "500")
        assert probe.returncode != 0  # nothing was left listening


def test_logfile_takes_a_client_s_output_and_errors(tmp_path):
    log = tmp_path / "client.log"
    log.write_text("earlier\n")
    port = free_port()  # nothing listens: the client fails
    done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", "--logfile", str(log))
    assert done.returncode == 1 and done.stdout == "" and done.stderr == ""
    lines = log.read_text().splitlines()
    assert lines[0] == "earlier" and lines[-1].startswith("simpleperf: error: ")  # appended


def test_server_json_writes_an_error_document_for_a_refused_test():
    port = free_port()
    server = subprocess.Popen(SIMPLEPERF + ["-s", "-p", str(port), "-J", "--max-parallel",
                                            "1"], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.5)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and subprocess.run(
                ["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True
                ).stdout == "":
            time.sleep(0.05)
        done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", "-P", "2",
                              "--native")
        assert done.returncode == 1
    finally:
        server.send_signal(signal.SIGINT)
        out, _ = server.communicate(timeout=10)
    (refused,) = documents(out)
    assert refused["error"].startswith("refused: ") and refused["end"] == {}
    assert refused["start"]["accepted_connection"]["host"] == "127.0.0.1"


class socket_taken:
    """A port something else listens on, for the length of a with block."""

    def __enter__(self) -> int:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        return self.sock.getsockname()[1]

    def __exit__(self, *_: object) -> None:
        self.sock.close()


def test_pid_file_without_daemon_names_the_foreground_server(tmp_path):
    pidfile = tmp_path / "fg.pid"
    port = free_port()
    server = subprocess.Popen(SIMPLEPERF + ["-s", "-p", str(port), "--pidfile", str(pidfile)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert "listening" in server.stdout.readline() + server.stdout.readline()
        assert int(Path(pidfile).read_text()) == server.pid
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=10)
    assert server.returncode == 0 and not pidfile.exists()


@pytest.fixture
def full_disk(tmp_path):
    """A real filesystem with no space left: a 64 KiB tmpfs filled to the brim."""
    folder = tmp_path / "full"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)],
                   check=True)
    try:
        filler = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            with pytest.raises(OSError, match="No space left"):
                for _ in range(1000):
                    os.write(filler, b"x" * 4096)
        finally:
            os.close(filler)
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_server_whose_log_disk_is_full_serves_on_and_says_so_once(full_disk):
    """Every kind of client is served as with a log (native, classic, iperf3), and the
    server says once, on its standard error, that it cannot write its output."""
    port = free_port()
    server = subprocess.Popen(SIMPLEPERF + ["-s", "-p", str(port), "--logfile",
                                            str(full_disk / "server.log")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the banner cannot say when it listens
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        native = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "--native", "-t", "0.5",
                                "-J")
        assert native.returncode == 0, native.stderr
        assert json.loads(native.stdout)["end"]["sum_received"]["bytes"] > 0
        classic = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "0.5")
        assert classic.returncode == 0 and "incomplete" not in classic.stdout, classic
        iperf3 = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", "1",
                                 "-J"], capture_output=True, text=True, timeout=30)
        assert iperf3.returncode == 0, iperf3.stdout
        assert json.loads(iperf3.stdout)["end"]["sum_received"]["bytes"] > 0
    finally:
        server.send_signal(signal.SIGINT)
        out, err = server.communicate(timeout=10)
    assert server.returncode == 0, err
    assert err.count("cannot write the server's output") == 1, err
    assert "no space left on device" in err and "Traceback" not in err and out == ""


@pytest.mark.parametrize("args,where", [([], "/dev/full"), (["--native", "-J"], "/dev/full"),
                                        (["--native", "--logfile", "/dev/full"], None)])
def test_a_client_that_cannot_write_its_output_exits_1_with_one_line(args, where):
    port = free_port()  # a server that stays: a client may fail before it connects
    server = subprocess.Popen(SIMPLEPERF + ["-s", "-p", str(port)], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        with open(where or os.devnull, "w") as out:
            done = subprocess.run(SIMPLEPERF + ["-c", "127.0.0.1", "-p", str(port), "-t",
                                                "0.5", *args], stdout=out,
                                  stderr=subprocess.PIPE, text=True, timeout=30)
    finally:
        server.terminate()
        server.wait(10)
    assert done.returncode == 1
    assert done.stderr.startswith("simpleperf: error: cannot write the output to ")
    assert "no space left on device" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize("command", [["-v"], ["lab", "list"], ["lab", "--help"]],
                         ids=["-v", "lab list", "lab --help"])
def test_output_that_cannot_be_written_is_one_line_and_status_1(command):
    """`simpleperf -v > /dev/full` was a traceback."""
    with open("/dev/full", "w") as full:
        done = subprocess.run(SIMPLEPERF + command, stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=60)
    if command[-1] == "--help":  # argparse prints help and drops what fails: status 0
        assert done.returncode == 0 and done.stderr == "", done.stderr
        return
    assert done.returncode == 1, done.stderr
    assert done.stderr == "simpleperf: error: cannot write its output: No space left on " \
                          "device\n", done.stderr


def test_output_into_a_reader_that_leaves_ends_quietly():
    """`simpleperf -v | head -1`: the first line, and no word of the pipe."""
    done = subprocess.run(" ".join(SIMPLEPERF) + " -v | head -1", shell=True,
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.startswith("simpleperf ") and done.stderr == "", done.stderr


def test_rtt_against_a_peer_that_accepts_and_closes_is_one_line_and_status_1():
    """It was a ConnectionResetError traceback in some runs and status 0 with no output in
    most (a broken pipe taken for our own output's)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]
    stop = threading.Event()

    def accept_and_close() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                listener.accept()[0].close()
            except TimeoutError:
                continue

    closer = threading.Thread(target=accept_and_close, daemon=True)
    closer.start()
    try:
        for _ in range(3):
            done = subprocess.run(SIMPLEPERF + ["-c", "127.0.0.1", "-p", str(port), "--rtt",
                                                "-t", "1"], capture_output=True, text=True,
                                  timeout=60)
            assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
            assert done.stderr.count("\n") == 1 and "closed the echo connection" in \
                done.stderr, done.stderr
        done = subprocess.run(SIMPLEPERF + ["-c", "127.0.0.1", "-p", str(port), "--rtt",
                                            "-t", "1", "-J"], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 1
        assert "closed the echo connection" in json.loads(done.stdout)["error"]
    finally:
        stop.set()
        closer.join(5)
        listener.close()


def test_a_server_started_in_the_background_by_a_script_stops_at_sigint():
    """A shell starts `simpleperf -s &` with SIGINT ignored; the server took that on, and
    the Ctrl-C (SIGINT) meant to stop it did nothing."""
    port = free_port()
    script = (f"trap '' INT; exec {' '.join(SIMPLEPERF)} -s -p {port}")
    server = subprocess.Popen(["bash", "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        assert "listening" in server.stdout.readline() + server.stdout.readline()
        server.send_signal(signal.SIGINT)
        assert server.wait(10) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(10)
