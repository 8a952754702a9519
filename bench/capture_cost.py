#!/usr/bin/env python3
"""What a capture costs (needs root): the same TCP flow across a `pair` link with and
without `simpleperf lab capture` on the link (headers only, to a file), alternately, at
1 Gbit/s and 40 Mbit/s. Prints the goodput of each, their ratio (target >= 0.95: a capture
must not distort what it watches), and dumpcap's CPU (seconds per second, i.e. cores) and
packets per second; then how long `lab analyze` takes on a 1 Gbit/s capture beside tshark's
own analysis of the same file.

    sudo python3 bench/capture_cost.py [--runs 5] [--seconds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SIMPLEPERF = [sys.executable, "-m", "simpleperf"]
TICKS = os.sysconf("SC_CLK_TCK")


def lab(*args: str) -> None:
    subprocess.run(SIMPLEPERF + ["lab", *args], check=True, capture_output=True)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def dumpcap_pid(path: str) -> int:
    for _ in range(100):
        for entry in os.listdir("/proc"):
            try:
                command = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if command.startswith(b"dumpcap") and path.encode() in command:
                return int(entry)
        time.sleep(0.05)
    raise RuntimeError("dumpcap did not start")


def flow(seconds: float) -> float:
    done = subprocess.run(["ip", "netns", "exec", "h1", *SIMPLEPERF, "-c", "-I", "10.0.0.2",
                           "-p", "5201", "-t", str(seconds), "--native", "-J"],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)["end"]["sum_received"]["bits_per_second"]


def start_capture(path: str) -> subprocess.Popen:
    """`lab capture` of the pair link, headers only, once dumpcap says it is capturing."""
    grab = subprocess.Popen(SIMPLEPERF + ["lab", "capture", "h1-h2", "-w", path,
                                          "--snaplen", "144"], stderr=subprocess.PIPE,
                            text=True)
    assert grab.stderr is not None
    while "Capturing on" not in grab.stderr.readline():
        pass
    return grab


def captured_flow(seconds: float, folder: str) -> tuple[float, float, int]:
    path = os.path.join(folder, "bench.pcapng")
    grab = start_capture(path)
    pid = dumpcap_pid(path)
    before = cpu_seconds(pid)
    started = time.monotonic()
    rate = flow(seconds)
    used = (cpu_seconds(pid) - before) / (time.monotonic() - started)
    grab.send_signal(signal.SIGINT)
    _, err = grab.communicate(timeout=30)
    packets = int(err.split("Packets captured:")[1].split()[0]) if "Packets captured:" in err \
        else 0
    os.unlink(path)
    return rate, used, packets


def measure(rate: str, runs: int, seconds: float) -> None:
    lab("up", "pair", "--rate", rate, "--delay", "5ms")
    server = subprocess.Popen(["ip", "netns", "exec", "h2", *SIMPLEPERF, "-s", "-p", "5201"],
                              stdout=subprocess.DEVNULL)
    plain, watched, cores, rates = [], [], [], []
    try:
        time.sleep(0.5)
        with tempfile.TemporaryDirectory() as folder:
            for _ in range(runs):
                plain.append(flow(seconds))
                got, used, packets = captured_flow(seconds, folder)
                watched.append(got)
                cores.append(used)
                rates.append(packets / seconds)
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(10)
        lab("down", "pair")
    ratio = statistics.median(watched) / statistics.median(plain)
    print(f"pair {rate:>5}: without capture {statistics.median(plain) / 1e6:8.1f} Mbit/s, "
          f"with {statistics.median(watched) / 1e6:8.1f} Mbit/s, ratio {ratio:.3f} "
          f"({'ok' if ratio >= 0.95 else 'MISS'}, target >= 0.95); dumpcap "
          f"{statistics.median(cores):.3f} cores for {statistics.median(rates):,.0f} "
          f"packets/s (medians of {runs})")


def analysis_speed(seconds: float) -> None:
    """`lab analyze` against tshark's own analysis of the same file (a 1 Gbit/s capture)."""
    lab("up", "pair", "--rate", "1G", "--delay", "5ms", "--loss", "0.5%")
    server = subprocess.Popen(["ip", "netns", "exec", "h2", *SIMPLEPERF, "-s", "-p", "5201"],
                              stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "analyse.pcapng")
        try:
            time.sleep(0.5)
            grab = start_capture(path)
            flow(seconds)
            grab.send_signal(signal.SIGINT)
            grab.communicate(timeout=30)
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(10)
            lab("down", "pair")
        ours, theirs = [], []
        for _ in range(3):
            started = time.monotonic()
            subprocess.run(SIMPLEPERF + ["lab", "analyze", path], check=True,
                           capture_output=True)
            ours.append(time.monotonic() - started)
            started = time.monotonic()
            subprocess.run(["tshark", "-n", "-r", path, "-q", "-Y",
                            "tcp.analysis.retransmission", "-z", "conv,tcp"], check=True,
                           capture_output=True)
            theirs.append(time.monotonic() - started)
        size = os.path.getsize(path) / 1e6
    print(f"analysis of a {size:.0f} MB capture (1 Gbit/s, {seconds:g} s): lab analyze "
          f"{statistics.median(ours):.2f} s, tshark {statistics.median(theirs):.2f} s, "
          f"ratio {statistics.median(theirs) / statistics.median(ours):.2f} (tshark / ours; "
          "medians of 3)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    for rate in ("1G", "40M"):
        measure(rate, args.runs, args.seconds)
    analysis_speed(args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
