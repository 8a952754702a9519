#!/usr/bin/env python3
"""A fresh server's first test against its second, on 127.0.0.1, beside iperf3's server.

Each round starts a new server, runs two TCP tests of --seconds one after the other and
prints the receiver's rate of each and their ratio; the same with iperf3's own server and
client in the same round (the reference: its first test runs at its later tests' speed).
Target: simpleperf's first test / its second >= 0.9 (median over the rounds).

    python3 bench/first_test.py [--rounds 5] [--seconds 3] [--iperf3 PATH] [--client classic|native]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time

SIMPLEPERF = [sys.executable, "-m", "simpleperf"]
PORT = 5290


def wait_listening(port: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not subprocess.run(
            ["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True).stdout:
        time.sleep(0.05)


def simpleperf_rate(client: str, seconds: float) -> float:
    """Gbit/s of one test: the classic client's own row, or the native receiver's."""
    if client == "classic":
        done = subprocess.run(SIMPLEPERF + ["-c", "-p", str(PORT), "-t", str(seconds)],
                              check=True, capture_output=True, text=True)
        return float(re.findall(r"([\d.]+) Mbps", done.stdout)[-1]) / 1e3
    done = subprocess.run(SIMPLEPERF + ["-c", "-p", str(PORT), "--native", "-J", "--no-latency",
                                        "-t", str(seconds)], check=True, capture_output=True,
                          text=True)
    return json.loads(done.stdout)["end"]["sum_received"]["bits_per_second"] / 1e9


def iperf3_rate(binary: str, seconds: float) -> float:
    done = subprocess.run([binary, "-c", "127.0.0.1", "-p", str(PORT), "-J", "-t", str(seconds)],
                          check=True, capture_output=True, text=True)
    return json.loads(done.stdout)["end"]["sum_received"]["bits_per_second"] / 1e9


def two_tests(server: list[str], test) -> tuple[float, float]:
    process = subprocess.Popen(server, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(PORT)
        return test(), test()
    finally:
        process.terminate()
        process.wait(10)
        time.sleep(0.3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--iperf3", default="iperf3", help="the reference iperf3 binary")
    parser.add_argument("--client", choices=("classic", "native"), default="classic")
    args = parser.parse_args()
    ours, theirs = [], []
    print(f"{'round':<6}{'simpleperf 1st':>15}{'2nd':>8}{'ratio':>8}   "
          f"{'iperf3 1st':>11}{'2nd':>8}{'ratio':>8}   (Gbit/s received)")
    for round_number in range(1, args.rounds + 1):
        mine = two_tests(SIMPLEPERF + ["-s", "-p", str(PORT)],
                         lambda: simpleperf_rate(args.client, args.seconds))
        other = two_tests([args.iperf3, "-s", "-p", str(PORT)],
                          lambda: iperf3_rate(args.iperf3, args.seconds))
        ours.append(mine[0] / mine[1])
        theirs.append(other[0] / other[1])
        print(f"{round_number:<6}{mine[0]:>15.2f}{mine[1]:>8.2f}{ours[-1]:>8.3f}   "
              f"{other[0]:>11.2f}{other[1]:>8.2f}{theirs[-1]:>8.3f}")
    print(f"median first/second: simpleperf {statistics.median(ours):.3f} (target >= 0.9), "
          f"iperf3 {statistics.median(theirs):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
