#!/usr/bin/env python3
"""simpleperf's responsiveness client (-c URL --rpm: HTTP/2 and TLS) against Cloudflare's
mach (draft-ietf-ippm-responsiveness-09), measuring the same server in one run:

1. On 127.0.0.1, against Debian's nginx set up as Apple's reference server: each client's
   download and upload goodput and RPM, and its own CPU (cores) per Gbit/s of goodput.
   Ratios ours / mach's.
2. With --rates, across a lab pair link at each rate (5 ms each way, a drop-tail buffer of
   the path's BDP), against a simpleperf server: the goodput each client's load reaches as
   a share of the link's rate. The highest rate at which ours reaches 0.9 is the figure
   issue #50 asks; mach's share at the same rate says what the lab's shaper and the server
   allow.

    python3 bench/rpm_client.py [--runs 3] [--rates 100M,200M,400M]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MACH = ROOT.parent / "shared" / "tools" / "mach"
SIMPLEPERF = [sys.executable, "-m", "simpleperf"]
SECONDS = 10
sys.path.insert(0, str(ROOT / "tests"))
from helpers import free_port, nginx_nq_server  # noqa: E402


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def ours(url: str, download: bool, prefix: list[str]) -> dict[str, float]:
    before = _children_cpu()
    done = subprocess.run([*prefix, *SIMPLEPERF, "-c", url, "--rpm", "--insecure", "-J",
                           "-t", str(SECONDS), *(["-R"] if download else [])],
                          capture_output=True, text=True, timeout=120)
    cpu = _children_cpu() - before
    if done.returncode != 0:
        raise SystemExit(f"simpleperf failed: {done.stderr[-1500:]}")
    end = json.loads(done.stdout)["end"]["responsiveness"]
    return {"gbps": end["goodput"] / 1e9, "rpm": end["rpm"], "cpu": cpu}


def by_mach(url: str, prefix: list[str]) -> dict[str, dict[str, float]]:
    before = _children_cpu()
    done = subprocess.run([*prefix, str(MACH), "rpm", "--config", url, "--insecure",
                           "--disable-aim-scores", "--test-duration", str(SECONDS * 1000)],
                          capture_output=True, text=True, timeout=180)
    cpu = _children_cpu() - before
    if done.returncode != 0:
        raise SystemExit(f"mach failed: {done.stderr[-1500:]}")
    result = json.loads(done.stdout)
    return {way: {"gbps": result[way]["throughput"] / 1e9, "rpm": result[way]["rpm"],
                  "cpu": cpu / 2} for way in ("download", "upload")}


def loopback(runs: int) -> None:
    rows: dict[tuple[str, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="rpm-client-bench-") as folder:
        process, port = nginx_nq_server(folder)
        url = f"https://127.0.0.1:{port}/.well-known/nq"
        try:
            for _ in range(runs):
                for way, download in (("download", True), ("upload", False)):
                    rows.setdefault(("simpleperf", way), []).append(ours(url, download, []))
                for way, found in by_mach(url, []).items():
                    rows.setdefault(("mach", way), []).append(found)
        finally:
            process.terminate()
            process.wait(20)
    print(f"Against nginx as Apple's server on 127.0.0.1, {SECONDS} s a direction, medians "
          f"of {runs} runs")
    print(f"{'direction':10} {'figure':14} {'simpleperf':>11} {'mach':>11} {'ratio':>7}")
    for way in ("download", "upload"):
        for key, name in (("gbps", "Gbit/s"), ("rpm", "RPM"), ("cpu_per_gbps",
                                                               "CPU per Gbit/s")):
            mine, theirs = (statistics.median(
                run["cpu"] / SECONDS / run["gbps"] if key == "cpu_per_gbps" else run[key]
                for run in rows[(who, way)]) for who in ("simpleperf", "mach"))
            print(f"{way:10} {name:14} {mine:11.3f} {theirs:11.3f} {mine / theirs:7.3f}")


def _lab(*args: str) -> None:
    subprocess.run([*SIMPLEPERF, "lab", *args], check=True, capture_output=True, text=True,
                   timeout=120)


def link_rates(rates: list[str], runs: int) -> None:
    """Each rate's share (the draft's final goodput, the moving average of its last 4
    intervals, over the link's rate), the median of `runs`; then the highest rate at which
    ours holds 0.9 at it and at every lower rate measured."""
    print(f"\nAcross a lab pair link (5 ms each way, drop-tail of one BDP), a simpleperf "
          f"server with CUBIC, download, {SECONDS} s: goodput as a share of the link, "
          f"medians of {runs}")
    print(f"{'rate':>6} {'simpleperf':>11} {'mach':>8}   runs (simpleperf / mach)")
    held, below = None, True  # the highest rate held so far; every lower one held
    for rate in rates:
        shares = [_link_share(rate) for _ in range(runs)]
        mine = statistics.median(share[0] for share in shares)
        theirs = statistics.median(share[1] for share in shares)
        each = ", ".join(f"{a:.2f}/{b:.2f}" for a, b in shares)
        print(f"{rate:>6} {mine:11.3f} {theirs:8.3f}   {each}", flush=True)
        below = below and mine >= 0.9
        held = rate if below else held
    print(f"highest rate held at 0.9 x (and every lower one): {held or 'none'}")


def _link_share(rate: str) -> tuple[float, float]:
    """Ours and mach's download goodput as a share of a fresh pair link at `rate`."""
    from simpleperf.units import parse_rate

    bits = parse_rate(rate)
    queue = max(50, int(bits * 0.010 / (1514 * 8)))
    _lab("up", "pair", "--rate", rate, "--delay", "5ms", "--queue", str(queue))
    port = free_port()
    # ip netns exec runs the server itself: the pid ended below is the server's
    server = subprocess.Popen(["ip", "netns", "exec", "h2", *SIMPLEPERF, "-s", "-p",
                               str(port), "-C", "cubic"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        in_h1 = ["ip", "netns", "exec", "h1"]
        url = f"https://10.0.0.2:{port}/.well-known/nq"
        subprocess.run([*in_h1, "sh", "-c", f"for i in $(seq 100); do "
                        f"python3 -c 'import socket; socket.create_connection("
                        f"(\"10.0.0.2\", {port}), 1)' 2>/dev/null && break; sleep 0.1; "
                        "done"], check=False, timeout=30)
        mine = ours(url, True, in_h1)["gbps"] * 1e9 / bits
        theirs = by_mach(url, in_h1)["download"]["gbps"] * 1e9 / bits
    finally:
        server.terminate()
        server.wait(20)
        _lab("down", "pair")
    return mine, theirs


def main() -> None:
    global SECONDS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rates", default="", help="lab link rates, e.g. 100M,200M,400M")
    parser.add_argument("--link-runs", type=int, default=3, help="runs a rate (medians)")
    parser.add_argument("--seconds", type=int, default=SECONDS, help="each client's test")
    args = parser.parse_args()
    SECONDS = args.seconds
    if not os.access(MACH, os.X_OK):
        raise SystemExit(f"mach is not at {MACH}")
    if args.runs:
        loopback(args.runs)
    if args.rates:
        link_rates(args.rates.split(","), args.link_runs)


if __name__ == "__main__":
    main()
