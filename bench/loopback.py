#!/usr/bin/env python3
"""TCP throughput on 127.0.0.1: simpleperf against iperf3, measured alternately in one run.

Prints the receiver-side throughput of every run, the medians and the ratio
simpleperf / iperf3 for a single stream and for 4 parallel streams (the classic client,
rates from the server's rows), and for one stream with zero copy (-Z on both; native client,
its JSON) (target: >= 0.95 each; #17 asks >= 1.0 against iperf3 3.21).

    python3 bench/loopback.py [--runs 5] [--seconds 5] [--iperf3 PATH] [--only P1|P4|Z]
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

from cpu_meter import CpuMeter

SIMPLEPERF = [sys.executable, "-m", "simpleperf"]
ROW = re.compile(r"^\S+:\d+\s+[\d.]+ - [\d.]+\s+\d+ B\s+([\d.]+) Mbps", re.M)


def server_rates(server_log: str) -> list[str]:
    with open(server_log) as log:
        return ROW.findall(log.read())


def simpleperf_zerocopy_run(port: int, seconds: float) -> float:
    done = subprocess.run(SIMPLEPERF + ["-c", "-p", str(port), "-t", str(seconds), "-Z", "-J",
                                        "--no-latency"], check=True, capture_output=True,
                          text=True)
    return json.loads(done.stdout)["end"]["sum_received"]["bits_per_second"]


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


def iperf3_run(binary: str, port: int, seconds: float, *options: str) -> float:
    done = subprocess.run([binary, "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds),
                           "-J", *options], check=True, capture_output=True, text=True)
    return json.loads(done.stdout)["end"]["sum_received"]["bits_per_second"]


def _cost(samples: list[tuple[float, float]]) -> str:
    client = statistics.median(c for c, _ in samples)
    server = statistics.median(s for _, s in samples)
    return f"{client:.3f} + {server:.3f} = {client + server:.3f}"


CASES = {"P1": ("one stream", 1, ()), "P4": ("four streams", 4, ("-P", "4")),
         "Z": ("one stream, -Z", 1, ("-Z",))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--port", type=int, default=15201)
    parser.add_argument("--iperf3", default="iperf3", help="the reference iperf3 binary")
    parser.add_argument("--only", choices=tuple(CASES), action="append")
    args = parser.parse_args()
    if not shutil.which(args.iperf3):
        print(f"bench: {args.iperf3} is not installed (apt-get install iperf3)", file=sys.stderr)
        return 1
    version = subprocess.run([args.iperf3, "--version"], capture_output=True, text=True
                             ).stdout.split("(")[0].strip()
    print(f"reference: {version}")
    log = f"/tmp/simpleperf-bench-{os.getpid()}.log"
    with open(log, "w") as server_output:
        servers = [
            subprocess.Popen([args.iperf3, "-s", "-p", str(args.port)],
                             stdout=subprocess.DEVNULL),
            subprocess.Popen(SIMPLEPERF + ["-s", "-p", str(args.port + 1), "-f", "B"],
                             stdout=server_output),
        ]
    time.sleep(1)
    failed = False
    try:
        for case in args.only or list(CASES):
            name, streams, options = CASES[case]
            ours, theirs, our_cpu, their_cpu = [], [], [], []
            for run in range(args.runs):
                # Alternate which tool goes first so drift on a shared machine hits both alike.
                order = ("simpleperf", "iperf3") if run % 2 == 0 else ("iperf3", "simpleperf")
                for tool in order:
                    with CpuMeter(servers[1 if tool == "simpleperf" else 0].pid) as meter:
                        if tool == "iperf3":
                            rate = iperf3_run(args.iperf3, args.port, args.seconds, *options)
                        elif case == "Z":
                            rate = simpleperf_zerocopy_run(args.port + 1, args.seconds)
                        else:
                            rate = simpleperf_run(args.port + 1, log, args.seconds, streams)
                    (ours if tool == "simpleperf" else theirs).append(rate)
                    (our_cpu if tool == "simpleperf" else their_cpu).append(
                        meter.per_gb(rate * args.seconds / 8))
                print(f"{name} run {run + 1}: simpleperf {ours[-1] / 1e9:6.2f} Gbit/s   "
                      f"iperf3 {theirs[-1] / 1e9:6.2f} Gbit/s", flush=True)
            ratio = statistics.median(ours) / statistics.median(theirs)
            verdict = "ok" if ratio >= 0.95 else "BELOW TARGET 0.95"
            failed |= ratio < 0.95
            print(f"{name} median: simpleperf {statistics.median(ours) / 1e9:.2f} Gbit/s, "
                  f"iperf3 {statistics.median(theirs) / 1e9:.2f} Gbit/s, "
                  f"ratio {ratio:.3f} ({verdict})", flush=True)
            print(f"{name} CPU seconds per GB, client + server (medians): simpleperf "
                  f"{_cost(our_cpu)}, iperf3 {_cost(their_cpu)}", flush=True)
    finally:
        for server in servers:
            server.send_signal(signal.SIGINT)
            server.wait(5)
        os.unlink(log)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
