#!/usr/bin/env python3
"""A server with default limits under hostile load on 127.0.0.1: 1,000 idle connections
(from 127.0.0.2) and 100 trickling ones (a byte every 5 s, from 127.0.0.3), while a real
client (127.0.0.1) runs tests throughout. Prints the server's threads, descriptors and
memory before, during and after, and whether every real test was served.

    python3 bench/hostile.py [--idle 1000] [--trickle 100] [--seconds 20]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
import time

SIMPLEPERF = [sys.executable, "-m", "simpleperf"]


def process_figures(pid: int) -> str:
    with open(f"/proc/{pid}/status") as status:
        fields = dict(line.split(":", 1) for line in status)
    threads = int(fields["Threads"])
    rss = int(fields["VmRSS"].split()[0]) / 1024
    return f"threads {threads:4d}, descriptors {len(os.listdir(f'/proc/{pid}/fd')):4d}, " \
           f"memory {rss:6.1f} MiB"


def open_connections(port: int, count: int, source: str) -> list[socket.socket]:
    opened = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind((source, 0))
        try:
            sock.connect(("127.0.0.1", port))
        except OSError:
            sock.close()
            continue
        opened.append(sock)
    return opened


def trickle(sockets: list[socket.socket], stop: threading.Event, every: float) -> None:
    while not stop.wait(every):
        for sock in list(sockets):
            try:
                sock.send(b"\0")
            except OSError:
                sockets.remove(sock)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--trickle", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--port", type=int, default=15501)
    args = parser.parse_args()
    server = subprocess.Popen(SIMPLEPERF + ["-s", "-p", str(args.port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stop = threading.Event()
    idle: list[socket.socket] = []
    trickling: list[socket.socket] = []
    try:
        time.sleep(1.0)
        print(f"before: {process_figures(server.pid)}")
        idle = open_connections(args.port, args.idle, "127.0.0.2")
        trickling = open_connections(args.port, args.trickle, "127.0.0.3")
        threading.Thread(target=trickle, args=(trickling, stop, 5.0), daemon=True).start()
        print(f"opened {len(idle)} idle and {len(trickling)} trickling connections")
        served = failed = 0
        peak = ""
        ends = time.monotonic() + args.seconds
        while time.monotonic() < ends:
            done = subprocess.run(SIMPLEPERF + ["-c", "-p", str(args.port), "--native", "-t",
                                                "2", "--no-latency"],
                                  capture_output=True, text=True, timeout=60)
            served += done.returncode == 0
            failed += done.returncode != 0
            peak = process_figures(server.pid)
        print(f"during: {peak}")
        print(f"real client: {served} tests served, {failed} failed")
        stop.set()
        for sock in idle + trickling:
            sock.close()
        time.sleep(2.0)
        print(f"after:  {process_figures(server.pid)}")
        return 0 if failed == 0 and served > 0 else 1
    finally:
        stop.set()
        for sock in idle + trickling:
            sock.close()
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    sys.exit(main())
