#!/usr/bin/env python3
"""Queue disciplines on a pair link, each beside drop-tail measured in the same run (needs
root). Every line prints the measurement, its target and ok/MISS:

  - CoDel, one saturating CUBIC flow at 10 and 100 Mbit/s, a 1000-packet buffer, 10 ms
    delay: the standing queue's delay (ping RTT beside the flow minus the idle RTT) at the
    median within [target, 3 x target]; goodput at least 0.95 x drop-tail's, whose queue
    delay (the full buffer's) is printed beside it;
  - FQ-CoDel and CAKE, a ping beside four bulk CUBIC flows: ping RTT p50 <= base +
    2 x target;
  - ECN: CoDel with ECN and both hosts asking for it: CE marks counted at the receiver,
    retransmissions at most a tenth of the same run without ECN;
  - DualPI2 (L4S): a UDP flow with simpleperf's scalable response (--l4s, ECT(1)) beside a
    classic CUBIC flow at 10 and 20 Mbit/s: the L4S flow's queue delay p99 (its one-way
    delay's p99 less the path's least) <= 2 ms while the classic queue
    (ping RTT less the idle RTT) stands near the 15 ms target; beside it the same flows
    through drop-tail;
  - a trace: one saturating CUBIC flow over the shipped constant-12M and lte-walk traces
    delivers within 3 % of what the trace offered over the run (less TCP/IP headers);
  - the own disciplines beside the kernel's (`--only kernel`, on a kernel that has netem and
    them: scripts/netem-guest): CoDel and PIE with one CUBIC flow, FQ-CoDel and CAKE with
    four, and DiffServ classes (the kernel's htb tree) with one, at 2 Mbit/s (what the
    emulated guest carries), CAKE again at 1 Mbit/s, and 10 ms each way: the queue delay
    the flows stand in (their TCP smoothed RTT from once the load runs, less the idle ping
    RTT before it, medians) and the goodput of the own shaper's implementation over the
    kernel's, each within 10 %;
    beside them, shown, a ping's queue delay (for the fair queues a sparse flow's, mostly
    the frame on the wire it waits behind: 3 ms at that rate, near the guest's noise);
  - the own discipline's capacity with 10 ms delay: the highest of 100M, 300M, 1G that four
    TCP flows fill to 0.9 x through fq_codel, and the delay lines' CPU; beside it one flow
    through fq_codel (whose CUBIC sawtooth a 5 ms queue cannot cover: after a drop its
    window falls below the path's, whatever carries it) and one through drop-tail (the
    kernel's pfifo and tbf, the delay line only delaying).

    python3 bench/queues.py [--quick] [--shaper own|netem] [--only codel,fq_codel,ecn,dualpi2,
                                                                trace,capacity,kernel]
    bash scripts/netem-guest --command "python3 bench/queues.py --quick --only kernel"

With the own shaper (this machine: its kernel has no AQM qdiscs) the disciplines are the
lab's own, in the delay line; with --shaper netem on a kernel that has them (scripts/netem-
guest), the kernel's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

from simpleperf.lab.model import topology
from simpleperf.lab.net import lifecycle, ownership

PYTHON = sys.executable
SHAPER: str | None = None
BASE_RTT_MS = 20.0  # 10 ms each way


def report(name: str, measured: str, target: str, ok: bool | None) -> None:
    verdict = {True: "ok", False: "MISS", None: "info"}[ok]
    print(f"{name:<46} {measured:<44} {target:<26} {verdict}", flush=True)


def in_node(node: str, *command: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", node, *command], capture_output=True,
                          text=True, timeout=timeout)


def up(shaper: str | None = None, **spec) -> None:
    if ownership.load("pair"):
        lifecycle.down("pair")
    lifecycle.up(topology.pair(**spec), {"pair": spec}, shaper or SHAPER, say=lambda _: None)


def counters(node: str) -> dict[str, int]:
    lines = in_node(node, "nstat", "-a", "-z").stdout.splitlines()[1:]
    return {fields[0]: int(fields[1]) for fields in map(str.split, lines) if len(fields) > 1}


def load(seconds: float, flows: int = 1, ecn: bool = False, ping_every: float = 0.1,
         settle: float = 2.0) -> dict:
    """`flows` CUBIC flows h1 -> h2 for `seconds`, pings beside them after `settle` s: the
    goodput, the pings' RTTs, and the hosts' CE and retransmission counters."""
    for node in ("h1", "h2"):
        in_node(node, "sysctl", "-qw", f"net.ipv4.tcp_ecn={1 if ecn else 0}",
                "net.ipv4.tcp_wmem=4096 16384 33554432", "net.ipv4.tcp_rmem=4096 131072 33554432")
    port = "18099"
    server = subprocess.Popen(["ip", "netns", "exec", "h2", PYTHON, "-m", "simpleperf", "-s",
                               "-p", port], stdout=subprocess.DEVNULL)
    try:
        listening(port)
        client = subprocess.Popen(["ip", "netns", "exec", "h1", PYTHON, "-m", "simpleperf",
                                   "-c", "-I", "10.0.0.2", "-p", port, "-t", str(seconds),
                                   "-P", str(flows), "--native", "-J", "--no-latency",
                                   "-C", "cubic", "-i", "0.5"], stdout=subprocess.PIPE,
                                  text=True)
        started = sending(port)
        time.sleep(settle)
        count = int((seconds - 0.5 - (time.monotonic() - started)) / ping_every)
        pings = in_node("h1", "ping", "-n", "-c", str(count), "-i", str(ping_every), "-W", "2",
                        "10.0.0.2").stdout
        out, _ = client.communicate(timeout=seconds + 60)
    finally:
        server.terminate()
        server.wait(10)
    rtts = [float(m) for m in re.findall(r"time=([\d.]+) ms", pings)]
    sent, received = counters("h1"), counters("h2")
    document = json.loads(out)
    if document.get("error"):
        raise LoadFailed(document["error"])
    return {"goodput": document["end"]["sum_received"]["bits_per_second"],
            "rtts": rtts, "flow_rtts": [stream["rtt"] / 1e3 for interval in
                                        document["intervals"] if interval["sum"]["start"]
                                        >= settle for stream in interval["streams"]
                                        if "rtt" in stream],
            "ce": received.get("IpExtInCEPkts", 0),
            "retransmitted": sent.get("TcpRetransSegs", 0)}


class LoadFailed(Exception):
    """The load's client ended with an error (its JSON document's)."""


def sending(port: str, seconds: float = 60.0) -> float:
    """Wait until h1's client has a connection to `port` (its test starts then: an
    interpreter takes tens of seconds to start in the emulated guest, and pings sent before
    would measure an idle link): when it was seen."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not in_node(
            "h1", "ss", "-Htn", "state", "established", f"dport = :{port}").stdout.strip():
        time.sleep(0.1)
    return time.monotonic()


def listening(port: str, seconds: float = 20.0) -> None:
    """Wait until h2's server listens on `port` (a slow machine, such as the emulated
    guest, takes more than a fixed pause)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not in_node(
            "h2", "ss", "-Hltn", f"sport = :{port}").stdout.strip():
        time.sleep(0.1)


def beside_droptail(qdisc: str, measure, **link) -> dict:
    """`measure()` on a pair link of `link` with drop-tail, then with `qdisc`: the two
    results by discipline, the lab taken down after each."""
    runs = {}
    for each in ("droptail", qdisc):
        up(qdisc=each, **link)
        runs[each] = measure()
        lifecycle.down("pair")
    return runs


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def codel_checks(seconds: float) -> None:
    for rate_text in ("10M", "100M"):
        runs = beside_droptail("codel", lambda: load(seconds), rate=rate_text, delay="10ms",
                               queue=1000)
        tail, codel = runs["droptail"], runs["codel"]
        standing = median(codel["rtts"]) - BASE_RTT_MS
        report(f"codel {rate_text}: standing queue delay", f"{standing:.1f} ms (drop-tail "
               f"{median(tail['rtts']) - BASE_RTT_MS:.1f} ms)", "5 to 15 ms",
               5 <= standing <= 15)
        ratio = codel["goodput"] / tail["goodput"]
        report(f"codel {rate_text}: goodput / drop-tail's",
               f"{ratio:.3f} ({codel['goodput'] / 1e6:.2f} / {tail['goodput'] / 1e6:.2f} "
               "Mbit/s)", ">= 0.95", ratio >= 0.95)


def fq_codel_checks(seconds: float) -> None:
    for qdisc in ("fq_codel", "cake"):
        runs = beside_droptail(qdisc, lambda: load(seconds, flows=4), rate="10M",
                               delay="10ms", queue=1000)
        ping = median(runs[qdisc]["rtts"])
        report(f"{qdisc}: ping p50 beside 4 flows", f"{ping:.1f} ms (drop-tail "
               f"{median(runs['droptail']['rtts']):.1f} ms)", f"<= {BASE_RTT_MS + 10:g} ms",
               ping <= BASE_RTT_MS + 10)


def ecn_checks(seconds: float) -> None:
    runs = {}
    for ecn in (False, True):
        up(rate="10M", delay="10ms", queue=1000, qdisc="codel", ecn=ecn)
        runs[ecn] = load(seconds, ecn=ecn)
        lifecycle.down("pair")
    marked, plain = runs[True], runs[False]
    report("codel ecn: CE marks at the receiver", f"{marked['ce']} (without ECN "
           f"{plain['ce']})", "> 0", marked["ce"] > 0)
    report("codel ecn: retransmissions", f"{marked['retransmitted']} (without ECN "
           f"{plain['retransmitted']})", "<= 0.1 x without",
           marked["retransmitted"] <= 0.1 * max(plain["retransmitted"], 1))


def l4s_beside_classic(seconds: float) -> dict:
    """A classic CUBIC flow h1 -> h2 for `seconds`, and from 2 s an --l4s UDP flow beside
    it in the same direction (its client in h2 with -R, so that the receiving end's rows
    carry each second's one-way delays) and classic pings: the L4S flow's document, the
    classic flow's goodput, the pings' RTTs."""
    servers = [subprocess.Popen(["ip", "netns", "exec", node, PYTHON, "-m", "simpleperf",
                                 "-s", "-p", port], stdout=subprocess.DEVNULL)
               for node, port in (("h2", "18098"), ("h1", "18097"))]
    try:
        time.sleep(0.7)
        classic = subprocess.Popen(["ip", "netns", "exec", "h1", PYTHON, "-m", "simpleperf",
                                    "-c", "10.0.0.2", "-p", "18098", "-t", str(seconds),
                                    "--native", "-J", "--no-latency", "-C", "cubic"],
                                   stdout=subprocess.PIPE, text=True)
        time.sleep(2)
        pinger = subprocess.Popen(["ip", "netns", "exec", "h1", "ping", "-n", "-c",
                                   str(int((seconds - 3) / 0.1)), "-i", "0.1", "10.0.0.2"],
                                  stdout=subprocess.PIPE, text=True)
        scalable = in_node("h2", PYTHON, "-m", "simpleperf", "-c", "10.0.0.1", "-p", "18097",
                           "-t", str(seconds - 3), "-u", "--l4s", "--trip-times", "-J",
                           "--no-latency", "-R")
        pings, _ = pinger.communicate(timeout=seconds + 30)
        out, _ = classic.communicate(timeout=seconds + 60)
    finally:
        for server in servers:
            server.terminate()
            server.wait(10)
    return {"l4s": json.loads(scalable.stdout), "classic": json.loads(out)["end"]["sum_received"],
            "rtts": [float(m) for m in re.findall(r"time=([\d.]+) ms", pings)]}


def l4s_queue_delay(document: dict, floor: float) -> tuple[float, float]:
    """The L4S flow's queue delay, ms: its one-way p99 over the whole run less `floor` (the
    path's least one-way delay), and the worst second's p99 less it."""
    seconds = [stream["one_way_delay"]["p99_ms"] for interval in document["intervals"]
               for stream in interval["streams"]
               if stream.get("one_way_delay", {}).get("p99_ms") is not None]
    whole = document["end"]["streams"][0]["receiver"]["one_way_delay"]["p99_ms"]
    return whole - floor, max(seconds, default=float("nan")) - floor


def dualpi2_checks(seconds: float) -> None:
    for rate_text in ("10M", "20M"):
        runs = beside_droptail("dualpi2", lambda: l4s_beside_classic(seconds),
                               rate=rate_text, delay="10ms", queue=1000)
        receiver = runs["dualpi2"]["l4s"]["end"]["streams"][0]["receiver"]
        floor = receiver["one_way_delay"]["min_ms"]  # its queue empties: the path's least
        (whole, worst), (tail_whole, _) = (l4s_queue_delay(runs[q]["l4s"], floor)
                                           for q in ("dualpi2", "droptail"))
        report(f"dualpi2 {rate_text}: L4S queue delay p99", f"{whole:.2f} ms, its worst "
               f"second {worst:.2f} (drop-tail {tail_whole:.0f} ms)", "<= 2 ms", whole <= 2)
        classic, tail_classic = (median(runs[q]["rtts"]) - BASE_RTT_MS
                                 for q in ("dualpi2", "droptail"))
        report(f"dualpi2 {rate_text}: classic queue delay p50", f"{classic:.1f} ms (drop-tail "
               f"{tail_classic:.1f} ms)", "near 15 ms (5 to 30)", 5 <= classic <= 30)
        report(f"dualpi2 {rate_text}: L4S / classic goodput",
               f"{receiver['bits_per_second'] / 1e6:.2f} / "
               f"{runs['dualpi2']['classic']['bits_per_second'] / 1e6:.2f} Mbit/s, "
               f"{receiver.get('ce_marked', 0)} CE", "info", None)


def trace_checks(seconds: float) -> None:
    from simpleperf.lab.model import traces

    for name in ("constant-12M", "lte-walk"):
        up(trace=name, delay="10ms", queue=1000)
        created = ownership.load("pair").created
        began = time.time()
        result = load(seconds, ping_every=0.5, settle=0.5)
        lifecycle.down("pair")
        trace = traces.load(name)
        # the client's run, on the trace's clock (it started when the lab was created)
        start = began + 0.7 - created
        offered = trace.offered(start, start + seconds) * 1448 / 1500
        ratio = result["goodput"] / offered
        report(f"trace {name}: goodput / offered", f"{ratio:.3f} ({result['goodput'] / 1e6:.2f}"
               f" / {offered / 1e6:.2f} Mbit/s)", "0.97 to 1.03", 0.97 <= ratio <= 1.03)


def process_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def capacity_checks(seconds: float) -> None:
    highest = None
    for rate_text, rate in (("100M", 100e6), ("300M", 300e6), ("1G", 1e9)):
        cells = {}
        for qdisc, flows in (("droptail", 1), ("fq_codel", 1), ("fq_codel", 4)):
            up(qdisc=qdisc, rate=rate_text, delay="10ms",
               queue=max(1000, int(rate * 0.02 / (1514 * 8))))
            lines = [p.pid for p in ownership.load("pair").processes]
            before = process_seconds(lines)
            result = load(seconds, flows=flows, ping_every=0.5)
            cells[qdisc, flows] = (result["goodput"] / rate,
                                   (process_seconds(lines) - before) / seconds)
            lifecycle.down("pair")
        carried, cpu = cells["fq_codel", 4]
        if carried >= 0.9:
            highest = rate_text
        report(f"fq_codel {rate_text} with 10ms delay, 4 flows", f"{carried:.3f} x rate, "
               f"delay lines {cpu:.2f} cores", ">= 0.9 x", carried >= 0.9)
        report("  the same, one flow; drop-tail, one flow", f"{cells['fq_codel', 1][0]:.3f} x "
               f"({cells['fq_codel', 1][1]:.2f}); {cells['droptail', 1][0]:.3f} x "
               f"({cells['droptail', 1][1]:.2f} cores)", "(shown)", None)
    report("own discipline: highest rate at 0.9 x", highest or "none", "1G (goal)",
           highest == "1G")


# The kernel's disciplines run in the emulated guest (scripts/netem-guest), whose one
# emulated CPU does not carry 10 Mbit/s through a delay line and a sender at once.
KERNEL_RATE = "2M"
# CAKE once more at 1 Mbit/s, where a frame takes 12 ms (its drop threshold, four frame
# times, 48 ms).
CAKE_SLOW_RATE = "1M"


def kernel_checks(seconds: float) -> None:
    """Each discipline with the own shaper's implementation and with the kernel's (netem
    shaper), the same load: own over kernel for queue delay and goodput."""
    for qdisc, flows, rate in (("codel", 1, KERNEL_RATE), ("fq_codel", 4, KERNEL_RATE),
                               ("pie", 1, KERNEL_RATE), ("cake", 4, KERNEL_RATE),
                               ("cake", 4, CAKE_SLOW_RATE), ("classes", 1, KERNEL_RATE)):
        runs = {}
        for shaper in ("netem", "own"):
            up(shaper, qdisc=qdisc, rate=rate, delay="10ms", queue=1000)
            idle = median([float(m) for m in re.findall(r"time=([\d.]+) ms", in_node(
                "h1", "ping", "-n", "-c", "20", "-i", "0.1", "10.0.0.2").stdout)])
            try:
                runs[shaper] = {**load(seconds * 1.5, flows=flows), "idle": idle}
            except LoadFailed as error:
                report(f"{qdisc} {rate} ({shaper}): the load", f"failed: {error}", "runs",
                       False)
            finally:
                lifecycle.down("pair")
        if len(runs) < 2:
            continue
        for what, key, judged in (("the flows' queue delay", "flow_rtts", True),
                                  ("the ping's queue delay", "rtts", False)):
            delays = {shaper: median(run[key]) - run["idle"] for shaper, run in runs.items()}
            ratio = delays["own"] / delays["netem"] if delays["netem"] > 0 else float("nan")
            report(f"{qdisc} {rate}: {what}, own / kernel's", f"{ratio:.3f} ({delays['own']:.1f} / "
                   f"{delays['netem']:.1f} ms)", "0.9 to 1.1" if judged else "(shown)",
                   0.9 <= ratio <= 1.1 if judged else None)
        goodput = runs["own"]["goodput"] / runs["netem"]["goodput"]
        report(f"{qdisc} {rate}: goodput, own / kernel's", f"{goodput:.3f} ("
               f"{runs['own']['goodput'] / 1e6:.2f} / {runs['netem']['goodput'] / 1e6:.2f} "
               "Mbit/s)", "0.9 to 1.1", 0.9 <= goodput <= 1.1)


def main() -> int:
    global SHAPER
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter transfers")
    parser.add_argument("--shaper", choices=("own", "netem"))
    parser.add_argument("--only", help="a comma-separated list of the checks to run")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench: needs root (network namespaces)", file=sys.stderr)
        return 1
    SHAPER = args.shaper
    seconds = 8.0 if args.quick else 15.0
    print(f"{'':<46} {'measured (same-run drop-tail)':<44} {'target':<26}")
    checks = {"codel": codel_checks, "fq_codel": fq_codel_checks, "ecn": ecn_checks,
              "dualpi2": dualpi2_checks, "trace": trace_checks,
              "capacity": lambda s: capacity_checks(s / 2), "kernel": kernel_checks}
    chosen = args.only.split(",") if args.only else [name for name in checks
                                                      if name != "kernel"]
    unknown = [name for name in chosen if name not in checks]
    if unknown:
        print(f"bench: no check {unknown[0]} (there are {', '.join(checks)})",
              file=sys.stderr)
        return 2
    for name in chosen:
        checks[name](seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
