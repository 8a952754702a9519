#!/usr/bin/env python3
"""A topology exported to containerlab and brought up again (`lab up NAME.clab.yml`) against
the topology itself, in the same run (needs root and FRR): for every host pair, the path
along the routes the daemons installed, theory's base RTT, and ping's median RTT in each.
Prints both RTTs, their difference (goal: under 1 ms) and whether path and theory agree,
then the time `lab up` took for each.

    sudo python3 bench/containerlab_roundtrip.py [--topologies portfolio-ospf,wan,campus]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from simpleperf.lab.containerlab import export, load
from simpleperf.lab.model import theory, topology
from simpleperf.lab.net.routing import tables

SIMPLEPERF = [sys.executable, "-m", "simpleperf", "lab"]
PINGS = 20


def measured(spec: str, model: topology.Topology) -> tuple[dict, float]:
    began = time.monotonic()
    subprocess.run(SIMPLEPERF + ["up", spec], check=True, stdout=subprocess.DEVNULL,
                   timeout=300)
    took = time.monotonic() - began
    try:
        nodes = [n.name for n in model.nodes.values() if n.kind != "switch"]
        routed = tables.installed(model, tables.read(nodes))
        found = {}
        hosts = model.hosts()
        for source in hosts:
            for target in hosts:
                if source == target:
                    continue
                path = theory.path(routed, source, target)
                done = subprocess.run(["ip", "netns", "exec", source, "ping", "-n", "-q", "-c",
                                       str(PINGS), "-i", "0.01", "-W", "2",
                                       str(model.address_of(target))],
                                      capture_output=True, text=True, timeout=60)
                rtts = [float(x) for x in re.findall(r"= ([\d.]+)/", done.stdout)]
                found[(source, target)] = ([(link.name, node) for link, node in path.hops],
                                           theory.base_rtt(routed, source, target),
                                           rtts[0] if rtts else float("nan"))
        return found, took
    finally:
        subprocess.run(SIMPLEPERF + ["down", model.name], check=True,
                       stdout=subprocess.DEVNULL, timeout=300)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topologies", default="portfolio-ospf,wan,campus")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench: needs root (network namespaces)", file=sys.stderr)
        return 1
    for name in args.topologies.split(","):
        model = topology.load(name)
        with tempfile.TemporaryDirectory() as folder:
            export.write(export.containerlab(model), Path(folder))
            path = Path(folder) / f"{model.name}.clab.yml"
            back, _ = load.load(str(path))
            original, up_original = measured(name, model)
            again, up_again = measured(str(path), back)
        differences = []
        print(f"{name}: {'pair':<10} {'theory ms':>9} {'RTT ms':>8} {'exported':>8} "
              f"{'diff':>6}  same path")
        for pair, (hops, rtt_theory, rtt) in original.items():
            hops_again, theory_again, rtt_again = again[pair]
            differences.append(abs(rtt_again - rtt))
            print(f"{'':{len(name) + 2}}{'->'.join(pair):<10} {rtt_theory * 1e3:9.2f} "
                  f"{rtt:8.3f} {rtt_again:8.3f} {rtt_again - rtt:+6.3f}  "
                  f"{'yes' if hops_again == hops and theory_again == rtt_theory else 'NO'}")
        print(f"{'':{len(name) + 2}}largest |diff| {max(differences):.3f} ms, median "
              f"{statistics.median(differences):.3f} ms over {len(differences)} pairs; "
              f"lab up {up_original:.1f} s, of the export {up_again:.1f} s "
              f"({up_again / up_original:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
