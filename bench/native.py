#!/usr/bin/env python3
"""The native protocol against iperf3 on 127.0.0.1, both measured alternately in one run.

- udp: 1470-byte datagrams at unlimited rate (-b 0): receiver-side goodput and loss
  (target: simpleperf / iperf3 goodput >= 1.0);
- reverse: TCP -R and --bidir, receiver-side throughput (target >= 0.95);
- concurrency: 64 clients at once, each its own process and a 5 s TCP test started at the
  same instant: completion, Jain's fairness index, aggregate against one stream alone, and
  the server's peak memory (iperf3's server runs one test at a time, so no ratio there);
- iperf3: the reference iperf3's client against simpleperf's server and against iperf3's
  own server, TCP and UDP (-b 0, 1470-byte datagrams), receiver side: goodput, loss (ours
  split by where it happened), each server's CPU seconds per GB received and the socket
  drops of the run (target: goodput >= 1.0, UDP loss at most iperf3's + 0.5 point, CPU per
  GB at most iperf3's; with 3.21 and --gsro, #52's).

    python3 bench/native.py [--only udp|reverse|concurrency|iperf3] [--runs 3] [--seconds 4]
                            [--iperf3 PATH] [--gsro] [--conditions quiet,busy]

--iperf3 names the reference binary (default Debian's iperf3; ../shared/tools/iperf3-3.21
for the newest), --gsro gives its UDP runs --gsro (UDP GSO/GRO, 3.21 only). Every
comparison runs in each condition: quiet, and busy (a second process spinning on CPU 0),
so that a result that holds in one only is seen. UDP runs also print the kernel's count of
datagrams the receiving sockets dropped (Udp RcvbufErrors, both tools alike: one per
coalesced read dropped) and simpleperf's own split of its loss (by the receiving host).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from cpu_meter import CpuMeter, busy_cpu, socket_drops

from simpleperf.stats import jain_index, rates_while_all_ran

SIMPLEPERF = [sys.executable, "-m", "simpleperf"]
IPERF3 = ["iperf3"]  # the reference binary, as --iperf3 sets it


def simpleperf_json(port: int, *args: str) -> dict:
    done = subprocess.run(SIMPLEPERF + ["-c", "-p", str(port), "-J", "--no-latency", *args],
                          check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def iperf3_json(port: int, *args: str) -> dict:
    done = subprocess.run([*IPERF3, "-c", "127.0.0.1", "-p", str(port), "-J", *args],
                          check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def received(end: dict) -> float:
    """Receiver-side bits/s, both directions summed for --bidir (same keys in both tools)."""
    return end["sum_received"]["bits_per_second"] + end.get(
        "sum_received_bidir_reverse", {}).get("bits_per_second", 0.0)


def alternate(runs: int, ours, theirs, show) -> tuple[list, list]:
    """Each run both, in turn; a run where either failed (None) does not count."""
    mine, other = [], []
    for run in range(runs):
        # Alternate which tool goes first so drift on a shared machine hits both alike.
        got = {tool: ours() if tool == "ours" else theirs()
               for tool in (("ours", "theirs") if run % 2 == 0 else ("theirs", "ours"))}
        if None in got.values():
            print(f"run {run + 1} does not count: a client failed", flush=True)
            continue
        mine.append(got["ours"])
        other.append(got["theirs"])
        show(run, mine[-1], other[-1])
    return mine, other


def bench_udp(args, ports) -> None:
    flags = ["-u", "-b", "0", "-l", "1470", "-t", str(args.seconds)]

    def ours():
        drops = socket_drops()
        with CpuMeter(ports["simpleperf_pid"]) as meter:
            end = simpleperf_json(ports["simpleperf"], *flags)["end"]
        host = end["sum"].get("receiver_dropped_packets", 0)
        return (received(end), end["sum"]["lost_percent"],
                meter.per_gb(received(end) * args.seconds / 8), socket_drops() - drops,
                100.0 * host / max(1, end["sum"]["packets"]))

    def theirs():
        drops = socket_drops()
        with CpuMeter(ports["iperf3_pid"]) as meter:
            try:
                end = iperf3_json(ports["iperf3"], *flags,
                                  *(["--gsro"] if args.gsro else []))["end"]
            except subprocess.CalledProcessError:  # iperf3's server, loaded
                return None
        return (received(end), end["sum"]["lost_percent"],
                meter.per_gb(received(end) * args.seconds / 8), socket_drops() - drops)

    def show(run, mine, other):
        print(f"udp run {run + 1}: simpleperf {mine[0] / 1e9:6.2f} Gbit/s received, "
              f"{mine[1]:5.2f}% lost ({mine[4]:.2f}% by the receiving host; socket drops "
              f"{mine[3]})   iperf3 {other[0] / 1e9:6.2f} Gbit/s received, "
              f"{other[1]:5.2f}% lost (socket drops {other[3]})", flush=True)

    mine, other = alternate(args.runs, ours, theirs, show)
    goodput = statistics.median(m[0] for m in mine) / statistics.median(o[0] for o in other)
    print(f"udp median: simpleperf {statistics.median(m[0] for m in mine) / 1e9:.2f} Gbit/s "
          f"({statistics.median(m[1] for m in mine):.2f}% lost), iperf3 "
          f"{statistics.median(o[0] for o in other) / 1e9:.2f} Gbit/s "
          f"({statistics.median(o[1] for o in other):.2f}% lost), goodput ratio "
          f"{goodput:.3f} ({'ok' if goodput >= 1.0 else 'BELOW TARGET 1.0'})", flush=True)
    for tool, runs in (("simpleperf", mine), ("iperf3", other)):
        client = statistics.median(m[2][0] for m in runs)
        server = statistics.median(m[2][1] for m in runs)
        print(f"udp CPU seconds per GB received, {tool}: client {client:.3f} + server "
              f"{server:.3f} = {client + server:.3f}", flush=True)


def bench_reverse(args, ports) -> None:
    for flag in ("-R", "--bidir"):
        flags = [flag, "-t", str(args.seconds)]
        mine, other = alternate(
            args.runs, lambda f=flags: received(simpleperf_json(ports["simpleperf"], *f)["end"]),
            lambda f=flags: received(iperf3_json(ports["iperf3"], *f)["end"]),
            lambda run, m, o, f=flag: print(f"tcp {f} run {run + 1}: simpleperf "
                                            f"{m / 1e9:6.2f} Gbit/s   iperf3 {o / 1e9:6.2f} "
                                            "Gbit/s", flush=True))
        ratio = statistics.median(mine) / statistics.median(other)
        print(f"tcp {flag} median: simpleperf {statistics.median(mine) / 1e9:.2f} Gbit/s, "
              f"iperf3 {statistics.median(other) / 1e9:.2f} Gbit/s, ratio {ratio:.3f} "
              f"({'ok' if ratio >= 0.95 else 'BELOW TARGET 0.95'})", flush=True)


def bench_iperf3(args, ports) -> None:
    """The reference's own client against our server and its own, alternately: goodput,
    loss (ours split by where it happened, from our server's report), each server's CPU
    seconds per GB received and the datagrams (or coalesced reads) the sockets dropped."""
    gsro = ["--gsro"] if args.gsro else []
    for name, flags in (("tcp", []), ("udp", ["-u", "-b", "0", "-l", "1470", *gsro])):
        flags = [*flags, "-t", str(args.seconds)]

        def run(server, f=flags):
            drops, lines = socket_drops(), len(server_lines(server))
            with CpuMeter(ports[f"{server}_pid"]) as meter:
                try:
                    end = iperf3_json(ports[server], *f)["end"]
                except subprocess.CalledProcessError as failed:  # iperf3's server, loaded
                    print(f"  the client at {server}'s server failed: "
                          f"{failed.stdout.strip().splitlines()[-3:]}", flush=True)
                    return None
            rate = received(end)
            return (rate, end.get("sum", {}).get("lost_percent", 0.0), socket_drops() - drops,
                    meter.per_gb(rate * args.seconds / 8)[1],
                    host_lost(server_lines(server)[lines:]) if server == "simpleperf" else "")

        mine, other = alternate(
            args.runs, lambda r=run: r("simpleperf"), lambda r=run: r("iperf3"),
            lambda i, m, o, n=name: print(
                f"iperf3 client {n} run {i + 1}: to simpleperf {m[0] / 1e9:6.2f} Gbit/s "
                f"({m[1]:.2f}% lost{m[4]}, socket drops {m[2]}, server {m[3]:.3f} s/GB)   "
                f"to iperf3 {o[0] / 1e9:6.2f} Gbit/s ({o[1]:.2f}% lost, socket drops {o[2]}, "
                f"server {o[3]:.3f} s/GB)", flush=True))
        ratio = statistics.median(m[0] for m in mine) / statistics.median(o[0] for o in other)
        lost = [statistics.median(r[1] for r in runs) for runs in (mine, other)]
        cpu = [statistics.median(r[3] for r in runs) for runs in (mine, other)]
        met = ratio >= 0.95 if name == "tcp" else (  # #17's TCP target; #52's for UDP
            ratio >= 1.0 and lost[0] <= lost[1] + 0.5 and cpu[0] <= cpu[1])
        target = "goodput 0.95" if name == "tcp" else "goodput 1.0, loss +0.5 point, CPU 1.0"
        print(f"iperf3 client {name} median: simpleperf server "
              f"{statistics.median(m[0] for m in mine) / 1e9:.2f} Gbit/s ({lost[0]:.2f}% lost, "
              f"{cpu[0]:.3f} s/GB), iperf3 server "
              f"{statistics.median(o[0] for o in other) / 1e9:.2f} Gbit/s ({lost[1]:.2f}% lost, "
              f"{cpu[1]:.3f} s/GB): goodput ratio {ratio:.3f}, CPU ratio {cpu[0] / cpu[1]:.2f} "
              f"({'ok' if met else 'BELOW TARGET: ' + target})",
              flush=True)


SERVER_LOG = {}  # each server's stdout, a file the bench reads back


def server_lines(server: str) -> list[str]:
    with open(SERVER_LOG[server]) as log:
        return log.read().splitlines()


def host_lost(lines: list[str]) -> str:
    """Our server's split of a test's loss, from the receiver line of its report."""
    for line in reversed(lines):
        if "by the receiving host" in line:
            return ": " + line.split("%: ", 1)[1].split(")")[0]
    return ""


def bench_concurrency(args, ports) -> None:
    port = ports["simpleperf"]
    alone = received(simpleperf_json(port, "-t", "5")["end"])
    clients = args.clients
    start_at = time.monotonic() + 3 + clients * 0.08
    processes = [subprocess.Popen(
        [sys.executable, "-m", "simpleperf.lab.run.launch", f"{start_at:.6f}", "--", "simpleperf",
         "-c", "-p", str(port), "-t", "5", "-J", "--no-latency", "--native"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(clients)]
    rates, failures, starts, flows = [], [], [], []
    for process in processes:
        out, err = process.communicate(timeout=120)
        if process.returncode != 0:
            failures.append(err.strip())
            continue
        mark, document = out.split("\n", 1)
        starts.append(float(mark.split()[1]))
        parsed = json.loads(document)
        end = parsed["end"]
        streams = end["streams"][0]
        if streams["sender"]["bytes"] != streams["receiver"]["bytes"]:
            failures.append("sender and receiver disagree")
        rates.append(received(end))
        began = end["measurement_start"]["monotonic"]
        flows.append([(began + i["sum"]["start"], began + i["sum"]["end"], i["sum"]["bytes"])
                      for i in parsed["server_intervals"]])
    total = sum(rates)
    whole = jain_index(rates) if rates else 0.0
    shared = [r for r in rates_while_all_ran(flows) if r is not None] if flows else []
    fairness = jain_index(shared) if shared else 0.0
    with open(f"/proc/{ports['simpleperf_pid']}/status") as status:
        peak = next(line.split()[1] for line in status if line.startswith("VmHWM"))
    print(f"concurrency: {len(rates)}/{clients} tests completed, start spread "
          f"{(max(starts) - min(starts)) * 1e3:.1f} ms, Jain's index while all ran "
          f"{fairness:.3f} ({'ok' if fairness >= 0.9 else 'BELOW TARGET 0.9'}; over whole "
          f"tests {whole:.3f}), per test {min(rates) / 1e6:.0f}..{max(rates) / 1e6:.0f} "
          f"Mbit/s, aggregate {total / 1e9:.2f} Gbit/s = {total / alone:.2f} x one stream "
          f"alone ({alone / 1e9:.2f} Gbit/s), server peak memory {int(peak) / 1024:.1f} MiB",
          flush=True)
    for failure in failures[:3]:
        print(f"  failed: {failure}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("udp", "reverse", "concurrency", "iperf3"))
    parser.add_argument("--iperf3", default="iperf3", help="the reference iperf3 binary")
    parser.add_argument("--gsro", action="store_true", help="iperf3's UDP with --gsro")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--port", type=int, default=15301)
    parser.add_argument("--conditions", default="quiet,busy",
                        help="quiet, busy (a process spinning on CPU 0), or both")
    args = parser.parse_args()
    conditions = args.conditions.split(",")
    if not conditions or set(conditions) - {"quiet", "busy"}:
        print("bench: --conditions takes quiet, busy or both", file=sys.stderr)
        return 2
    if not shutil.which(args.iperf3):
        print(f"bench: {args.iperf3} is not installed (apt-get install iperf3)", file=sys.stderr)
        return 1
    IPERF3[:] = [args.iperf3]
    print("reference: " + subprocess.run([args.iperf3, "--version"], capture_output=True,
                                         text=True).stdout.split("(")[0].strip())
    with contextlib.ExitStack() as stack:
        logs = {name: stack.enter_context(tempfile.NamedTemporaryFile(
            "w+", prefix=f"bench-{name}-", suffix=".log")) for name in ("iperf3", "simpleperf")}
        run_servers(args, conditions, logs)
    return 0


def run_servers(args, conditions: list[str], logs: dict) -> None:
    SERVER_LOG.update((name, log.name) for name, log in logs.items())
    servers = [subprocess.Popen([args.iperf3, "-s", "-p", str(args.port)],
                                stdout=logs["iperf3"]),
               subprocess.Popen(SIMPLEPERF + ["-s", "-p", str(args.port + 1)],
                                stdout=logs["simpleperf"])]
    ports = {"iperf3": args.port, "simpleperf": args.port + 1,
             "simpleperf_pid": servers[1].pid, "iperf3_pid": servers[0].pid}
    time.sleep(1)
    try:
        for condition in conditions:
            print(f"condition: {condition}" + (" (a second process spinning on CPU 0)"
                                               if condition == "busy" else ""), flush=True)
            with busy_cpu(condition == "busy"):
                for name, bench in (("udp", bench_udp), ("reverse", bench_reverse),
                                    ("iperf3", bench_iperf3),
                                    ("concurrency", bench_concurrency)):
                    if args.only in (None, name):
                        bench(args, ports)
    finally:
        for server in servers:
            server.send_signal(signal.SIGINT)
            server.wait(10)


if __name__ == "__main__":
    sys.exit(main())
