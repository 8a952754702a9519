#!/usr/bin/env python3
"""One-way delay measurement (--trip-times) against iperf2, the tool that defined it, on
127.0.0.1, both measured alternately in one run (Debian's iperf 2.1.8 by default).

- udp-paced: 1470-byte datagrams at 100 Mbit/s: the mean one-way delay each receiver
  reports (the same kernel path, so they should agree), and the receiving server's CPU
  seconds per GB (target: simpleperf / iperf2 <= 1.0 at equal rate... stated, not assumed);
- udp-unlimited: as fast as each sender can, with --trip-times: receiver goodput and loss
  (target: simpleperf / iperf2 >= 1.0);
- tcp: one stream, unlimited, --trip-times, 128 KB writes: receiver goodput and the mean
  write-to-read delay (iperf2's);
- tcp-link (root): the same across a lab pair link shaped as the portfolio's L3 (20 Mbit/s,
  10 ms one-way, a 33-packet queue): iperf2's write-to-read latency against ours, and our
  path one-way delay beside them and beside theory (10 ms, plus at most the queue's 20 ms):
  on a path slower than the sender, a write waits in the sender's socket buffer, which the
  application's figure includes and the path's does not.

    python3 bench/latency.py [--runs 5] [--seconds 4] [--iperf2 PATH] [--only NAME]

Each figure is the median of --runs alternating runs; ratios are simpleperf / iperf2.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

SIMPLEPERF = [sys.executable, "-m", "simpleperf"]
IPERF2 = ["iperf"]
# iperf2's server summary: "... 0.0000-4.0030 sec  47.7 MBytes  100 Mbits/sec ...
# 0.006/0.002/0.134/0.004 ms ..." (Latency avg/min/max/stdev)
LATENCY = re.compile(r"(\d+\.\d+)/(\d+\.\d+)/(\d+\.\d+)/(\d+\.\d+) ms")
RATE = re.compile(r"([\d.]+) ([KMG]?)bits/sec")
LOST = re.compile(r" (\d+)/(\d+) \(")
SCALE = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_listening(port: int, udp: bool) -> None:
    flag = "-Hlun" if udp else "-Hltn"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not subprocess.run(
            [*SERVER_IN, "ss", flag, f"sport = :{port}"], capture_output=True,
            text=True).stdout:
        time.sleep(0.05)


def finish(server: subprocess.Popen) -> tuple[str, float]:
    """Stop a server; its output and the CPU seconds it used (user + system)."""
    server.send_signal(signal.SIGINT)
    try:
        _, status, usage = os.wait4(server.pid, 0)
    except ChildProcessError:
        return "", 0.0
    server.returncode = os.waitstatus_to_exitcode(status)
    output = server.stdout.read() if server.stdout else ""
    return output, usage.ru_utime + usage.ru_stime


# Where the two ends run: both on loopback, or (tcp-link) a server in h2 and a client in h1
# of a lab pair link.
SERVER_IN: list[str] = []
CLIENT_IN: list[str] = []
TARGET = "127.0.0.1"


def ours(flags: list[str], udp: bool) -> dict:
    port = free_port()
    server = subprocess.Popen([*SERVER_IN, *SIMPLEPERF, "-s", "-p", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wait_listening(port, False)
    try:
        done = subprocess.run([*CLIENT_IN, *SIMPLEPERF, "-c", TARGET, "-p", str(port), "-J",
                               "--no-latency", "--trip-times", *flags],
                              capture_output=True, text=True, timeout=120)
    finally:
        time.sleep(0.3)
        _, cpu = finish(server)
    end = json.loads(done.stdout)["end"]
    receiver = end["streams"][0]["receiver"]
    # over TCP iperf2's figure is the write-to-read delay: compare like with like, and show
    # the path's beside it
    return {"rate": end["sum_received"]["bits_per_second"],
            "lost": end["sum"]["lost_percent"] if udp else 0.0,
            "delay_ms": receiver["one_way_delay" if udp else "write_to_read_delay"]["mean_ms"],
            "path_ms": receiver["one_way_delay"]["mean_ms"],
            "cpu_per_gb": cpu / max(1e-9, receiver["bytes"] / 1e9)}


def theirs(flags: list[str], udp: bool) -> dict:
    port = free_port()
    server = subprocess.Popen([*SERVER_IN, *IPERF2, "-s", "-e", "-p", str(port),
                               *(["-u"] if udp else [])],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wait_listening(port, udp)
    try:
        subprocess.run([*CLIENT_IN, *IPERF2, "-c", TARGET, "-p", str(port), "-e",
                        "--trip-times", *flags], capture_output=True, text=True, timeout=120)
    finally:
        time.sleep(0.5)
        output, cpu = finish(server)
    summary = [line for line in output.splitlines() if "sec" in line and "0.0000-" in line]
    line = summary[-1]
    value, unit = RATE.search(line).groups()
    rate = float(value) * SCALE[unit]
    lost = LOST.search(line)
    seconds = float(re.search(r"0\.0000-([\d.]+) sec", line).group(1))
    return {"rate": rate,
            "lost": 100 * int(lost.group(1)) / max(1, int(lost.group(2))) if lost else 0.0,
            "delay_ms": float(LATENCY.search(line).group(1)), "path_ms": 0.0,
            "cpu_per_gb": cpu / max(1e-9, rate * seconds / 8 / 1e9)}


def compare(name: str, runs: int, our_flags: list[str], their_flags: list[str],
            udp: bool) -> None:
    mine, other = [], []
    for run in range(runs):
        order = ("ours", "theirs") if run % 2 == 0 else ("theirs", "ours")
        for tool in order:
            if tool == "ours":
                mine.append(ours(our_flags, udp))
            else:
                other.append(theirs(their_flags, udp))
        print(f"{name} run {run + 1}: simpleperf {mine[-1]['rate'] / 1e6:9.1f} Mbit/s "
              f"{mine[-1]['lost']:5.2f}% lost, delay {mine[-1]['delay_ms']:.3f} ms, "
              f"{mine[-1]['cpu_per_gb']:.2f} CPU s/GB   iperf2 {other[-1]['rate'] / 1e6:9.1f} "
              f"Mbit/s {other[-1]['lost']:5.2f}% lost, delay {other[-1]['delay_ms']:.3f} ms, "
              f"{other[-1]['cpu_per_gb']:.2f} CPU s/GB", flush=True)
    print(f"{name} medians of {runs}:")
    delay = "mean one-way delay ms" if udp else "mean write-to-read delay ms"
    for key, label, unit in (("rate", "receiver goodput", 1e6), ("lost", "loss %", 1),
                             ("delay_ms", delay, 1),
                             ("cpu_per_gb", "receiving server CPU s per GB", 1)):
        a = statistics.median(m[key] for m in mine)
        b = statistics.median(o[key] for o in other)
        ratio = f"{a / b:.2f}" if b else "n/a"
        print(f"  {label:32} simpleperf {a / unit:10.3f}   iperf2 {b / unit:10.3f}   "
              f"ratio {ratio}")
    if not udp:
        path = statistics.median(m["path_ms"] for m in mine)
        print(f"  {'mean path one-way delay ms':32} simpleperf {path:10.3f}   (iperf2 has none: "
              "its figure includes the sender's socket buffer)")


def main() -> None:
    global IPERF2
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--iperf2", default="iperf")
    parser.add_argument("--only", choices=["udp-paced", "udp-unlimited", "tcp", "tcp-link"])
    args = parser.parse_args()
    if shutil.which(args.iperf2) is None:
        sys.exit(f"latency bench: {args.iperf2} not found (Debian: apt-get install iperf)")
    IPERF2 = [args.iperf2]
    version = subprocess.run([args.iperf2, "-v"], capture_output=True, text=True)
    print(f"reference: {(version.stdout + version.stderr).strip()}")
    seconds = ["-t", f"{args.seconds:g}"]
    if args.only in (None, "udp-paced"):
        compare("udp-paced", args.runs, ["-u", "-b", "100M", "-l", "1470", *seconds],
                ["-u", "-b", "100M", "-l", "1470", *seconds], True)
    if args.only in (None, "udp-unlimited"):
        compare("udp-unlimited", args.runs, ["-u", "-b", "0", "-l", "1470", *seconds],
                ["-u", "-b", "100G", "-l", "1470", *seconds], True)
    if args.only in (None, "tcp"):
        compare("tcp", args.runs, ["-l", "128K", *seconds], ["-l", "128K", *seconds], False)
    if args.only in (None, "tcp-link") and os.geteuid() == 0:
        on_link(args.runs, seconds)
    elif args.only == "tcp-link":
        sys.exit("latency bench: tcp-link builds a lab: run it as root")


def on_link(runs: int, seconds: list[str]) -> None:
    """tcp-link: a pair link as the portfolio's L3, one stream of each tool across it."""
    global SERVER_IN, CLIENT_IN, TARGET
    up = subprocess.run([*SIMPLEPERF, "lab", "up", "pair", "--rate", "20M", "--delay", "10ms",
                         "--queue", "33"], capture_output=True, text=True, timeout=120)
    if up.returncode != 0:
        sys.exit(f"latency bench: lab up pair failed: {up.stderr.strip()}")
    try:
        SERVER_IN, CLIENT_IN = ["ip", "netns", "exec", "h2"], ["ip", "netns", "exec", "h1"]
        TARGET = "10.0.0.2"
        print("tcp-link: pair link 20 Mbit/s, 10 ms one-way, 33-packet queue (the portfolio's "
              "L3); theory: path one-way delay 10 ms, at most 30.2 ms with the queue full")
        compare("tcp-link", runs, ["-l", "128K", *seconds], ["-l", "128K", *seconds], False)
    finally:
        SERVER_IN, CLIENT_IN, TARGET = [], [], "127.0.0.1"
        subprocess.run([*SIMPLEPERF, "lab", "down", "pair"], capture_output=True, timeout=120)


if __name__ == "__main__":
    main()
