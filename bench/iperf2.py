#!/usr/bin/env python3
"""iperf2's protocol against iperf2 itself (Debian's iperf 2.1.8) on 127.0.0.1, each pair
measured alternately in one run, receiver side:

- server: iperf2's client against simpleperf's server and against iperf2's own server,
  TCP and UDP "unlimited" (-b 100G: iperf2 has no -b 0 for UDP; 1470-byte datagrams).
  Target: simpleperf / iperf2 goodput >= 1.0, with no more loss;
- client: simpleperf's client (--iperf2) and iperf2's client against iperf2's server,
  the same two tests. Target >= 1.0;
- bounceback (--bounceback, back to back: --bounceback-period 0): round trips a second,
  iperf2's client at our server against at its own, and our client against iperf2's at
  iperf2's server. Target >= 1.0 (the tool adds no more to each round trip);
- connect (--connect-only=20000): connects a second, iperf2's client at our server against
  at its own, our client against iperf2's at iperf2's server. Target >= 1.0.

    python3 bench/iperf2.py [--only server|client] [--protocol tcp|udp|bounceback|connect]
                            [--runs 3] [--seconds 4] [--busy]

UDP loss is what the receiving server counted (its report, or its -y C row). The server
runs also print each server's CPU seconds per GB received and the datagrams the kernel
dropped at full sockets (Udp RcvbufErrors). --busy: a second process spins on CPU 0.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import statistics
import subprocess
import sys
import time

from cpu_meter import busy_cpu, process_cpu, socket_drops

SIMPLEPERF = [sys.executable, "-m", "simpleperf"]
UDP_RATE = "100G"
LENGTH = "1470"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def listening(port: int, udp: bool) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not subprocess.run(
            ["ss", "-Hlun" if udp else "-Hltn", f"sport = :{port}"], capture_output=True,
            text=True).stdout:
        time.sleep(0.05)


class Server:
    """A server in the background, its output kept in a file."""

    def __init__(self, command: list[str], port: int, udp: bool) -> None:
        self.log = open(f"/tmp/bench-iperf2-{port}.log", "w+")  # noqa: SIM115
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT,
                                        text=True)
        listening(port, udp)

    def rows(self) -> list[list[str]]:
        """iperf2's -y C rows so far."""
        self.log.flush()
        with open(self.log.name) as text:
            return [line.strip().split(",") for line in text if line.count(",") >= 8]

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        self.log.close()


def iperf2_client(port: int, seconds: float, udp: bool) -> tuple[float, float] | None:
    """Mbit/s and loss percent at the receiver, from iperf2's client (its server report for
    UDP; for TCP both ends count the same bytes)."""
    extra = ["-u", "-b", UDP_RATE, "-l", LENGTH] if udp else []
    done = subprocess.run(["iperf", "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds),
                           "-f", "m", *extra], capture_output=True, text=True, check=True)
    if not udp:
        match = re.findall(r"([\d.]+) Mbits/sec", done.stdout)
        return float(match[-1]), 0.0
    report = re.search(r"Server Report:\n.*\n.*?([\d.]+) Mbits/sec .*? (\d+)/(\d+) ",
                       done.stdout)
    if report is None:  # the server's report never came (iperf2's own server, loaded)
        print(f"    (no report from the server on port {port}: the run does not count)",
              flush=True)
        return None
    lost, total = int(report.group(2)), int(report.group(3))
    return float(report.group(1)), 100.0 * lost / max(total, 1)


def simpleperf_client(port: int, seconds: float, udp: bool) -> None:
    extra = ["-u", "-b", UDP_RATE, "-l", LENGTH] if udp else []
    done = subprocess.run(SIMPLEPERF + ["-c", "127.0.0.1", "-p", str(port), "--iperf2", "-t",
                                        str(seconds), "-J", *extra],
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"simpleperf --iperf2 failed: {done.stderr}")
    json.loads(done.stdout)


def from_server_row(server: Server, before: int, udp: bool) -> tuple[float, float]:
    """Mbit/s and loss percent from the iperf2 server's newest -y C row."""
    deadline = time.monotonic() + 5
    while len(server.rows()) <= before and time.monotonic() < deadline:
        time.sleep(0.05)
    row = server.rows()[-1]
    loss = 100.0 * int(row[10]) / max(int(row[11]), 1) if udp else 0.0
    return int(row[8]) / 1e6, loss


def bench_server(args, udp: bool) -> tuple[list, list]:
    """iperf2's client: our server against iperf2's."""
    ours_port, theirs_port = free_port(), free_port()
    ours = Server(SIMPLEPERF + ["-s", "-p", str(ours_port)], ours_port, False)
    theirs = Server(["iperf", "-s", "-p", str(theirs_port), *(["-u"] if udp else [])],
                    theirs_port, udp)
    print(f"    simpleperf's server on port {ours_port}, iperf2's on {theirs_port}", flush=True)
    def measured(server: Server, port: int) -> tuple[float, ...] | None:
        """The client's result, the server's CPU seconds per GB received and the
        datagrams (or coalesced reads) the sockets dropped meanwhile."""
        drops, cpu = socket_drops(), process_cpu(server.process.pid)
        got = iperf2_client(port, args.seconds, udp)
        if got is None:
            return None
        moved_gb = got[0] * 1e6 * args.seconds / 8 / 1e9
        return (*got, (process_cpu(server.process.pid) - cpu) / moved_gb,
                socket_drops() - drops)

    def their_run() -> tuple[float, ...] | None:
        """iperf2's UDP server (2.1.8) often sends no report to a second client: a fresh
        one for each run, as a user would start it."""
        nonlocal theirs
        if udp:
            theirs.close()
            theirs = Server(["iperf", "-s", "-u", "-p", str(theirs_port)], theirs_port, udp)
        return measured(theirs, theirs_port)

    try:
        return alternate(args.runs, lambda: measured(ours, ours_port), their_run)
    finally:
        ours.close()
        theirs.close()


def bench_client(args, udp: bool) -> tuple[list, list]:
    """iperf2's server: our client against iperf2's."""
    port = free_port()
    server = Server(["iperf", "-s", "-p", str(port), "-y", "C", *(["-u"] if udp else [])],
                    port, udp)

    def measure(client) -> tuple[float, float]:
        nonlocal server
        if udp:  # a fresh server each run (see bench_server)
            server.close()
            server = Server(["iperf", "-s", "-p", str(port), "-y", "C", "-u"], port, udp)
        before = len(server.rows())
        client(port, args.seconds, udp)
        return from_server_row(server, before, udp)

    try:
        return alternate(args.runs, lambda: measure(simpleperf_client),
                         lambda: measure(iperf2_client))
    finally:
        server.close()


def alternate(runs: int, ours, theirs) -> tuple[list, list]:
    mine, other = [], []
    for run in range(runs):
        got = {}
        for tool in (("ours", "theirs") if run % 2 == 0 else ("theirs", "ours")):
            got[tool] = ours() if tool == "ours" else theirs()
        if None in got.values():
            continue
        mine.append(got["ours"])
        other.append(got["theirs"])
        print(f"    run {run + 1}: simpleperf {mine[-1][0]:9.1f} Mbit/s {mine[-1][1]:5.2f} % "
              f"lost{server_cost(mine[-1])} | iperf2 {other[-1][0]:9.1f} Mbit/s "
              f"{other[-1][1]:5.2f} % lost{server_cost(other[-1])}", flush=True)
    return mine, other


def server_cost(result: tuple[float, ...]) -> str:
    """A server run's CPU per GB and socket drops, where measured."""
    return f" (server {result[2]:.3f} s/GB, socket drops {result[3]})" if len(result) > 2 \
        else ""


def summary(name: str, mine: list, other: list) -> None:
    if not mine:
        print(f"{name}: no run had both results", flush=True)
        return
    rate, theirs = (statistics.median(r[0] for r in mine),
                    statistics.median(r[0] for r in other))
    loss, their_loss = (statistics.median(r[1] for r in mine),
                        statistics.median(r[1] for r in other))
    cost = ""
    if len(mine[0]) > 2:
        cpu, their_cpu = (statistics.median(r[2] for r in mine),
                          statistics.median(r[2] for r in other))
        cost = (f"; server CPU {cpu:.3f} vs {their_cpu:.3f} s/GB, ratio "
                f"{cpu / their_cpu:.2f}")
    print(f"{name}: simpleperf {rate:.1f} Mbit/s ({loss:.2f} % lost) vs iperf2 {theirs:.1f} "
          f"Mbit/s ({their_loss:.2f} % lost): ratio {rate / theirs:.3f}{cost}", flush=True)


BOUNCE_ARGS = ["--bounceback", "--bounceback-period", "0"]


def iperf2_bounces(port: int, seconds: float) -> tuple[float, float]:
    """Round trips a second and their mean (ms), from iperf2's client's final BB line."""
    done = subprocess.run(["iperf", "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds),
                           *BOUNCE_ARGS], capture_output=True, text=True, check=True)
    final = re.findall(r"0\.0+-([\d.]+) sec .*? (\d+)=([\d.]+)/", done.stdout)[-1]
    return int(final[1]) / float(final[0]), float(final[2])


def simpleperf_bounces(port: int, seconds: float) -> tuple[float, float]:
    done = subprocess.run(SIMPLEPERF + ["-c", "127.0.0.1", "-p", str(port), "-t",
                                        str(seconds), "-J", *BOUNCE_ARGS],
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"simpleperf --bounceback failed: {done.stderr}")
    end = json.loads(done.stdout)["end"]
    return end["round_trips"] / seconds, end["rtt"]["mean_ms"]


def bench_bounceback(args) -> None:
    ours_port, theirs_port = free_port(), free_port()
    ours = Server(SIMPLEPERF + ["-s", "-p", str(ours_port)], ours_port, False)
    theirs = Server(["iperf", "-s", "-p", str(theirs_port)], theirs_port, False)
    try:
        compare("bounceback server", "round trips", args,
                lambda: iperf2_bounces(ours_port, args.seconds),
                lambda: iperf2_bounces(theirs_port, args.seconds))
        compare("bounceback client", "round trips", args,
                lambda: simpleperf_bounces(theirs_port, args.seconds),
                lambda: iperf2_bounces(theirs_port, args.seconds))
    finally:
        ours.close()
        theirs.close()


CONNECTS = 20_000  # a run's connects (iperf2's --connect-only=0 does not stop at -t)


def iperf2_connects(port: int) -> tuple[float, float]:
    """Connects a second (over its whole run) and their mean time (ms), from iperf2's
    client's [ CT] line."""
    began = time.monotonic()
    done = subprocess.run(["iperf", "-c", "127.0.0.1", "-p", str(port), "-e",
                           f"--connect-only={CONNECTS}"], capture_output=True, text=True,
                          timeout=120)
    took = time.monotonic() - began
    found = re.search(r"connect times \(min/avg/max/stdev\) = [\d.]+/([\d.]+)/.*"
                      r"\(tot/err\) = (\d+)/(\d+)", done.stdout)
    if found is None:
        raise SystemExit(f"iperf --connect-only printed no summary: {done.stdout[-300:]}")
    return int(found[2]) / took, float(found[1])


def simpleperf_connects(port: int) -> tuple[float, float]:
    """The same from our client's JSON (its own time from the first connect: not the
    interpreter's start)."""
    done = subprocess.run(SIMPLEPERF + ["-c", "127.0.0.1", "-p", str(port), "-t", "600",
                                        "-J", f"--connect-only={CONNECTS}"],
                          capture_output=True, text=True, timeout=120)
    if done.returncode:
        raise SystemExit(f"simpleperf --connect-only failed: {done.stderr}")
    end = json.loads(done.stdout)["end"]["connect_times"]
    return end["total"] / end["seconds"], end["mean_ms"]


def bench_connects(args) -> None:
    """--connect-only: connects a second, both ends against iperf2."""
    ours_port, theirs_port = free_port(), free_port()
    ours = Server(SIMPLEPERF + ["-s", "-p", str(ours_port)], ours_port, False)
    theirs = Server(["iperf", "-s", "-p", str(theirs_port)], theirs_port, False)
    try:
        compare("connect-only server", "connects", args,
                lambda: iperf2_connects(ours_port), lambda: iperf2_connects(theirs_port))
        compare("connect-only client", "connects", args,
                lambda: simpleperf_connects(theirs_port), lambda: iperf2_connects(theirs_port))
    finally:
        ours.close()
        theirs.close()


def compare(name: str, unit: str, args, mine, other) -> None:
    """Alternate runs of two (rate a second, mean ms) measurements; medians and ratio."""
    print(f"{name} ({args.runs} runs of {args.seconds:g} s, medians):", flush=True)
    got_ours, got_theirs = [], []
    for run in range(args.runs):
        order = (mine, other) if run % 2 == 0 else (other, mine)
        results = {id(f): f() for f in order}
        got_ours.append(results[id(mine)])
        got_theirs.append(results[id(other)])
        print(f"    run {run + 1}: simpleperf {got_ours[-1][0]:8.0f}/s "
              f"({got_ours[-1][1]:.3f} ms) | iperf2 {got_theirs[-1][0]:8.0f}/s "
              f"({got_theirs[-1][1]:.3f} ms)", flush=True)
    rate = statistics.median(r for r, _ in got_ours)
    their_rate = statistics.median(r for r, _ in got_theirs)
    print(f"{name}: simpleperf {rate:.0f} {unit}/s (mean "
          f"{statistics.median(m for _, m in got_ours):.3f} ms) vs iperf2 "
          f"{their_rate:.0f}/s ({statistics.median(m for _, m in got_theirs):.3f} "
          f"ms): ratio {rate / their_rate:.3f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("server", "client"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--protocol", choices=("tcp", "udp", "bounceback", "connect"))
    parser.add_argument("--busy", action="store_true",
                        help="a second process spinning on CPU 0 throughout")
    args = parser.parse_args()
    with busy_cpu(args.busy):
        run_benches(args)


def run_benches(args: argparse.Namespace) -> None:
    if args.protocol == "bounceback":
        bench_bounceback(args)
        return
    if args.protocol == "connect":
        bench_connects(args)
        return
    for side, bench in (("server", bench_server), ("client", bench_client)):
        if args.only not in (None, side):
            continue
        for udp in (False, True):
            if args.protocol not in (None, "udp" if udp else "tcp"):
                continue
            name = f"{side} {'UDP' if udp else 'TCP'}"
            print(f"{name} ({args.runs} runs of {args.seconds:g} s, medians):", flush=True)
            summary(name, *bench(args, udp))
    if args.protocol is None and args.only is None:
        bench_bounceback(args)
        bench_connects(args)


if __name__ == "__main__":
    main()
