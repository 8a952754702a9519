#!/usr/bin/env python3
"""How `lab up`, `lab status` and `lab down` grow with a lab's size (needs root): a switch
with hosts on it, at 100 and 300 nodes and at the bound (topology.MAX_NODES), each command
timed as a user runs it. Prints the seconds and the seconds per node beside the smallest
size's (1.0: linear).

    sudo python3 bench/lab_scale.py [--sizes 100,300,1000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from simpleperf.lab.model.topology import MAX_NODES

SIMPLEPERF = [sys.executable, "-m", "simpleperf", "lab"]


def topology(nodes: int) -> str:
    """`nodes` - 1 hosts on one switch, addresses in 10.20.0.0/16."""
    name = f"scale{nodes}"
    lines = [f'name = "{name}"', "[hosts]"] + [f"h{i} = {{}}" for i in range(1, nodes)]
    lines += ["[switches]", "s1 = {}"]
    for i in range(1, nodes):
        lines += ["[[links]]", f'a = "h{i}"', f'a_address = "10.20.{i // 250}.{i % 250 + 1}/16"',
                  'b = "s1"']
    return "\n".join(lines) + "\n"


def timed(*args: str) -> float:
    began = time.monotonic()
    subprocess.run(SIMPLEPERF + list(args), check=True, stdout=subprocess.DEVNULL,
                   timeout=900)
    return time.monotonic() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=f"100,300,{MAX_NODES}")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench: needs root (network namespaces)", file=sys.stderr)
        return 1
    sizes = [int(size) for size in args.sizes.split(",")]
    first: dict[str, float] = {}
    over = f"per node, over {sizes[0]}'s"
    print(f"{'nodes':>6} {'command':<8} {'seconds':>8} {over:>20}")
    with tempfile.TemporaryDirectory() as folder:
        for nodes in sizes:
            path = Path(folder) / f"scale{nodes}.toml"
            path.write_text(topology(nodes))
            try:
                seconds = {"up": timed("up", str(path)),
                           "status": timed("status", f"scale{nodes}")}
            finally:
                seconds["down"] = timed("down", f"scale{nodes}")
            for command, took in seconds.items():
                per_node = took / nodes
                first.setdefault(command, per_node)
                print(f"{nodes:>6} {command:<8} {took:>8.2f} {per_node / first[command]:>20.2f}",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
