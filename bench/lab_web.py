#!/usr/bin/env python3
"""What `simpleperf lab web` costs and how fast its page is (root, Debian's chromium and
chromium-driver): for the portfolio (15 nodes, 14 links), 20 hosts on a switch (20 links)
and 200 hosts on a switch (200 links), each up in turn:

- the page's load time: from the browser's request to the topology drawn, beside
  `simpleperf lab status` for the same lab (what a user types instead);
- its update rate: live readings the page received a second;
- the console's CPU share (cores) while the page watches, beside `simpleperf lab status`
  run once a second (`watch -n 1`, the console's command-line stand-in), both measured
  over the same seconds.

    sudo python3 bench/lab_web.py [--seconds 20]

With --soak SECONDS it measures, instead, whether the console stays flat: a lab of 20
shaped links up (its nodes named apart from the shipped labs', so that it can run beside
them), 16 live connections (the most it takes) each dropped and opened again every minute, a
flow started from the page and a link reshaped every 30 s, and every minute the console's
threads, open descriptors and resident memory; the last line gives each one's change
after the first two minutes (warm-up: its executor's threads are made as work comes).

    sudo python3 bench/lab_web.py --soak 3600
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from selenium import webdriver

SIMPLEPERF = [sys.executable, "-m", "simpleperf"]
TICKS = os.sysconf("SC_CLK_TCK")


def switch_lab(hosts: int, name: str = "", prefix: str = "h", rate: str = "") -> str:
    """`hosts` hosts on one switch: as many links (`rate`: each shaped so)."""
    lines = [f'name = "{name or f"web{hosts}"}"', "[hosts]"]
    lines += [f"{prefix}{i} = {{}}" for i in range(1, hosts + 1)]
    lines += ["[switches]", f"{prefix}s = {{}}"]
    for i in range(1, hosts + 1):
        lines += ["[[links]]", f'a = "{prefix}{i}"',
                  f'a_address = "10.30.{i // 250}.{i % 250 + 1}/16"', f'b = "{prefix}s"']
        lines += [f'bw = "{rate}"'] if rate else []
    return "\n".join(lines) + "\n"


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def browser() -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for argument in ("--headless=new", "--no-sandbox", "--window-size=1400,900"):
        options.add_argument(argument)
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(
        shutil.which("chromedriver") or "chromedriver"))


def measure(lab: str, nodes: int, seconds: float) -> None:
    status_began = time.monotonic()
    subprocess.run([*SIMPLEPERF, "lab", "status", lab], check=True, stdout=subprocess.DEVNULL)
    status_took = time.monotonic() - status_began
    console = subprocess.Popen([*SIMPLEPERF, "lab", "web", "--port", "8397"],
                               stdout=subprocess.PIPE, text=True)
    page = browser()
    try:
        assert console.stdout is not None
        address = re.search(r"http://\S+", console.stdout.readline())
        assert address, "lab web printed no address"
        time.sleep(2)  # listening, its first reading taken
        began = time.monotonic()
        page.get(address[0])
        while not page.execute_script("const s = window.simpleperfConsole; return s && "
                                      f"s.drawn && s.drawn.nodes === {nodes}"):
            if time.monotonic() - began > 120:
                raise SystemExit(f"{lab}: the page did not draw {nodes} nodes in 120 s")
            time.sleep(0.05)
        load = time.monotonic() - began
        first = page.execute_script("return window.simpleperfConsole.updates")
        cpu_before, clock_before = cpu_seconds(console.pid), time.monotonic()
        time.sleep(seconds)
        console_cpu = (cpu_seconds(console.pid) - cpu_before) / (time.monotonic() -
                                                                 clock_before)
        updates = (page.execute_script("return window.simpleperfConsole.updates") - first) \
            / seconds
    finally:
        page.quit()
        console.terminate()
        console.wait(20)
    # the stand-in: lab status once a second, for as long
    before = os.times()
    watched_began = time.monotonic()
    while time.monotonic() - watched_began < seconds:
        tick = time.monotonic()
        subprocess.run([*SIMPLEPERF, "lab", "status", lab], check=True,
                       stdout=subprocess.DEVNULL)
        time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
    after = os.times()
    status_cpu = (after.children_user + after.children_system - before.children_user -
                  before.children_system) / (time.monotonic() - watched_began)
    print(f"{lab:>10} {nodes:>5} {load:9.2f} {status_took:9.2f} {load / status_took:7.2f} "
          f"{updates:8.2f} {console_cpu:9.3f} {status_cpu:9.3f} "
          f"{console_cpu / status_cpu:7.2f}", flush=True)


def usage(pid: int) -> tuple[int, int, int]:
    """A process's threads, open descriptors and resident memory (KB)."""
    fields = dict(line.split(":", 1) for line in
                  Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return (int(fields["Threads"]), len(os.listdir(f"/proc/{pid}/fd")),
            int(fields["VmRSS"].split()[0]))


def watcher(port: str, token: str) -> http.client.HTTPConnection:
    """A live connection, its first update read."""
    connection = http.client.HTTPConnection("127.0.0.1", int(port), timeout=10)
    connection.request("GET", f"/api/live?token={token}")
    answer = connection.getresponse()
    assert answer.status == 200, answer.status
    answer.fp.readline()
    return connection


def soak(seconds: float) -> None:
    with tempfile.TemporaryDirectory() as folder:
        spec = Path(folder) / "soak.toml"
        spec.write_text(switch_lab(20, "soak", "sk", "100M"))
        subprocess.run([*SIMPLEPERF, "lab", "up", str(spec)], check=True,
                       stdout=subprocess.DEVNULL, timeout=900)
    port = "8398"
    console = subprocess.Popen([*SIMPLEPERF, "lab", "web", "--port", port],
                               stdout=subprocess.PIPE, text=True)
    watchers: list[http.client.HTTPConnection] = []
    try:
        assert console.stdout is not None
        found = re.search(r"token=(\S+)", console.stdout.readline())
        assert found, "lab web printed no address"
        token = found[1]
        time.sleep(2)
        headers = {"X-Simpleperf-Token": token, "Content-Type": "application/json"}

        def ask(path: str, body: dict) -> None:
            connection = http.client.HTTPConnection("127.0.0.1", int(port), timeout=60)
            connection.request("POST", path, json.dumps(body), headers)
            connection.getresponse().read()
            connection.close()

        print(f"{'minute':>6} {'threads':>8} {'fds':>6} {'RSS KB':>8}", flush=True)
        began, rows, tick = time.monotonic(), [], 0
        while time.monotonic() - began < seconds:
            if tick % 60 == 0:  # every watcher dropped and opened again, then a reading
                for connection in watchers:
                    connection.close()
                if watchers:  # the console frees a place at its next update's write
                    time.sleep(1.5)
                watchers = [watcher(port, token) for _ in range(16)]
                rows.append(usage(console.pid))
                print(f"{tick // 60:>6} {rows[-1][0]:>8} {rows[-1][1]:>6} {rows[-1][2]:>8}",
                      flush=True)
            if tick % 30 == 0:
                ask("/api/labs/soak/flows", {"kind": "tcp", "from": "sk1", "to": "sk20",
                                             "duration": "5s"})
                rate = "50M" if tick % 60 == 0 else "100M"
                ask("/api/labs/soak/links/sk20-sks", {"action": "set", "set": {"rate": rate}})
            for connection in watchers:  # drain what the live connections were sent
                connection.sock.setblocking(False)
                try:
                    while connection.sock.recv(1 << 16):
                        pass
                except BlockingIOError:
                    pass
            tick += 1
            time.sleep(max(0.0, began + tick - time.monotonic()))
        if len(rows) > 2:
            warm, last = rows[2], rows[-1]
            print(f"after minute 2: threads {last[0] - warm[0]:+d}, descriptors "
                  f"{last[1] - warm[1]:+d}, memory {last[2] - warm[2]:+d} KB "
                  f"({(last[2] - warm[2]) / warm[2] * 100:+.1f} %)")
    finally:
        for connection in watchers:
            connection.close()
        console.terminate()
        console.wait(20)
        subprocess.run([*SIMPLEPERF, "lab", "down", "soak"], check=False,
                       stdout=subprocess.DEVNULL, timeout=900)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--soak", type=float, metavar="SECONDS",
                        help="measure, instead, whether the console stays flat this long")
    args = parser.parse_args()
    if args.soak:
        soak(args.soak)
        return
    print(f"{'lab':>10} {'nodes':>5} {'load s':>9} {'status s':>9} {'ratio':>7} "
          f"{'updates/s':>8} {'web CPU':>9} {'watch CPU':>9} {'ratio':>7}")
    with tempfile.TemporaryDirectory() as folder:
        for hosts in (None, 20, 200):
            if hosts is None:
                lab, nodes, spec = "portfolio", 15, "portfolio"
            else:
                lab, nodes = f"web{hosts}", hosts + 1
                spec = str(Path(folder) / f"web{hosts}.toml")
                Path(spec).write_text(switch_lab(hosts))
            subprocess.run([*SIMPLEPERF, "lab", "up", spec], check=True,
                           stdout=subprocess.DEVNULL, timeout=900)
            try:
                measure(lab, nodes, args.seconds)
            finally:
                subprocess.run([*SIMPLEPERF, "lab", "down", lab], check=False,
                               stdout=subprocess.DEVNULL, timeout=900)


if __name__ == "__main__":
    main()
