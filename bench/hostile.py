#!/usr/bin/env python3
"""A server with default limits under hostile load on 127.0.0.1, while a real client
(127.0.0.1) runs tests throughout; each attack prints the server's figures and whether
every real test was served:

  - connections: 1,000 idle connections (from 127.0.0.2) and 100 trickling ones (a byte
    every 5 s, from 127.0.0.3): threads, descriptors and memory before, during and after;
  - memory: clients asking for the largest buffers (-R -P 16 -l 64M, 1 GB a test, and
    -R -P 2 -l 64M, 128 MB, four at once) against the default --memory-budget: tests
    refused, and the server's peak resident memory (VmHWM) beside the budget;
  - log disk (root: a tmpfs): the server's --logfile on a full filesystem: tests served,
    and what the server said on its standard error;
  - reflection (root: a raw socket): one forged 1470-byte iperf2 UDP header asking 20 Mbit/s
    for 3 s with -R, -d or --full-duplex, its source an address where only a counting
    socket listens: what reaches that address from our server and, in the same run, from
    iperf 2.1.8's own (`iperf -s -u`), and the amplification (bytes received / sent).

    python3 bench/hostile.py [--attack connections,memory,logdisk,reflection] [--idle 1000]
                             [--trickle 100] [--seconds 20]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import struct
import subprocess
import sys
import tempfile
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


def real_tests(port: int, seconds: float) -> tuple[int, int]:
    """A real client's 2 s tests, one after another for `seconds`: (served, failed)."""
    served = failed = 0
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        done = subprocess.run(SIMPLEPERF + ["-c", "-p", str(port), "--native", "-t", "2",
                                            "--no-latency"],
                              capture_output=True, text=True, timeout=60)
        served += done.returncode == 0
        failed += done.returncode != 0
    return served, failed


def wait_listening(port: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)


def memory_attack(args: argparse.Namespace) -> bool:
    from simpleperf.description.options import DEFAULT_MEMORY_BUDGET

    server = subprocess.Popen(SIMPLEPERF + ["-s", "-p", str(args.port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    attackers: list[subprocess.Popen] = []
    try:
        wait_listening(args.port)
        asks = [["-P", "16"]] * 2 + [["-P", "2"]] * 4
        attackers = [subprocess.Popen(SIMPLEPERF + ["-c", "-p", str(args.port), "--native",
                                                    "-R", "-l", "64M", "-t", "10", *ask,
                                                    "--no-latency"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      text=True) for ask in asks]
        served, failed = real_tests(args.port, args.seconds)
        refused = sum("refused" in attacker.communicate(timeout=60)[1]
                      for attacker in attackers)
        with open(f"/proc/{server.pid}/status") as status:
            fields = dict(line.split(":", 1) for line in status)
        peak = int(fields["VmHWM"].split()[0]) * 1024
        print(f"memory attack: {refused} of {len(asks)} greedy tests refused; server peak "
              f"resident memory {peak / 1e6:.0f} MB against a budget of "
              f"{DEFAULT_MEMORY_BUDGET / 1e6:.0f} MB ({peak / DEFAULT_MEMORY_BUDGET:.2f} x)")
        print(f"real client: {served} tests served, {failed} failed")
        return peak <= DEFAULT_MEMORY_BUDGET and failed == 0 and served > 0
    finally:
        for attacker in attackers:
            if attacker.poll() is None:
                attacker.kill()
                attacker.wait(10)
        server.terminate()
        server.wait(10)


def log_disk(args: argparse.Namespace) -> bool:
    folder = tempfile.mkdtemp()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", folder], check=True)
    server = None
    try:
        filler = os.open(os.path.join(folder, "filler"), os.O_WRONLY | os.O_CREAT)
        with contextlib.suppress(OSError):
            while True:
                os.write(filler, b"x" * 4096)
        os.close(filler)
        server = subprocess.Popen(SIMPLEPERF + ["-s", "-p", str(args.port), "--logfile",
                                                os.path.join(folder, "server.log")],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wait_listening(args.port)
        served, failed = real_tests(args.port, min(args.seconds, 10))
        server.terminate()
        said = server.communicate(timeout=10)[1].strip().splitlines()
        print(f"log disk full: real client {served} tests served, {failed} failed; the "
              f"server said {len(said)} line(s): {said[0] if said else '-'}")
        return failed == 0 and served > 0 and len(said) == 1
    finally:
        if server is not None and server.poll() is None:
            server.kill()
            server.wait(10)
        subprocess.run(["umount", folder], check=False)
        os.rmdir(folder)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--attack", default="connections,memory,logdisk")
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--trickle", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--port", type=int, default=15501)
    args = parser.parse_args()
    attacks = {"connections": connections_attack, "memory": memory_attack,
               "logdisk": log_disk, "reflection": reflection_attack}
    chosen = args.attack.split(",")
    if any(name not in attacks for name in chosen):
        print(f"hostile: the attacks are {', '.join(attacks)}", file=sys.stderr)
        return 2
    results = [attacks[name](args) for name in chosen]
    return 0 if all(results) else 1


def connections_attack(args: argparse.Namespace) -> bool:
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
        served, failed = real_tests(args.port, args.seconds)
        print(f"during: {process_figures(server.pid)}")
        print(f"real client: {served} tests served, {failed} failed")
        stop.set()
        for sock in idle + trickling:
            sock.close()
        time.sleep(2.0)
        print(f"after:  {process_figures(server.pid)}")
        return failed == 0 and served > 0
    finally:
        stop.set()
        for sock in idle + trickling:
            sock.close()
        server.terminate()
        server.wait(10)


VICTIM = "127.0.0.77"


def forge_udp(source: tuple[str, int], destination: tuple[str, int], payload: bytes) -> None:
    """One UDP datagram from any `source` address: its IP header written here (raw)."""
    length = 8 + len(payload)
    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + length, 0, 0, 64, socket.IPPROTO_UDP,
                         0, socket.inet_aton(source[0]), socket.inet_aton(destination[0]))
    udp = struct.pack("!HHHH", source[1], destination[1], length, 0) + payload
    with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW) as raw:
        raw.sendto(header + udp, (destination[0], 0))


def count_arrivals(sock: socket.socket, seconds: float) -> tuple[int, int]:
    sock.settimeout(0.1)
    count = total = 0
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        with contextlib.suppress(TimeoutError):
            total += len(sock.recv(65536))
            count += 1
    return count, total


def reflection_attack(args: argparse.Namespace) -> bool:
    from simpleperf.protocol import iperf2

    modes = {"-R": iperf2.ClientHeader(upper=iperf2.UPPER_REVERSE),
             "--full-duplex": iperf2.ClientHeader(upper=iperf2.UPPER_FULL_DUPLEX),
             "-d": iperf2.ClientHeader(flags=iperf2.EXTEND | iperf2.VERSION1 |
                                       iperf2.RUN_NOW)}
    servers = {"simpleperf": SIMPLEPERF + ["-s", "-p", str(args.port)],
               "iperf 2.1.8": ["iperf", "-s", "-u", "-p", str(args.port)]}
    ours_bounded = True
    for name, command in servers.items():
        for mode, shape in modes.items():
            server = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
            victim = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                victim.bind((VICTIM, 0))
                time.sleep(1.0)
                header = iperf2.ClientHeader(flags=shape.flags, upper=shape.upper,
                                             amount=-300, rate=20_000_000,
                                             port=victim.getsockname()[1],
                                             version=iperf2.VERSION)
                now = time.time()
                sent = (iperf2.DATAGRAM.pack(1, int(now), int(now % 1 * 1e6), 0)
                        + iperf2.encode_header(header, udp=True)).ljust(1470, b"\0")
                forge_udp((VICTIM, victim.getsockname()[1]), ("127.0.0.1", args.port), sent)
                count, total = count_arrivals(victim, 5.0)
                print(f"reflection {mode:<13} at {name:<11}: {count:5d} datagrams, "
                      f"{total:9d} bytes to an address that never asked "
                      f"({total / len(sent):7.1f} x the one datagram forged)")
                if name == "simpleperf":
                    ours_bounded = ours_bounded and total <= 3 * len(sent)
            finally:
                victim.close()
                server.terminate()
                server.wait(10)
    return ours_bounded


if __name__ == "__main__":
    sys.exit(main())
