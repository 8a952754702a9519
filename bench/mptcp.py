#!/usr/bin/env python3
"""One MPTCP connection over both of campus's paths (a lab flow's mptcp = true) against the
sum of what one TCP connection carries on each path alone, measured in the same run, and
against theory's sum of the paths' shares. Needs root and FRR.

Each round: TCP h1 -> h4 on r2's path (100 Mbit/s), MPTCP over it and the backup link
(the lab's steering, run/multipath.py), then TCP with C2 down, so routing takes the backup
(50 Mbit/s); medians over the rounds.

    sudo python3 bench/mptcp.py [--seconds 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from simpleperf.lab.model import flows, theory, topology
from simpleperf.lab.model.outcomes import FlowOutcome
from simpleperf.lab.net.routing import tables
from simpleperf.lab.run import multipath

LAB = [sys.executable, "-m", "simpleperf", "lab"]
SERVER, PORT = "10.10.2.11", "5201"


def goodput(seconds: float, mptcp: bool) -> tuple[float, int | None]:
    """Receiver goodput (Mbit/s) and the subflows of one test from h1 to h4."""
    done = subprocess.run(["ip", "netns", "exec", "h1", sys.executable, "-m", "simpleperf",
                           "-c", SERVER, "-p", PORT, "-t", str(seconds), "-J", "--native",
                           "--no-latency", *(["-m"] if mptcp else [])],
                          capture_output=True, text=True, timeout=seconds + 60)
    if done.returncode != 0:
        raise SystemExit(f"bench: the client failed: {done.stderr.strip()[-200:]}")
    end = json.loads(done.stdout)["end"]
    return (end["sum_received"]["bits_per_second"] / 1e6,
            end["streams"][0]["sender"].get("mptcp_subflows"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    subprocess.run(LAB + ["up", "campus"], check=True, stdout=subprocess.DEVNULL, timeout=300)
    server = None
    try:
        server = subprocess.Popen(["ip", "netns", "exec", "h4", sys.executable, "-m",
                                   "simpleperf", "-s", "-m", "-p", PORT],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        model = tables.routed(topology.load("campus"))
        outcome = FlowOutcome(flows.parse({"kind": "tcp", "from": "h1", "to": "h4",
                                           "mptcp": True}, "bench"), SERVER)
        theory.predict(model, [outcome], "bbr")
        paths = theory.subflow_paths(model, "h1", SERVER)
        first, second, both, subflows = [], [], [], set()
        for _ in range(args.rounds):
            first.append(goodput(args.seconds, False)[0])
            steering = multipath.steer(model, [outcome], frozenset())
            try:
                rate, count = goodput(args.seconds, True)
            finally:
                steering.restore()
            both.append(rate)
            subflows.add(count)
            subprocess.run(LAB + ["link", "C2", "down"], check=True, stdout=subprocess.DEVNULL)
            try:
                second.append(goodput(args.seconds, False)[0])
            finally:
                subprocess.run(LAB + ["link", "C2", "up"], check=True,
                               stdout=subprocess.DEVNULL)
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        subprocess.run(LAB + ["down", "campus"], check=True, stdout=subprocess.DEVNULL)
    a, b, m = (statistics.median(x) for x in (first, second, both))
    predicted = (outcome.predicted or 0) / 1e6
    print(f"campus h1 -> h4, {args.rounds} rounds of {args.seconds:g} s, medians (Mbit/s):")
    for path, rate in zip(paths, (a, b), strict=True):
        print(f"  TCP alone on {theory.path_nodes(model, 'h1', path)}: {rate:.2f} "
              f"(bottleneck {path.bottleneck / 1e6:g})")
    print(f"  sum of both paths alone: {a + b:.2f}")
    print(f"  MPTCP, one connection over both: {m:.2f} ({sorted(subflows)} subflows)")
    print(f"  MPTCP / sum of both paths: {m / (a + b):.3f}; / the first path alone: "
          f"{m / a:.3f}; / theory ({predicted:.2f}): {m / predicted:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
