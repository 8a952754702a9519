#!/usr/bin/env python3
"""Lab fidelity, capacity and setup speed, measured on this machine (needs root).

Each line prints the measurement, its target and ok/MISS:
  - an unshaped link's RTT: what this machine (or an emulated guest) adds by itself;
  - idle RTT = 2 x sum of one-way delays (median within 1 ms), portfolio pairs;
  - TCP goodput through a bottleneck between 0.90 and 1.0 of its rate (simpleperf);
  - UDP at 90 % of the bottleneck rate loses under 0.1 % (iperf3 -u);
  - a standing queue holds its configured packets: queueing delay at overload within 10 %;
  - random loss within the 99 % binomial bounds over >= 10,000 packets;
  - jitter shows up as the RTT standard deviation within 20 %;
  - capacity of a pair link with 10 ms delay at 10M, 100M and 1G, with the CPU it costs
    (the delay lines' own and the kernel's), and the 1G link without delay beside it;
  - on a 1G link with delay and loss (single packets), the delay lines' compiled queue
    reader against the pure-Python one, alternately;
  - portfolio up/down time, beside Mininet's (Linux bridges, no controller, rate-only links)
    measured in the same run when Debian's mininet package is installed.

    python3 bench/lab_calibration.py [--quick] [--only PART]... [--shaper own|netem]
                                     [--json FILE]

bench/netem_beside_own.py runs it on this machine and in a guest kernel with netem, and
prints the columns side by side.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from simpleperf.lab.model import theory, topology
from simpleperf.lab.net import lifecycle, ownership
from simpleperf.lab.net.shaping import delayline
from simpleperf.transport import compiled

PYTHON = sys.executable
rows: list[tuple[str, str, str, bool | None]] = []
SHAPER: str | None = None  # --shaper; None: what `lab up` would choose


def report(name: str, measured: str, target: str, ok: bool | None) -> None:
    verdict = {True: "ok", False: "MISS", None: "info"}[ok]
    rows.append((name, measured, target, ok))
    print(f"{name:<44} {measured:<30} {target:<28} {verdict}", flush=True)


def in_node(node: str, *command: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", node, *command], capture_output=True,
                          text=True, timeout=timeout)


def ping_rtts(node: str, address: str, count: int, interval: float) -> list[float]:
    done = in_node(node, "ping", "-n", "-c", str(count), "-i", str(interval), "-W", "2",
                   address)
    return [float(m) for m in re.findall(r"time=([\d.]+) ms", done.stdout)]


def up(model: topology.Topology, spec: dict) -> None:
    if ownership.load(model.name):
        lifecycle.down(model.name)
    lifecycle.up(model, spec, SHAPER, say=lambda _: None)


def simpleperf_goodput(client: str, server: str, address: str, seconds: float,
                       congestion: str | None = None) -> float:
    """The receiver's goodput of one TCP stream (native protocol), in bits/s."""
    port = "18088"
    daemon = subprocess.Popen(["ip", "netns", "exec", server, PYTHON, "-m", "simpleperf", "-s",
                               "-p", port], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.7)
        done = in_node(client, PYTHON, "-m", "simpleperf", "-c", "-I", address, "-p", port,
                       "-t", str(seconds), "--native", "-J", "--no-latency",
                       *(["-C", congestion] if congestion else []))
    finally:
        daemon.terminate()
        daemon.wait(10)
    return json.loads(done.stdout)["end"]["sum_received"]["bits_per_second"]


def iperf3_udp(client: str, server: str, address: str, rate: float, seconds: float,
               length: int = 1472) -> dict:
    daemon = subprocess.Popen(["ip", "netns", "exec", server, "iperf3", "-s", "-1", "-p",
                               "15299"], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        done = in_node(client, "iperf3", "-c", address, "-p", "15299", "-u", "-b",
                       str(int(rate)), "-l", str(length), "-t", str(seconds), "-J")
        return json.loads(done.stdout)["end"]["sum"]
    finally:
        daemon.wait(15)


def portfolio_checks(quick: bool) -> None:
    model = topology.load("portfolio")
    up(model, {"file": model.source})
    try:
        for source, target in (("r1", "r2"), ("r2", "r3"), ("r3", "r4"), ("h1", "h4"),
                               ("h7", "h9"), ("h1", "h9")):
            expected = theory.base_rtt(model, source, target) * 1e3
            rtts = ping_rtts(source, str(model.address_of(target)), 25, 0.1)
            median = statistics.median(rtts)
            report(f"portfolio idle RTT {source}-{target}", f"median {median:.2f} ms",
                   f"{expected:.1f} ms +- 1", abs(median - expected) <= 1.0)
        seconds = 5 if quick else 25  # the spec's transfer length: slow start weighs less
        # CUBIC (Linux's default) keeps the bottleneck busy, so its goodput measures the
        # link; BBR's probing (4 packets in flight for 200 ms every 10 s) is the sender's
        # choice and is shown beside it.
        for source, target in (("r1", "r2"), ("h1", "h4"), ("h7", "h9")):
            rate = theory.path(model, source, target).bottleneck
            address = str(model.address_of(target))
            goodput = simpleperf_goodput(source, target, address, seconds, "cubic")
            ratio = goodput / rate
            report(f"portfolio TCP goodput {source}-{target}",
                   f"{goodput / 1e6:.2f} Mbit/s = {ratio:.3f} x rate", "0.90 .. 1.0 x rate",
                   0.90 <= ratio <= 1.0)
            bbr = simpleperf_goodput(source, target, address, seconds, "bbr")
            report("  the same with BBR", f"{bbr / 1e6:.2f} Mbit/s = {bbr / rate:.3f} x rate",
                   "", None)
        for source, target in (("h1", "h4"), ("h7", "h9")):
            rate = theory.path(model, source, target).bottleneck
            payload_rate = 0.9 * rate * 1472 / 1514  # 90 % of the link, counted on the wire
            result = iperf3_udp(source, target, str(model.address_of(target)), payload_rate,
                                seconds)
            report(f"portfolio UDP at 90% of rate {source}-{target}",
                   f"loss {result['lost_percent']:.3f} % of {result['packets']}",
                   "< 0.1 %", result["lost_percent"] < 0.1)
    finally:
        lifecycle.down("portfolio")


def pair_checks(quick: bool) -> None:
    # What the machine adds by itself: the RTT of a link with no shaping at all.
    up(topology.pair(), {"pair": {}})
    try:
        rtts = ping_rtts("h1", "10.0.0.2", 50, 0.02)
        report("pair unshaped RTT (the machine's own)",
               f"median {statistics.median(rtts):.3f} ms, max {max(rtts):.3f}", "", None)
    finally:
        lifecycle.down("pair")
    # Standing queue: overload a 10 Mbit/s link with a 100-packet queue.
    model = topology.pair(rate="10M", delay="5ms", queue=100)
    up(model, {"pair": {"rate": "10M", "delay": "5ms", "queue": 100}})
    try:
        load = subprocess.Popen(["ip", "netns", "exec", "h2", "iperf3", "-s", "-1", "-p",
                                 "15298"], stdout=subprocess.DEVNULL)
        time.sleep(0.5)
        blaster = subprocess.Popen(["ip", "netns", "exec", "h1", "iperf3", "-c", "10.0.0.2",
                                    "-p", "15298", "-u", "-b", "20M", "-l", "1472", "-t", "6"],
                                   stdout=subprocess.DEVNULL)
        time.sleep(2)
        rtts = ping_rtts("h1", "10.0.0.2", 30, 0.1)
        blaster.wait(30)
        load.wait(15)
        queueing = statistics.median(rtts) - 10.0
        expected = 100 * 1514 * 8 / 10e6 * 1e3
        report("pair standing queue 100 pkt at 10 Mbit/s",
               f"queueing delay {queueing:.1f} ms", f"{expected:.1f} ms +- 10 %",
               abs(queueing - expected) <= 0.1 * expected)
    finally:
        lifecycle.down("pair")
    # Random loss over many packets, one direction (UDP).
    model = topology.pair(loss="1%")
    up(model, {"pair": {"loss": "1%"}})
    try:
        result = iperf3_udp("h1", "h2", "10.0.0.2", 20e6, 3 if quick else 8, length=200)
        packets, lost = result["packets"], result["lost_packets"]
        bound = 2.576 * math.sqrt(packets * 0.01 * 0.99)
        report("pair random loss 1 %", f"{lost} of {packets} = {100 * lost / packets:.3f} %",
               f"{packets * 0.01:.0f} +- {bound:.0f} (99 %)",
               packets >= 10_000 and abs(lost - packets * 0.01) <= bound)
    finally:
        lifecycle.down("pair")
    # Jitter: each direction's one-way delay has a 2 ms standard deviation.
    model = topology.pair(delay="20ms", jitter="2ms")
    up(model, {"pair": {"delay": "20ms", "jitter": "2ms"}})
    try:
        rtts = ping_rtts("h1", "10.0.0.2", 300 if quick else 1000, 0.01)
        expected = 2 * math.sqrt(2)
        spread = statistics.stdev(rtts)
        report("pair jitter 2 ms per direction", f"RTT stdev {spread:.2f} ms",
               f"{expected:.2f} ms +- 20 %", abs(spread - expected) <= 0.2 * expected)
    finally:
        lifecycle.down("pair")


def cpu_ticks() -> tuple[int, int]:
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    return sum(values) - values[3] - values[4], sum(values)  # busy, total


def process_ticks(pids: list[int]) -> tuple[int, int]:
    """User and system clock ticks the processes used so far."""
    user = system = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        user, system = user + int(fields[11]), system + int(fields[12])
    return user, system


CAPACITY_RATES = (("10M", 10e6), ("100M", 100e6), ("1G", 1e9), ("2G", 2e9), ("3G", 3e9),
                  ("5G", 5e9), ("8G", 8e9))
CARRIED = 0.9  # of the configured rate: what "carries" means in #17's capacity target


def size_host_buffers(rate: float, round_trip: float, queue: int) -> None:
    """TCP's buffers in both hosts sized to twice the path's bytes in flight (the bandwidth-
    delay product and a full queue), as anyone measuring a long fat path tunes a host: Linux's
    default 4 MB send buffer holds at most 1.6 Gbit/s at 20 ms; this measures the link."""
    in_flight = rate / 8 * round_trip + queue * theory.FRAME_BYTES
    most = max(4 << 20, int(2 * in_flight))
    for node in ("h1", "h2"):
        in_node(node, "sysctl", "-qw", f"net.ipv4.tcp_wmem=4096 16384 {most}",
                f"net.ipv4.tcp_rmem=4096 131072 {most}")


def capacity_checks(quick: bool) -> None:
    """A pair link with 10 ms delay from 10M up, until one carries less than 0.9 x its rate,
    then the same 1G link without delay (no delay line): what the rate limiter and the
    namespaces' stack carry and cost alone. The delay lines' CPU is split into their own
    (user: the Python) and the kernel's (system: queueing each packet to them, and the
    forwarding, shaping and TCP work that a release runs in their context). Last, a 1G link
    with delay and loss, whose packets reach the delay lines one by one, with the delay
    lines' compiled queue reader and with the pure-Python one, alternately."""
    seconds = 5 if quick else 10
    highest = None
    plan = [(text, rate, "10ms") for text, rate in CAPACITY_RATES] + [("1G", 1e9, None)]
    for rate_text, rate, delay in plan:
        if delay and rate > 1e9 and highest != rates_below(rate):
            continue  # a lower rate already missed
        goodput, machine, user, system = capacity_run(rate_text, rate, delay, None, seconds)
        carried = goodput >= CARRIED * rate
        if delay and carried:
            highest = rate
        target, ok = "-", None
        if rate_text == "1G" and delay:
            target, ok = ">= 0.9 Gbit/s", carried
        name = f"with {delay} delay" if delay else "without delay (no delay line)"
        report(f"pair capacity {rate_text} {name}",
               f"{goodput / 1e6:.1f} Mbit/s ({goodput / rate:.2f} x)", target, ok)
        lines = (f", delay lines {user + system:.2f} (user {user:.2f}, system "
                 f"{system:.2f})") if delay else ""
        report(f"  CPU at {rate_text}", f"{machine:.2f} cores busy ("
               f"{machine / (goodput / 1e9):.2f} per Gbit/s){lines}", "", None)
    found = "none" if highest is None else f"{highest / 1e9:g} Gbit/s"
    report("pair with 10ms delay: highest rate at 0.9 x", found, ">= 2 Gbit/s",
           highest is not None and highest >= 2e9)
    reader_checks(seconds, runs=1 if quick else 2)


def reader_checks(seconds: float, runs: int) -> None:
    """The compiled queue reader against the pure-Python one on a link whose packets come one
    by one (loss makes each direction take single packets, not aggregates): medians."""
    if compiled.used(delayline.queue_reader) is None:
        report("delay line reader: compiled vs pure Python", "not built", "-", None)
        return
    figures: dict[bool, list[tuple[float, float, float, float]]] = {False: [], True: []}
    for _ in range(runs):
        for pure in (False, True):
            figures[pure].append(capacity_run("1G", 1e9, "10ms", "0.01%", seconds, pure))
    medians = {pure: [statistics.median(column) for column in zip(*rows, strict=True)]
               for pure, rows in figures.items()}
    for pure, (goodput, machine, user, system) in medians.items():
        reader = "pure Python" if pure else "compiled"
        report(f"pair 1G, 10ms, 0.01% loss: {reader} reader",
               f"{goodput / 1e6:.1f} Mbit/s, {machine / (goodput / 1e9):.2f} cores/Gbit/s",
               "-", None)
        report("  its delay lines", f"{user + system:.2f} cores (user {user:.2f}, system "
               f"{system:.2f})", "", None)
    report("  compiled / pure Python goodput", f"{medians[False][0] / medians[True][0]:.2f}",
           ">= 1", medians[False][0] >= medians[True][0])


def capacity_run(rate_text: str, rate: float, delay: str | None, loss: str | None,
                 seconds: float, pure: bool = False) -> tuple[float, float, float, float]:
    """One TCP stream through a pair link: (goodput bit/s, machine cores busy, the delay
    lines' user and system cores). `pure`: the delay lines read without the compiled reader."""
    queue = max(100, int(rate * 0.02 / (theory.FRAME_BYTES * 8)))  # about one BDP
    spec: dict = {"rate": rate_text, "queue": queue}
    if delay:
        spec["delay"] = delay
    if loss:
        spec["loss"] = loss
    with pure_python(pure):
        up(topology.pair(**spec), {"pair": spec})
    try:
        size_host_buffers(rate, 0.02 if delay else 0.001, queue)
        daemons = [process.pid for process in ownership.load("pair").processes]
        busy0, total0 = cpu_ticks()
        user0, system0 = process_ticks(daemons)
        goodput = simpleperf_goodput("h1", "h2", "10.0.0.2", seconds)
        busy1, total1 = cpu_ticks()
        user1, system1 = process_ticks(daemons)
        hz = os.sysconf("SC_CLK_TCK")
        machine = (busy1 - busy0) / (total1 - total0) * os.cpu_count()
        user, system = ((after - before) / hz / (seconds + 1.0) for before, after
                        in ((user0, user1), (system0, system1)))
        return goodput, machine, user, system
    finally:
        lifecycle.down("pair")


@contextlib.contextmanager
def pure_python(pure: bool):
    """Processes started inside (the lab's delay lines) run without compiled code."""
    saved = os.environ.get(compiled.PURE_PYTHON_VARIABLE)
    if pure:
        os.environ[compiled.PURE_PYTHON_VARIABLE] = "1"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(compiled.PURE_PYTHON_VARIABLE, None)
        else:
            os.environ[compiled.PURE_PYTHON_VARIABLE] = saved


def rates_below(rate: float) -> float | None:
    """The capacity rate tried just before `rate`."""
    lower = [r for _, r in CAPACITY_RATES if r < rate]
    return lower[-1] if lower else None


MININET_SCRIPT = r"""
import json, sys, time
from mininet.link import TCLink
from mininet.log import setLogLevel
from mininet.net import Mininet
from mininet.node import Host
from mininet.nodelib import LinuxBridge

setLogLevel("error")

class Router(Host):
    def config(self, **params):
        super().config(**params)
        self.cmd("sysctl -qw net.ipv4.ip_forward=1")

start = time.monotonic()
net = Mininet(controller=None, switch=LinuxBridge, link=TCLink, build=False,
              autoStaticArp=False)
hosts = {}
for name, ip, gw in [("h1", "10.0.0.2", "10.0.0.1"), ("h2", "10.0.0.3", "10.0.0.1"),
                     ("h3", "10.0.0.4", "10.0.0.1"), ("h7", "10.0.2.2", "10.0.2.1"),
                     ("h8", "10.0.4.2", "10.0.4.1"), ("h4", "10.0.5.2", "10.0.5.1"),
                     ("h5", "10.0.5.3", "10.0.5.1"), ("h6", "10.0.5.4", "10.0.5.1"),
                     ("h9", "10.0.7.2", "10.0.7.1")]:
    hosts[name] = net.addHost(name, ip=ip + "/24", defaultRoute="via " + gw)
routers = {name: net.addHost(name, cls=Router, ip=None) for name in ("r1", "r2", "r3", "r4")}
s1, s2 = net.addSwitch("s1", failMode="standalone"), net.addSwitch("s2", failMode="standalone")
for h in ("h1", "h2", "h3"):
    net.addLink(hosts[h], s1)
for h in ("h4", "h5", "h6"):
    net.addLink(hosts[h], s2)
r = routers
net.addLink(r["r1"], s1, params1={"ip": "10.0.0.1/24"})
net.addLink(r["r1"], r["r2"], params1={"ip": "10.0.1.1/24"}, params2={"ip": "10.0.1.2/24"}, bw=40)
net.addLink(r["r2"], hosts["h7"], params1={"ip": "10.0.2.1/24"}, params2={"ip": "10.0.2.2/24"})
net.addLink(r["r2"], r["r3"], params1={"ip": "10.0.3.1/24"}, params2={"ip": "10.0.3.2/24"}, bw=30)
net.addLink(r["r3"], hosts["h8"], params1={"ip": "10.0.4.1/24"}, params2={"ip": "10.0.4.2/24"})
net.addLink(r["r3"], s2, params1={"ip": "10.0.5.1/24"})
net.addLink(r["r3"], r["r4"], params1={"ip": "10.0.6.1/24"}, params2={"ip": "10.0.6.2/24"}, bw=20)
net.addLink(r["r4"], hosts["h9"], params1={"ip": "10.0.7.1/24"}, params2={"ip": "10.0.7.2/24"})
net.build()
net.start()
for router, routes in {"r1": ["default via 10.0.1.2"],
                       "r2": ["10.0.0.0/24 via 10.0.1.1", "10.0.4.0/24 via 10.0.3.2",
                              "10.0.5.0/24 via 10.0.3.2", "10.0.6.0/24 via 10.0.3.2",
                              "10.0.7.0/24 via 10.0.3.2"],
                       "r3": ["10.0.0.0/24 via 10.0.3.1", "10.0.1.0/24 via 10.0.3.1",
                              "10.0.2.0/24 via 10.0.3.1", "10.0.7.0/24 via 10.0.6.2"],
                       "r4": ["default via 10.0.6.1"]}.items():
    for route in routes:
        r[router].cmd("ip route add " + route)
built = time.monotonic()
net.stop()
stopped = time.monotonic()
print(json.dumps({"up": built - start, "down": stopped - built}))
"""


def setup_speed(runs: int) -> None:
    model = topology.load("portfolio")
    ups, downs = [], []
    for _ in range(runs):
        started = time.monotonic()
        up(model, {"file": model.source})
        built = time.monotonic()
        lifecycle.down("portfolio")
        ups.append(built - started)
        downs.append(time.monotonic() - built)
    ours_up, ours_down = statistics.median(ups), statistics.median(downs)
    report("portfolio up (every link shaped), median", f"{ours_up:.3f} s", "< 1 s",
           ours_up < 1)
    report("portfolio down, median", f"{ours_down:.3f} s", "< 1 s", ours_down < 1)
    system_python = "/usr/bin/python3"
    if not (shutil.which("mnexec") and os.path.exists(system_python)):
        report("Mininet portfolio up/down", "not measured", "apt-get install mininet", None)
        return
    mininet_up, mininet_down = [], []
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:
        script.write(MININET_SCRIPT)
    try:
        for _ in range(runs):
            done = subprocess.run([system_python, script.name], capture_output=True, text=True,
                                  timeout=120)
            if done.returncode != 0:
                report("Mininet portfolio up/down", "failed: " + done.stderr.strip()[-60:], "",
                       None)
                return
            times = json.loads(done.stdout.strip().splitlines()[-1])
            mininet_up.append(times["up"])
            mininet_down.append(times["down"])
    finally:
        os.unlink(script.name)
    theirs_up, theirs_down = statistics.median(mininet_up), statistics.median(mininet_down)
    report("Mininet portfolio up (rate-only), median", f"{theirs_up:.3f} s",
           f"ours / Mininet = {ours_up / theirs_up:.2f}", None)
    report("Mininet portfolio down, median", f"{theirs_down:.3f} s",
           f"ours / Mininet = {ours_down / theirs_down:.2f}", None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    parser.add_argument("--only", choices=("portfolio", "pair", "capacity", "setup"),
                        action="append", help="run this part (repeatable; default all)")
    parser.add_argument("--shaper", choices=("own", "netem"),
                        help="the backend links use (default: what lab up would choose)")
    parser.add_argument("--json", metavar="FILE", help="also write the rows to FILE")
    args = parser.parse_args()
    global SHAPER
    SHAPER = args.shaper
    if os.geteuid() != 0:
        print("bench: needs root (network namespaces)", file=sys.stderr)
        return 1
    steps = {"setup": lambda: setup_speed(3 if args.quick else 5),
             "portfolio": lambda: portfolio_checks(args.quick),
             "pair": lambda: pair_checks(args.quick),
             "capacity": lambda: capacity_checks(args.quick)}
    for name, step in steps.items():
        if args.only is None or name in args.only:
            step()
    misses = [name for name, _, _, ok in rows if ok is False]
    print(f"\n{len([r for r in rows if r[3] is True])} ok, {len(misses)} missed"
          + (": " + "; ".join(misses) if misses else ""))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"kernel": os.uname().release, "shaper": SHAPER,
                       "rows": [dict(zip(("name", "measured", "target", "ok"), row, strict=True))
                                for row in rows]}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
