"""Helpers for the tests: real simpleperf processes on loopback, read line by line."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time

SIMPLEPERF = [sys.executable, "-m", "simpleperf"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_simpleperf(*args: str, timeout: float = 60, netns: str | None = None
                   ) -> subprocess.CompletedProcess:
    command = SIMPLEPERF + list(args)
    if netns:
        command = ["ip", "netns", "exec", netns] + command
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


class LiveProcess:
    """A running simpleperf whose output lines are collected as they appear."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(SIMPLEPERF + list(args), stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._new: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))
            self._new.put(line)

    def wait_for(self, predicate, timeout: float = 20) -> list[str]:
        """Wait until predicate(lines) is true; returns the lines."""
        deadline = time.monotonic() + timeout
        while not predicate(self.lines):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"timed out; output so far: {self.lines!r}")
            try:
                self._new.get(timeout=min(remaining, 0.2))
            except queue.Empty:
                if self.process.poll() is not None and not predicate(self.lines):
                    raise AssertionError(f"process exited {self.process.returncode}: "
                                         f"{self.lines!r} {self.process.stderr.read()!r}") from None
        return self.lines

    def count(self, text: str) -> int:
        return sum(text in line for line in self.lines)

    def interrupt(self, timeout: float = 10) -> int:
        self.process.send_signal(signal.SIGINT)
        code = self.process.wait(timeout)
        self._reader.join(5)
        return code

    def stderr(self) -> str:
        assert self.process.stderr is not None
        return self.process.stderr.read()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)
        self._reader.join(5)
        for stream in (self.process.stdout, self.process.stderr):
            if stream:
                stream.close()


def start_server(*extra: str) -> tuple[LiveProcess, int]:
    """A simpleperf server on a free port. The port free_port() found can be taken by
    another process's outgoing connection before the server binds it: then another."""
    for attempt in range(3):
        port = free_port()
        server = LiveProcess("-s", "-p", str(port), *extra)
        try:
            server.wait_for(lambda lines: any("listening on port" in line for line in lines))
            return server, port
        except AssertionError as failure:
            server.close()
            if "already in use" not in str(failure) or attempt == 2:
                raise
    raise AssertionError("unreachable")


def end_iperf_server(process: subprocess.Popen) -> str:
    """An iperf -s ended and what it printed: asked with SIGTERM, killed if it lingers past
    10 s (2.1.8's server sometimes does), so that no server outlives its test."""
    process.terminate()
    try:
        output, _ = process.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate(timeout=10)
    return output


def proc_status(pid: int) -> dict[str, int]:
    """Open file descriptors and threads of a process, from /proc."""
    with open(f"/proc/{pid}/status") as status:
        threads = next(int(line.split()[1]) for line in status if line.startswith("Threads:"))
    return {"fds": len(os.listdir(f"/proc/{pid}/fd")), "threads": threads}


# The iperf3 servers an iperf3 user may meet: Debian's (3.12) and the newest (3.21, built in
# the project's shared/tools beside the repository, as CI's checkout has it).
IPERF3_321 = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "tools",
                          "iperf3-3.21")
IPERF3_BINARIES = {"3.12": "iperf3", "3.21": IPERF3_321}


def start_iperf3_server(version: str, *args: str) -> tuple[subprocess.Popen, int]:
    """A real iperf3 server of `version` on a free port, once it listens."""
    binary = IPERF3_BINARIES[version]
    if version != "3.12" and not os.access(binary, os.X_OK):
        raise AssertionError(f"iperf3 {version} is not at {binary} (the shared tools beside "
                             "the repository)")
    port = free_port()
    process = subprocess.Popen([binary, "-s", "-p", str(port), *args], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 10
    # Listening is read from the kernel: a connection to find out would be a test to a
    # one-off server (-1).
    while time.monotonic() < deadline and not subprocess.run(
            ["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True).stdout:
        time.sleep(0.05)
    return process, port


def dumpcap_while(pcap, capture_filter: str, run, *options: str) -> None:
    """Capture on lo (root) into `pcap` while `run()` runs."""
    grab = subprocess.Popen(["dumpcap", "-q", *options, "-i", "lo", "-f", capture_filter,
                             "-w", str(pcap)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert grab.stderr is not None
        while "Capturing on" not in (line := grab.stderr.readline()):
            assert line, "the capture did not start"
        run()
    finally:
        grab.terminate()
        grab.wait(10)


# Apple's responsiveness server as nginx runs it, cut to one machine: the reference's own
# configuration (../shared/reference/network-quality/nginx-local.conf) beside the checkout
SHARED = os.path.join(os.path.dirname(__file__), "..", "..", "shared")
NGINX_CONF = os.path.join(SHARED, "reference", "network-quality", "nginx-local.conf")


def listening(port: int, seconds: float = 15) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True,
                          text=True).stdout:
            return True
        time.sleep(0.05)
    return False


def nginx_nq_server(folder: str) -> tuple[subprocess.Popen, int]:
    """Debian's nginx as Apple's responsiveness server in `folder` (a self-signed
    certificate, a sparse 8 GB large object): the process and its HTTPS port, whose
    configuration is https://127.0.0.1:PORT/.well-known/nq. Stop it with SIGTERM."""
    import json

    from simpleperf.responsiveness.tls import self_signed

    port, port2 = free_port(), free_port()
    os.chmod(folder, 0o755)  # nginx's workers run as its unprivileged user: they read here
    for sub in ("logs", "tmp", "root/files"):
        os.makedirs(os.path.join(folder, sub), exist_ok=True)
    cert, key = self_signed(["127.0.0.1"])
    files = {"cert.pem": cert, "key.pem": key, "root/files/small": b"x"}
    base = f"https://127.0.0.1:{port}"
    files["root/config"] = json.dumps({"version": 1, "urls": {
        "small_download_url": base + "/files/small",
        "large_download_url": base + "/files/large",
        "upload_url": base + "/slurp"}}).encode()
    for name, data in files.items():
        with open(os.path.join(folder, name), "wb") as handle:
            handle.write(data)
    with open(os.path.join(folder, "root/files/large"), "wb") as large:
        large.truncate(8 * 10**9)  # sparse
    with open(NGINX_CONF) as template:
        conf = template.read().replace("@DIR@", folder).replace(
            "@PORT2@", str(port2)).replace("@PORT@", str(port))
    with open(os.path.join(folder, "nginx.conf"), "w") as handle:
        handle.write(conf)
    process = subprocess.Popen(["nginx", "-c", os.path.join(folder, "nginx.conf"), "-p",
                                folder, "-g", "daemon off;"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    if not listening(port):
        process.kill()
        process.wait(10)
        raise AssertionError(f"nginx did not listen on {port}: {folder}/logs/error.log")
    return process, port
