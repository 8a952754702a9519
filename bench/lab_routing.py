#!/usr/bin/env python3
"""Routed labs on this machine (needs root and FRR): how fast they come up and converge, how
fast they go down, and how long traffic stops when a link fails.

  - `lab up` of wan (5 routers, BGP and OSPF) and of a generated grid of 30 OSPF routers:
    the whole command, the daemons' start and routing's convergence apart; `lab down`;
    beside the static portfolio's up and down, measured in the same run (the namespaces,
    links and shapers alone);
  - failover on wan: the direct peering P13 fails and returns FAILOVERS times while h1 pings
    h3 every 10 ms; the outage (the silence in the replies) of every failure and return.

Targets (issue: routed networks): wan converged under 5 s, down under 1 s; outage under 1 s.

    python3 bench/lab_routing.py [--runs N] [--failovers N] [--grid ROWSxCOLUMNS]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from simpleperf.lab.analysis import events

SIMPLEPERF = [sys.executable, "-m", "simpleperf"]
UP_LINE = re.compile(r"FRR daemons started on (\d+) routers in ([\d.]+) s; converged "
                     r"([\d.]+) s later")
PROBE_INTERVAL = 0.01


def lab(*args: str) -> tuple[float, str]:
    began = time.monotonic()
    done = subprocess.run(SIMPLEPERF + ["lab", *args], capture_output=True, text=True,
                          timeout=300)
    took = time.monotonic() - began
    if done.returncode != 0:
        sys.exit(f"lab {' '.join(args)} failed: {done.stderr.strip()}")
    return took, done.stdout


def grid(rows: int, columns: int) -> str:
    """rows x columns OSPF routers, each joined to its right and lower neighbours by an
    unshaped link; h1 behind the first router, h2 behind the last."""
    routers = [f"r{n}" for n in range(1, rows * columns + 1)]
    lines = ['name = "grid"', 'description = "a generated OSPF grid"', 'routing = "ospf"',
             "[hosts]", "h1 = {}", "h2 = {}", "[routers]", *(f"{r} = {{}}" for r in routers)]
    lines += ["[[links]]", 'a = "h1"', 'a_address = "10.200.0.2/24"', 'b = "r1"',
              'b_address = "10.200.0.1/24"', "[[links]]", 'a = "h2"',
              'a_address = "10.200.1.2/24"', f'b = "{routers[-1]}"', 'b_address = "10.200.1.1/24"']
    number = 0
    for row in range(rows):
        for column in range(columns):
            here = routers[row * columns + column]
            for down, right in ((0, 1), (1, 0)):
                if row + down < rows and column + right < columns:
                    there = routers[(row + down) * columns + column + right]
                    base = f"10.201.{number // 64}.{(number % 64) * 4}"
                    number += 1
                    prefix = base.rsplit(".", 1)[0]
                    last = int(base.rsplit(".", 1)[1])
                    lines += ["[[links]]", f'a = "{here}"', f'a_address = "{prefix}.{last + 1}/30"',
                              f'b = "{there}"', f'b_address = "{prefix}.{last + 2}/30"']
    return "\n".join(lines) + "\n"


def up_down(target: str, name: str, runs: int) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {"up": [], "daemons": [], "converged": [], "down": []}
    for _ in range(runs):
        took, out = lab("up", target)
        figures["up"].append(took)
        match = UP_LINE.search(out)
        if match:
            figures["daemons"].append(float(match.group(2)))
            figures["converged"].append(float(match.group(3)))
        figures["down"].append(lab("down", name)[0])
    return figures


def line(what: str, values: list[float], target: float | None = None,
         reference: list[float] | None = None) -> str:
    if not values:
        return f"  {what:<34} -"
    median = statistics.median(values)
    text = (f"  {what:<34} median {median:6.2f} s  (min {min(values):.2f}, max "
            f"{max(values):.2f}, n={len(values)})")
    if reference:
        text += f"  {median / statistics.median(reference):.2f} x static portfolio"
    if target is not None:
        text += f"  target < {target:g} s: {'ok' if median < target else 'MISS'}"
    return text


def failovers(count: int) -> tuple[list[float | None], list[float | None]]:
    """P13 down and up `count` times on a running wan, h1 pinging h3 every 10 ms."""
    lab("up", "wan")
    pinger = subprocess.Popen(["ip", "netns", "exec", "h1", "ping", "-n", "-D", "-i",
                               f"{PROBE_INTERVAL:g}", "-W", "1", "10.3.1.11"],
                              stdout=subprocess.PIPE, text=True)
    replies: list[float] = []
    reader = threading.Thread(target=lambda: replies.extend(
        float(m.group(1)) for m in (re.match(r"^\[(\d+\.\d+)\] \d+ bytes", text)
                                    for text in pinger.stdout or []) if m), daemon=True)
    reader.start()
    moments = []
    try:
        time.sleep(2)
        for _ in range(count):
            for action in ("down", "up"):
                began = time.time()
                lab("link", "P13", action)
                moments.append((action, began, time.time()))
                time.sleep(3)
    finally:
        pinger.terminate()
        pinger.wait()
        reader.join(timeout=5)
        lab("down", "wan")
    outages: dict[str, list[float | None]] = {"down": [], "up": []}
    for index, (action, began, _) in enumerate(moments):
        until = moments[index + 1][1] if index + 1 < len(moments) else began + 3
        outages[action].append(events.outage(replies, began, until, PROBE_INTERVAL))
    return outages["down"], outages["up"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--failovers", type=int, default=5)
    parser.add_argument("--grid", default="5x6", help="ROWSxCOLUMNS routers (default 5x6)")
    args = parser.parse_args()
    rows, columns = (int(n) for n in args.grid.split("x"))
    static = up_down("portfolio", "portfolio", args.runs)
    wan = up_down("wan", "wan", args.runs)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "grid.toml"
        path.write_text(grid(rows, columns))
        meshed = up_down(str(path), "grid", max(1, args.runs // 2))
    print("lab up and down (whole commands; daemons and convergence as `lab up` reports them)")
    print(line("static portfolio: up", static["up"]))
    print(line("static portfolio: down", static["down"]))
    print(line("wan (5 routers, BGP+OSPF): up", wan["up"], reference=static["up"]))
    print(line("wan: daemons started", wan["daemons"]))
    print(line("wan: converged after the daemons", wan["converged"], target=5.0))
    print(line("wan: down", wan["down"], target=1.0, reference=static["down"]))
    print(line(f"grid ({rows * columns} OSPF routers): up", meshed["up"],
               reference=static["up"]))
    print(line("grid: daemons started", meshed["daemons"]))
    print(line("grid: converged after the daemons", meshed["converged"]))
    print(line("grid: down", meshed["down"], target=1.0, reference=static["down"]))
    down, up = failovers(args.failovers)
    print(f"failover on wan: P13 fails and returns {args.failovers} times, h1 pings h3 every "
          f"{PROBE_INTERVAL * 1e3:.0f} ms (link down = carrier lost at both ends)")
    for what, values in (("outage when P13 fails", down), ("outage when P13 returns", up)):
        seen = [v for v in values if v is not None]
        shown = ", ".join("none back" if v is None else f"{v * 1e3:.0f}" for v in values)
        verdict = ("ok" if seen and len(seen) == len(values) and max(seen) < 1.0 else "MISS")
        print(f"  {what:<34} {shown} ms  target < 1 s each: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
