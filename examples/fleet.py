#!/usr/bin/env python3
"""A measurement fleet in a lab, watched by Prometheus (root; FRR and Debian's prometheus).

Builds the `fleet` topology (a monitoring host `mon` at hub r0, sites A, B and C behind WAN
links of 50, 20 and 100 Mbit/s; site B's backup path runs through C at 10 Mbit/s), starts a
simpleperf server at each site (one test at a time, others queued), and on `mon` the
simpleperf exporter and Prometheus, which probes every site on a schedule. A third of the
way in, WB fails (OSPF moves site B to its backup); two thirds in, it returns. At the end the
series are read back from Prometheus' HTTP API, beside what theory says of each site's path
in each phase, into a results folder: series.csv, goodput.png and rtt.png (with matplotlib)
and the table printed here. Everything started is stopped and the lab taken down, also on
Ctrl-C.

    sudo python3 examples/fleet.py [--minutes 3] [--interval 10] [--results DIR]
    sudo python3 examples/fleet.py --quick          # 54 s, a probe every 3 s
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from simpleperf.lab.model import theory, topology
from simpleperf.lab.net.routing import tables

SIMPLEPERF = [sys.executable, "-m", "simpleperf"]
SITES = {"ha": "A", "hb": "B", "hc": "C"}
FAILING = "WB"
EXPORTER = "127.0.0.1:9788"
PROMETHEUS = "127.0.0.1:9090"
SERVER_PORT = 8088
GOODPUT = 'simpleperf_goodput_bits_per_second{direction="forward"}'
RTT_SUM = 'simpleperf_rtt_seconds_sum{load="loaded"}'
RTT_COUNT = 'simpleperf_rtt_seconds_count{load="loaded"}'
MATCH = 0.85  # a probe's goodput within this of the path's bottleneck, and not above it


def in_node(node: str, *command: str) -> list[str]:
    return ["ip", "netns", "exec", node, *command]


def lab(*args: str) -> str:
    done = subprocess.run(SIMPLEPERF + ["lab", *args], capture_output=True, text=True,
                          timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"fleet: simpleperf lab {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def paths(model: topology.Topology) -> dict[str, tuple[float, float]]:
    """Per site, the bottleneck (bits/s) and base RTT (s) of mon's path to it, along the
    routes the daemons have installed now."""
    nodes = [n.name for n in model.nodes.values() if n.kind != "switch"]
    routed = tables.installed(model, tables.read(nodes))
    found = {}
    for host in SITES:
        path = theory.path(routed, "mon", host)
        found[host] = (path.bottleneck or 0.0, theory.base_rtt(routed, "mon", host))
    return found


def samples(promql: str, start: float, end: float) -> list[dict]:
    """Every sample Prometheus stored of a series from `start` to `end`: one per probe, at
    the time it was scraped (a range vector, not a query_range's resampling)."""
    done = subprocess.run(in_node("mon", "curl", "-sf", "--get",
                                  f"http://{PROMETHEUS}/api/v1/query",
                                  "--data-urlencode", f"query={promql}[{end - start:.0f}s]",
                                  "--data-urlencode", f"time={end}"),
                          capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise SystemExit(f"fleet: Prometheus did not answer {promql}")
    return json.loads(done.stdout)["data"]["result"]


def prometheus_config(interval: float, folder: Path) -> Path:
    targets = ", ".join(f"'{topology.load('fleet').address_of(h)}:{SERVER_PORT}'"
                        for h in SITES)
    text = f"""
global: {{scrape_interval: {interval:g}s, scrape_timeout: {interval:g}s}}
scrape_configs:
  - job_name: fleet
    metrics_path: /probe
    params: {{module: [site]}}
    static_configs: [{{targets: [{targets}]}}]
    relabel_configs:
      - {{source_labels: [__address__], target_label: __param_target}}
      - {{source_labels: [__param_target], target_label: instance}}
      - {{target_label: __address__, replacement: '{EXPORTER}'}}
"""
    path = folder / "prometheus.yml"
    path.write_text(text)
    return path


def run(args: argparse.Namespace, folder: Path, results: Path) -> None:
    probe_seconds = 1.0 if args.quick else 2.0
    (folder / "modules.toml").write_text(f'[modules.site]\nduration = "{probe_seconds:g}s"\n')
    model = topology.load("fleet")
    started: list[subprocess.Popen] = []
    print(lab("up", "fleet").strip().splitlines()[0])
    try:
        for host in SITES:
            started.append(subprocess.Popen(in_node(host, *SIMPLEPERF, "-s", "--max-clients",
                                                    "1", "--queue", "4"),
                                            stdout=subprocess.DEVNULL))
        started.append(subprocess.Popen(in_node(
            "mon", *SIMPLEPERF, "exporter", "--listen", EXPORTER, "--allow", "10.0.0.0/8",
            "--config", str(folder / "modules.toml")), stdout=subprocess.DEVNULL))
        started.append(subprocess.Popen(in_node(
            "mon", "prometheus", f"--config.file={prometheus_config(args.interval, folder)}",
            f"--storage.tsdb.path={folder / 'data'}", f"--web.listen-address={PROMETHEUS}",
            "--log.level=warn"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        phase = args.seconds / 3
        began = time.time()
        phases = [("before", began, paths(model))]
        print(f"probing sites {', '.join(SITES.values())} every {args.interval:g} s for "
              f"{args.seconds:g} s; {FAILING} fails at {phase:.0f} s, returns at "
              f"{2 * phase:.0f} s")
        time.sleep(phase)
        print(lab("link", FAILING, "down").strip().replace("\n", "; "))
        phases.append(("failed", time.time(), paths(model)))
        time.sleep(phase)
        print(lab("link", FAILING, "up").strip().replace("\n", "; "))
        phases.append(("after", time.time(), paths(model)))
        time.sleep(phase)
        end = time.time()
        goodput = samples(GOODPUT, began, end)
        rtt = _mean(samples(RTT_SUM, began, end), samples(RTT_COUNT, began, end))
        report(phases, end, goodput, rtt, args.interval, results)
    finally:
        # Prometheus, the exporter, then the servers, each ended before the next: a server
        # ended under a probe in flight would have the exporter say it could not connect
        for process in reversed(started):
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        lab("down", "fleet")


def _mean(sums: list[dict], counts: list[dict]) -> list[dict]:
    """Each probe's mean loaded round trip: its histogram's sum over its count."""
    counted = {(c["metric"].get("target"), t): float(v) for c in counts for t, v in c["values"]}
    return [{"metric": s["metric"],
             "values": [(t, float(v) / counted[(s["metric"].get("target"), t)])
                        for t, v in s["values"]
                        if counted.get((s["metric"].get("target"), t))]} for s in sums]


def _by_site(result: list[dict]) -> dict[str, list[tuple[float, float]]]:
    hosts = {str(topology.load("fleet").address_of(h)): h for h in SITES}
    found: dict[str, list[tuple[float, float]]] = {}
    for series in result:
        host = hosts.get(series["metric"].get("target", ""))
        if host is not None:
            samples = [(float(t), float(v)) for t, v in series["values"]]
            found.setdefault(host, []).extend(samples)
    return {host: sorted(dict(samples).items()) for host, samples in found.items()}


def report(phases: list, end: float, goodput: list[dict], rtt: list[dict], interval: float,
           results: Path) -> None:
    rates, rtts = _by_site(goodput), _by_site(rtt)
    results.mkdir(parents=True, exist_ok=True)
    with open(results / "series.csv", "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["site", "unix_time", "goodput_bits_per_second", "loaded_rtt_mean_s"])
        for host in SITES:
            rtt_at = dict(rtts.get(host, []))
            for when, value in rates.get(host, []):
                writer.writerow([SITES[host], f"{when:.3f}", f"{value:.0f}",
                                 f"{rtt_at.get(when, float('nan')):.6f}"])
    print(f"{'site':<5} {'phase':<7} {'probes':>6} {'goodput Mbit/s':>15} {'theory':>7} "
          f"{'RTT ms':>7} {'base':>6}  verdict")
    bounds = [(name, start, (phases[i + 1][1] if i + 1 < len(phases) else end), path)
              for i, (name, start, path) in enumerate(phases)]
    failures = 0
    for host in SITES:
        for name, start, stop, path in bounds:
            # A probe that began before the change, or while routing moved, is left out, and
            # so is one that may have run into the next change: a sample's time is its
            # scrape's start, and the probe runs for up to an interval after it.
            kept = [v for t, v in rates.get(host, []) if start + interval < t <= stop - interval]
            lat = [v for t, v in rtts.get(host, []) if start + interval < t <= stop - interval]
            bottleneck, base = path[host]
            if not kept:
                print(f"{SITES[host]:<5} {name:<7} {0:>6} {'-':>15}")
                failures += 1
                continue
            middle = statistics.median(kept)
            good = MATCH * bottleneck <= middle <= 1.02 * bottleneck
            failures += not good
            print(f"{SITES[host]:<5} {name:<7} {len(kept):>6} {middle / 1e6:>15.2f} "
                  f"{bottleneck / 1e6:>7.1f} "
                  f"{(statistics.median(lat) * 1e3 if lat else float('nan')):>7.1f} "
                  f"{base * 1e3:>6.1f}  {'ok' if good else 'OFF'}")
    _plots(rates, rtts, phases, results)
    verdict = "every phase as theory says" if not failures else f"{failures} off"
    print(f"results: {results} ({verdict})")


def _plots(rates: dict, rtts: dict, phases: list, results: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: no plots; pip install 'simpleperf[plots]')")
        return
    start = phases[0][1]
    for name, series, scale, unit in (("goodput", rates, 1e6, "Mbit/s"),
                                      ("rtt", rtts, 1e-3, "ms")):
        figure, axes = plt.subplots(figsize=(8, 4))
        for host, samples in series.items():
            axes.plot([t - start for t, _ in samples], [v / scale for _, v in samples],
                      marker="o", label=f"site {SITES[host]}")
        for label, when, _ in phases[1:]:
            axes.axvline(when - start, color="grey", linestyle="--")
            axes.annotate(f"{FAILING} {'down' if label == 'failed' else 'up'}",
                          (when - start, axes.get_ylim()[1] * 0.95), fontsize=8)
        axes.set_xlabel("seconds")
        axes.set_ylabel(f"{'goodput' if name == 'goodput' else 'mean RTT under load'} "
                        f"({unit})")
        axes.legend()
        figure.tight_layout()
        figure.savefig(results / f"{name}.png")
        plt.close(figure)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between probes")
    parser.add_argument("--quick", action="store_true", help="54 s, a probe every 3 s")
    parser.add_argument("--results", default="simpleperf-results", metavar="DIR")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("fleet: needs root (network namespaces)", file=sys.stderr)
        return 1
    if args.quick:
        args.interval, args.seconds = 3.0, 54.0  # 18 s phases: 4 probes each past the edges
    else:
        args.seconds = args.minutes * 60
    results = Path(args.results) / time.strftime("fleet-%Y%m%d-%H%M%S")
    with tempfile.TemporaryDirectory() as scratch:
        try:
            run(args, Path(scratch), results)
        except KeyboardInterrupt:
            return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
