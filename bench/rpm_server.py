#!/usr/bin/env python3
"""Our responsiveness endpoints against nginx set up as Apple's reference server, each
measured by Cloudflare's mach (draft-ietf-ippm-responsiveness-09, over HTTP/2 with TLS) on
127.0.0.1, alternately in one run:

- mach's figures for each server: download and upload goodput, loaded latency, RPM;
- the server's CPU for the load it carried: its processes' CPU seconds over the run per
  second, per Gbit/s of goodput mach saw (download and upload together). Target: ours
  within a small multiple of nginx's (a C server with sendfile; ours is Python with h2);
- the ratio of each figure, ours / nginx's.

nginx is Debian's, with ../shared/reference/network-quality/nginx-local.conf (Apple's
configuration cut to one machine): a self-signed certificate, a sparse 8 GB large file.

    python3 bench/rpm_server.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
MACH = SHARED / "tools" / "mach"
SIMPLEPERF = [sys.executable, "-m", "simpleperf"]
sys.path.insert(0, str(ROOT / "tests"))
from helpers import nginx_nq_server  # noqa: E402  (the tests' nginx, set up as Apple's)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def listening(port: int) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not subprocess.run(
            ["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True).stdout:
        time.sleep(0.05)


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU of these processes and their threads, in seconds."""
    total = 0
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / tick


def children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(word) for word in found.split()]


def nginx_server(folder: Path) -> tuple[subprocess.Popen, int, list[int]]:
    """nginx as Apple's server, cut to one machine (the reference's own file)."""
    process, port = nginx_nq_server(str(folder))
    return process, port, [process.pid, *children(process.pid)]


def ours() -> tuple[subprocess.Popen, int, list[int]]:
    port = free_port()
    process = subprocess.Popen([*SIMPLEPERF, "-s", "-p", str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    listening(port)
    return process, port, [process.pid]


def measure(port: int, pids: list[int]) -> dict[str, float]:
    before, began = cpu_seconds(pids), time.monotonic()
    done = subprocess.run([str(MACH), "rpm", "--config",
                           f"https://127.0.0.1:{port}/.well-known/nq", "--insecure",
                           "--disable-aim-scores"],
                          capture_output=True, text=True, timeout=180)
    seconds, cpu = time.monotonic() - began, cpu_seconds(pids) - before
    if done.returncode != 0:
        raise SystemExit(f"mach failed at port {port}: {done.stderr[-1500:]}")
    result = json.loads(done.stdout)
    gbits = (result["download"]["throughput"] + result["upload"]["throughput"]) / 1e9
    errors = done.stderr.count("ERROR")
    return {"download_gbps": result["download"]["throughput"] / 1e9,
            "upload_gbps": result["upload"]["throughput"] / 1e9,
            "download_rpm": result["download"]["rpm"], "upload_rpm": result["upload"]["rpm"],
            "cpu_per_gbps": (cpu / seconds) / gbits if gbits else float("nan"),
            "mach_errors": errors}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"simpleperf": [], "nginx": []}
    with tempfile.TemporaryDirectory(prefix="rpm-bench-") as folder:
        servers = {"simpleperf": ours()}
        try:
            servers["nginx"] = nginx_server(Path(folder))
            for _ in range(args.runs):
                for name, (_, port, pids) in servers.items():
                    results[name].append(measure(port, pids))
        finally:
            for process, _, _ in servers.values():
                process.terminate()
                process.wait(10)
    keys = list(results["simpleperf"][0])
    print(f"mach against each server on 127.0.0.1, medians of {args.runs} runs each")
    print(f"{'figure':16} {'simpleperf':>12} {'nginx':>12} {'ratio':>8}")
    for key in keys:
        mine = statistics.median(run[key] for run in results["simpleperf"])
        theirs = statistics.median(run[key] for run in results["nginx"])
        ratio = mine / theirs if theirs else float("nan")
        print(f"{key:16} {mine:12.3f} {theirs:12.3f} {ratio:8.3f}")


if __name__ == "__main__":
    main()
