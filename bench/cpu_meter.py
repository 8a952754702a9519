"""Both ends' CPU for a benchmark run, as the kernel counts it: the client's from the
rusage of waited-for children, a long-running server's from /proc. Reported as CPU seconds
per GB moved, so tools running at different rates compare (#17's cost target). Beside it,
what the benches share: the kernel's count of UDP datagrams dropped at full sockets, and a
busy core on demand."""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import sys


def process_cpu(pid: int) -> float:
    """User plus system seconds a running process (all its threads) has used."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class CpuMeter:
    """with CpuMeter(server_pid) as meter: run one client to its end; then meter.client and
    meter.server hold the seconds each end used meanwhile."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid
        self.client = self.server = 0.0

    def __enter__(self) -> CpuMeter:
        self._client, self._server = children_cpu(), process_cpu(self.server_pid)
        return self

    def __exit__(self, *_: object) -> None:
        self.client = children_cpu() - self._client
        self.server = process_cpu(self.server_pid) - self._server

    def per_gb(self, moved_bytes: float) -> tuple[float, float]:
        """(client, server) CPU seconds per 10^9 bytes moved."""
        gigabytes = max(moved_bytes, 1.0) / 1e9
        return self.client / gigabytes, self.server / gigabytes


@contextlib.contextmanager
def busy_cpu(wanted: bool):
    """While inside: a process of ours spinning on CPU 0 (the machine's other work)."""
    if not wanted:
        yield
        return
    spinner = subprocess.Popen([sys.executable, "-c",
                                "import os\nos.sched_setaffinity(0, {0})\nwhile True: pass"])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def socket_drops() -> int:
    """The kernel's count of UDP datagrams (or coalesced reads) dropped at full receiving
    sockets, machine-wide (/proc/net/snmp, Udp RcvbufErrors)."""
    with open("/proc/net/snmp") as snmp:
        lines = [line.split() for line in snmp if line.startswith("Udp:")]
    return int(lines[1][lines[0].index("RcvbufErrors")])
