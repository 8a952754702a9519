#!/usr/bin/env python3
"""TCP throughput on 127.0.0.1: simpleperf against iperf3, measured alternately in one run.

Prints the receiver-side throughput of every run, the medians and the ratio
simpleperf / iperf3 for a single stream and for 4 parallel streams (target: >= 0.95).

    python3 bench/loopback.py [--runs 5] [--seconds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

SIMPLEPERF = [sys.executable, "-m", "simpleperf"]
ROW = re.compile(r"^\S+:\d+\s+[\d.]+ - [\d.]+\s+\d+ B\s+([\d.]+) Mbps", re.M)


def server_rates(server_log: str) -> list[str]:
    with open(server_log) as log:
        return ROW.findall(log.read())


def simpleperf_run(port: int, server_log: str, seconds: float, streams: int) -> float:
    before = len(server_rates(server_log))
    subprocess.run(SIMPLEPERF + ["-c", "-p", str(port), "-t", str(seconds), "-P", str(streams)],
                   check=True, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        rates = server_rates(server_log)[before:]
        if len(rates) == streams:
            return sum(float(rate) for rate in rates) * 1e6
        time.sleep(0.05)
    raise RuntimeError("simpleperf server did not report every stream")


def iperf3_run(port: int, seconds: float, streams: int) -> float:
    done = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds),
                           "-P", str(streams), "-J"], check=True, capture_output=True, text=True)
    return json.loads(done.stdout)["end"]["sum_received"]["bits_per_second"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--port", type=int, default=15201)
    args = parser.parse_args()
    if not shutil.which("iperf3"):
        print("bench: iperf3 is not installed (apt-get install iperf3)", file=sys.stderr)
        return 1
    log = f"/tmp/simpleperf-bench-{os.getpid()}.log"
    with open(log, "w") as server_output:
        servers = [
            subprocess.Popen(["iperf3", "-s", "-p", str(args.port)], stdout=subprocess.DEVNULL),
            subprocess.Popen(SIMPLEPERF + ["-s", "-p", str(args.port + 1), "-f", "B"],
                             stdout=server_output),
        ]
    time.sleep(1)
    failed = False
    try:
        for streams in (1, 4):
            ours, theirs = [], []
            for run in range(args.runs):
                # Alternate which tool goes first so drift on a shared machine hits both alike.
                order = ("simpleperf", "iperf3") if run % 2 == 0 else ("iperf3", "simpleperf")
                for tool in order:
                    if tool == "simpleperf":
                        ours.append(simpleperf_run(args.port + 1, log, args.seconds, streams))
                    else:
                        theirs.append(iperf3_run(args.port, args.seconds, streams))
                print(f"P={streams} run {run + 1}: simpleperf {ours[-1] / 1e9:6.2f} Gbit/s   "
                      f"iperf3 {theirs[-1] / 1e9:6.2f} Gbit/s", flush=True)
            ratio = statistics.median(ours) / statistics.median(theirs)
            verdict = "ok" if ratio >= 0.95 else "BELOW TARGET 0.95"
            failed |= ratio < 0.95
            print(f"P={streams} median: simpleperf {statistics.median(ours) / 1e9:.2f} Gbit/s, "
                  f"iperf3 {statistics.median(theirs) / 1e9:.2f} Gbit/s, "
                  f"ratio {ratio:.3f} ({verdict})", flush=True)
    finally:
        for server in servers:
            server.send_signal(signal.SIGINT)
            server.wait(5)
        os.unlink(log)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
