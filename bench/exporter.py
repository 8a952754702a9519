#!/usr/bin/env python3
"""`simpleperf exporter` measured, on 127.0.0.1:

1. a probe against the tool run directly, alternately in the same run (TCP at -b 1G, so
   both have one answer): the goodput of each and their ratio;
2. 1,000 probes (rtt and refused ones, 8 at a time): the exporter's threads, open
   descriptors and resident memory before, during and after (flat is the goal);
3. the scale goal: 50 simpleperf servers (--max-clients 1) probed by one exporter every
   --interval seconds (60 by default) by a real Prometheus (Debian's) for --rounds rounds:
   probes that succeeded against those due, the longest wait for a server (0: no two
   throughput tests ever met), and the exporter's CPU seconds per probe and memory.

    python3 bench/exporter.py [--probes 1000] [--targets 50] [--interval 60] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

SIMPLEPERF = [sys.executable, "-m", "simpleperf"]
MODULES = """
[modules.tcp1g]
duration = "2s"
rate = "1G"
[modules.rtt_short]
prober = "rtt"
duration = "0.5s"
[modules.tcp1]
duration = "1s"
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_listening(port: int, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"bench: nothing listens on port {port}")


def get(url: str, timeout: float = 60) -> str:
    request = urllib.request.Request(url, headers={"X-Prometheus-Scrape-Timeout-Seconds": "30"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.read().decode()


def metric(page: str, name: str) -> float | None:
    for line in page.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def process_figures(pid: int) -> dict[str, float]:
    with open(f"/proc/{pid}/status") as status:
        fields = dict(line.split(":", 1) for line in status)
    with open(f"/proc/{pid}/stat") as stat:
        parts = stat.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return {"threads": int(fields["Threads"]), "fds": len(os.listdir(f"/proc/{pid}/fd")),
            "rss_mb": int(fields["VmRSS"].split()[0]) / 1024,
            "cpu_s": (int(parts[11]) + int(parts[12])) / ticks,
            "clients_cpu_s": (int(parts[13]) + int(parts[14])) / ticks}


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(list(args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def against_direct(exporter: int, server: int, runs: int) -> None:
    probed, direct = [], []
    for _ in range(runs):
        page = get(f"http://127.0.0.1:{exporter}/probe?target=127.0.0.1:{server}&module=tcp1g")
        value = metric(page, "simpleperf_goodput_bits_per_second")
        probed.append(value if value is not None else float("nan"))
        done = subprocess.run(SIMPLEPERF + ["-c", "127.0.0.1", "-p", str(server), "-t", "2",
                                            "-b", "1G", "-J"], capture_output=True, text=True)
        direct.append(json.loads(done.stdout)["end"]["sum_received"]["bits_per_second"])
    p, d = statistics.median(probed), statistics.median(direct)
    print(f"1. TCP -b 1G, 2 s, medians of {runs} alternate runs: probe {p / 1e6:.1f} Mbit/s, "
          f"direct {d / 1e6:.1f} Mbit/s, ratio {p / d:.3f}")


def many_probes(exporter: int, pid: int, server: int, count: int) -> None:
    get(f"http://127.0.0.1:{exporter}/probe?target=127.0.0.1:{server}&module=rtt_short")
    figures = [("before", process_figures(pid))]
    done = 0
    lock = threading.Lock()

    def worker() -> None:
        nonlocal done
        while True:
            with lock:
                if done >= count:
                    return
                done += 1
                number = done
            module = "rtt_short" if number % 4 == 0 else "nope"  # refused: 400
            get(f"http://127.0.0.1:{exporter}/probe?target=127.0.0.1:{server}&module={module}")
            if number in (count // 10, count // 2):
                with lock:
                    figures.append((f"after {number}", process_figures(pid)))
    threads = [threading.Thread(target=worker) for _ in range(8)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    took = time.monotonic() - began
    time.sleep(1)
    figures.append((f"after {count}", process_figures(pid)))
    print(f"2. {count} probes (a quarter rtt of 0.5 s, the rest refused), 8 at a time, "
          f"{took:.0f} s:")
    for when, seen in figures:
        print(f"   {when:<12} threads {seen['threads']:>3}  descriptors {seen['fds']:>3}  "
              f"memory {seen['rss_mb']:6.1f} MB")


def scale(targets: int, interval: float, rounds: int, folder: Path) -> None:
    if shutil.which("prometheus") is None:
        print("3. skipped: no prometheus (apt-get install prometheus)")
        return
    ports = [free_port() for _ in range(targets)]
    servers = [start(*SIMPLEPERF, "-s", "-p", str(p), "--max-clients", "1", "--queue", "4")
               for p in ports]
    exporter_port, prometheus_port = free_port(), free_port()
    (folder / "modules.toml").write_text(MODULES)
    exporter = start(*SIMPLEPERF, "exporter", "--listen", f"127.0.0.1:{exporter_port}",
                     "--config", str(folder / "modules.toml"))
    config = f"""
global: {{scrape_interval: {interval:g}s, scrape_timeout: {min(interval, 15):g}s}}
scrape_configs:
  - job_name: fleet
    metrics_path: /probe
    params: {{module: [tcp1]}}
    static_configs: [{{targets: [{", ".join(f"'127.0.0.1:{p}'" for p in ports)}]}}]
    relabel_configs:
      - {{source_labels: [__address__], target_label: __param_target}}
      - {{source_labels: [__param_target], target_label: instance}}
      - {{target_label: __address__, replacement: '127.0.0.1:{exporter_port}'}}
"""
    (folder / "prometheus.yml").write_text(config)
    processes = [*servers, exporter]
    try:
        for port in [*ports, exporter_port]:
            wait_listening(port)
        before = process_figures(exporter.pid)
        prometheus = start("prometheus", f"--config.file={folder / 'prometheus.yml'}",
                           f"--storage.tsdb.path={folder / 'data'}", "--log.level=warn",
                           f"--web.listen-address=127.0.0.1:{prometheus_port}")
        processes.append(prometheus)
        time.sleep(interval * rounds + 5)
        after = process_figures(exporter.pid)

        def query(promql: str) -> list:
            url = (f"http://127.0.0.1:{prometheus_port}/api/v1/query?query="
                   + urllib.parse.quote(promql))
            return json.loads(get(url))["data"]["result"]
        window = f"{interval * rounds + 5:g}s"
        succeeded = sum(float(r["value"][1]) for r in query(
            f"sum(sum_over_time(probe_success[{window}]))"))
        scraped = sum(float(r["value"][1]) for r in query(
            f"sum(count_over_time(probe_success[{window}]))"))
        waited = query(f"max(max_over_time(simpleperf_probe_wait_seconds[{window}]))")
        longest = float(waited[0]["value"][1]) if waited else float("nan")
        cpu = after["cpu_s"] - before["cpu_s"]
        clients = after["clients_cpu_s"] - before["clients_cpu_s"]
        print(f"3. {targets} servers (--max-clients 1) probed every {interval:g} s for "
              f"{rounds} rounds by one exporter, scraped by Prometheus: {succeeded:.0f} of "
              f"{scraped:.0f} probes succeeded (due about {targets * rounds}); longest wait "
              f"for a server {longest:.3f} s; exporter CPU {cpu:.1f} s "
              f"({cpu / max(scraped, 1) * 1e3:.0f} ms per probe) and its probes' clients "
              f"{clients:.1f} s ({clients / max(scraped, 1) * 1e3:.0f} ms per probe), "
              f"memory {before['rss_mb']:.1f} -> {after['rss_mb']:.1f} MB, threads "
              f"{before['threads']} -> {after['threads']}")
    finally:
        stop(processes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=1000)
    parser.add_argument("--targets", type=int, default=50)
    parser.add_argument("--interval", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        (folder / "modules.toml").write_text(MODULES)
        server_port, exporter_port = free_port(), free_port()
        server = start(*SIMPLEPERF, "-s", "-p", str(server_port))
        exporter = start(*SIMPLEPERF, "exporter", "--listen", f"127.0.0.1:{exporter_port}",
                         "--config", str(folder / "modules.toml"))
        try:
            wait_listening(server_port)
            wait_listening(exporter_port)
            against_direct(exporter_port, server_port, args.runs)
            many_probes(exporter_port, exporter.pid, server_port, args.probes)
        finally:
            stop([exporter, server])
        scale(args.targets, args.interval, args.rounds, folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
