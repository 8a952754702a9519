"""A forged UDP source never makes the server send to an address that did not ask.

Each test writes datagrams whose source is an address of the loopback range where only a
counting socket listens (a raw socket writes the IP header, as an attacker would), and
counts what reaches it: iperf2's header with -R, -d or --full-duplex (iperf 2.1.8's own
server sends 20 Mbit/s for the stated time to such an address), a native test's UDP hello
carrying a real test's token, an iperf3 UDP greeting, and echo probes."""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import subprocess
import threading
import time

import pytest
from helpers import start_server

from simpleperf.description.testspec import TestSpec
from simpleperf.protocol import iperf2, iperf3, native
from simpleperf.protocol.events import Accepted

pytestmark = [pytest.mark.loopback, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="raw sockets need root")]

VICTIM = "127.0.0.77"  # no client lives here; only the counting socket


def _forge(source: tuple[str, int], destination: tuple[str, int], payload: bytes) -> None:
    """One UDP datagram from `source` (any address) to `destination`, its IP header ours."""
    length = 8 + len(payload)
    udp = struct.pack("!HHHH", source[1], destination[1], length, 0) + payload  # no checksum
    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + length, 0, 0, 64, socket.IPPROTO_UDP,
                         0, socket.inet_aton(source[0]), socket.inet_aton(destination[0]))
    with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW) as raw:
        raw.sendto(header + udp, (destination[0], 0))


class _Victim:
    """A socket at VICTIM that counts, from the start, what reaches it."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((VICTIM, 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.count = self.total = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._count, daemon=True)
        self._thread.start()

    def _count(self) -> None:
        while not self._stop.is_set():
            try:
                self.total += len(self.sock.recv(65536))
                self.count += 1
            except TimeoutError:
                continue

    def received(self, seconds: float) -> tuple[int, int]:
        """Datagrams and bytes that arrived until `seconds` from now."""
        time.sleep(seconds)
        return self.count, self.total

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


@pytest.fixture
def victim():
    found = _Victim()
    yield found
    found.close()


def _iperf2_datagram(header: iperf2.ClientHeader) -> bytes:
    now = time.time()
    first = iperf2.DATAGRAM.pack(1, int(now), int(now % 1 * 1e6), 0)
    return (first + iperf2.encode_header(header, udp=True)).ljust(1470, b"\0")


MODES = {  # what 2.1.8's client states for each mode that makes a server send
    "-R": iperf2.ClientHeader(upper=iperf2.UPPER_REVERSE),
    "--full-duplex": iperf2.ClientHeader(upper=iperf2.UPPER_FULL_DUPLEX),
    "-d": iperf2.ClientHeader(flags=iperf2.EXTEND | iperf2.VERSION1 | iperf2.RUN_NOW),
}


@pytest.mark.iperf2
@pytest.mark.parametrize("mode", list(MODES))
def test_a_forged_iperf2_header_gets_at_most_three_times_its_size_sent(victim, mode):
    """One 1470-byte header asking 20 Mbit/s for 3 s (5,296 datagrams from 2.1.8's server
    and ours before): at most three times what was sent reaches the address it named."""
    server, port = start_server()
    try:
        header = MODES[mode]
        header = iperf2.ClientHeader(flags=header.flags, upper=header.upper, amount=-300,
                                     rate=20_000_000, port=victim.port,
                                     version=iperf2.VERSION)
        _forge((VICTIM, victim.port), ("127.0.0.1", port), _iperf2_datagram(header))
        count, total = victim.received(4.0)
        assert total <= 3 * 1470, (count, total)
        if mode == "-R":  # nothing at all, and the server says why
            assert count == 0
            server.wait_for(lambda lines: any("--unproven-udp" in line for line in lines))
    finally:
        server.close()


@pytest.mark.iperf2
def test_the_operators_allowance_bounds_a_forged_reverse_test(victim):
    """--unproven-udp 1M/1: what the operator allows, and no more, though the header asks
    20 Mbit/s for 3 s."""
    server, port = start_server("--unproven-udp", "1M/1")
    try:
        server.wait_for(lambda lines: any("may be sent up to 1.00 Mbits/sec for 1 s a test "
                                          "(--unproven-udp)" in line for line in lines))
        header = iperf2.ClientHeader(upper=iperf2.UPPER_REVERSE, amount=-300,
                                     rate=20_000_000, version=iperf2.VERSION)
        _forge((VICTIM, victim.port), ("127.0.0.1", port), _iperf2_datagram(header))
        count, total = victim.received(4.0)
        assert 0 < total <= 1e6 / 8 * 1 + 3 * 1470 + 2 * 1470, (count, total)
    finally:
        server.close()


@pytest.mark.iperf2
def test_a_real_iperf2_reverse_client_is_served_within_the_allowance():
    server, port = start_server("--unproven-udp", "20M/5")
    try:
        done = subprocess.run(["iperf", "-c", "127.0.0.1", "-p", str(port), "-u", "-R", "-b",
                               "5M", "-t", "1", "-y", "C"], capture_output=True, text=True,
                              timeout=30)
        assert done.returncode == 0, done.stderr
        rows = [r.split(",") for r in done.stdout.splitlines() if r.count(",") >= 12]
        assert rows and int(rows[-1][11]) > 400  # about 445 datagrams at 5M for 1 s
    finally:
        server.close()


def _native_token(port: int, spec: TestSpec) -> tuple[socket.socket, bytes]:
    """A control connection of our own that the server accepted a test on, and its token."""
    control = socket.create_connection(("127.0.0.1", port), timeout=10)
    control.sendall(native.preface(native.CONTROL) + native.encode({"type": "hello"})
                    + native.encode(native.spec_message(spec)))
    reader, messages = native.MessageReader(), []
    deadline = time.monotonic() + 10
    while not any(m.get("type") == "accepted" for m in messages):
        assert time.monotonic() < deadline, messages
        messages += reader.feed(control.recv(65536))
    accepted = next(m for m in messages if m["type"] == "accepted")
    return control, Accepted.from_message(accepted).token


def test_a_native_udp_hello_from_another_address_than_its_test_is_ignored(victim):
    """The token is the attacker's own test's; the hello's source is the victim's: the
    server must not send the reverse test there."""
    server, port = start_server()
    control = None
    try:
        spec = TestSpec(protocol="udp", direction="reverse", duration=3.0, rate=20e6,
                        length=1400)
        control, token = _native_token(port, spec)
        for _ in range(3):
            _forge((VICTIM, victim.port), ("127.0.0.1", port),
                   native.data_preface(token, 1, native.UDP_HELLO))
        count, _ = victim.received(2.0)
        assert count == 0
    finally:
        if control is not None:
            control.close()
        server.close()


def test_echo_probes_from_a_forged_address_are_answered_at_a_probers_rate(victim):
    """An echo answers one datagram with one of its size: a reflection. A flood of probes
    naming the victim gets at most twice a fast prober's rate of answers (200 a second)
    (it got all 2,000 before)."""
    server, port = start_server()
    try:
        probe = native.preface(native.UDP_ECHO) + native.echo_probe(1, 1, None)
        began = time.monotonic()
        for _ in range(20):  # 2,000 in 2 s: none dropped for lack of room at the server
            for _ in range(100):
                _forge((VICTIM, victim.port), ("127.0.0.1", port), probe)
            time.sleep(0.1)
        spent = time.monotonic() - began
        count, _ = victim.received(1.0)
        # a second's burst, then the rate while it sent and the second it was read for
        assert 0 < count <= 200 * (2 + spent), (count, spent)
    finally:
        server.close()


@pytest.mark.iperf3
def test_an_iperf3_udp_greeting_from_another_address_is_ignored(victim):
    """A real iperf3 UDP -R test is under way from 127.0.0.1; a greeting forged from the
    victim's address does not join it."""
    server, port = start_server()
    client = None
    try:
        client = subprocess.Popen(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-u", "-R",
                                   "-b", "1M", "-t", "3"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        for _ in range(20):
            _forge((VICTIM, victim.port), ("127.0.0.1", port), iperf3.UDP_CONNECT_MSG)
            time.sleep(0.05)
        count, _ = victim.received(1.5)
        assert count == 0
    finally:
        if client is not None:
            with contextlib.suppress(ProcessLookupError):
                client.kill()
            client.wait(10)
        server.close()
