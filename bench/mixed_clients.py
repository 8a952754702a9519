#!/usr/bin/env python3
"""Four kinds of client on one simpleperf server at once (classic, native, iperf3 3.12's and
iperf2 2.1.8's, TCP): each one's goodput alone, then all four together, on 127.0.0.1. The
server tells them apart by their first bytes (protocol/detect.py); none may be taken for
another or starve: each prints its goodput together against alone, and its share of the sum
(an even share is 0.25).

    python3 bench/mixed_clients.py [--seconds 4] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import statistics
import subprocess
import sys
import threading
import time

SIMPLEPERF = [sys.executable, "-m", "simpleperf"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def clients(port: int, seconds: float) -> dict[str, list[str]]:
    target = ["-p", str(port), "-t", f"{seconds:g}"]
    return {"classic": SIMPLEPERF + ["-c", "-I", "127.0.0.1", *target, "-f", "MB"],
            "native": SIMPLEPERF + ["-c", "127.0.0.1", *target, "-J", "--native",
                                    "--no-latency"],
            "iperf3": ["iperf3", "-c", "127.0.0.1", *target, "-J"],
            "iperf2": ["iperf", "-c", "127.0.0.1", *target, "-y", "C"]}


def goodput(kind: str, output: str, seconds: float) -> float:
    """Mbit/s from each client's own output."""
    if kind in ("native", "iperf3"):
        return json.loads(output)["end"]["sum_received"]["bits_per_second"] / 1e6
    if kind == "iperf2":
        row = [line for line in output.splitlines() if line.count(",") >= 8][-1].split(",")
        return int(row[8]) / 1e6
    megabytes = float(re.findall(r"([\d.]+) MB", output)[-1])
    return megabytes * 8 / seconds


def run(commands: dict[str, list[str]], seconds: float) -> dict[str, float]:
    results: dict[str, float] = {}

    def one(kind: str) -> None:
        done = subprocess.run(commands[kind], capture_output=True, text=True, timeout=120)
        results[kind] = goodput(kind, done.stdout, seconds) if done.returncode == 0 else 0.0

    threads = [threading.Thread(target=one, args=(kind,)) for kind in commands]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    port = free_port()
    server = subprocess.Popen(SIMPLEPERF + ["-s", "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.5)
        commands = clients(port, args.seconds)
        alone: dict[str, list[float]] = {kind: [] for kind in commands}
        together: dict[str, list[float]] = {kind: [] for kind in commands}
        for run_number in range(args.runs):
            for kind in commands:
                alone[kind] += run({kind: commands[kind]}, args.seconds).values()
            for kind, rate in run(commands, args.seconds).items():
                together[kind].append(rate)
            print(f"  run {run_number + 1}: " + ", ".join(
                f"{kind} {together[kind][-1]:.0f}/{alone[kind][-1]:.0f}" for kind in commands)
                + " Mbit/s (together/alone)", flush=True)
        total = sum(statistics.median(together[kind]) for kind in commands)
        for kind in commands:
            both, solo = statistics.median(together[kind]), statistics.median(alone[kind])
            print(f"{kind:8s} together {both:9.1f} Mbit/s, alone {solo:9.1f}: "
                  f"{both / solo if solo else 0:.3f} of alone, {both / total:.2f} of the sum",
                  flush=True)
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
