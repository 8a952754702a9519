"""Interoperability with classic peers, written here from the spec, not from our code.

A classic peer reads and writes 1000-byte chunks, decodes reads as text, recognises the
finish message only when a whole read equals BYE, and answers ACK: BYE, ACK:BYE or ACK.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
from helpers import free_port, run_simpleperf
from test_classic_e2e import rows

pytestmark = pytest.mark.loopback  # real simpleperf processes on 127.0.0.1


class ClassicServer:
    """A strict classic server: BYE counts only when a single read is exactly BYE."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.port = free_port()
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.counts: list[int] = []
        self.saw_bye_alone: list[bool] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.listener.settimeout(30)
        conn, _ = self.listener.accept()
        with conn:
            received, bye = 0, False
            while True:
                data = conn.recv(1000)
                if not data:
                    break
                if data.decode() == "BYE":
                    bye = True
                    conn.sendall(self.reply)
                    break
                received += len(data)
            self.counts.append(received)
            self.saw_bye_alone.append(bye)

    def close(self) -> None:
        self.thread.join(30)
        self.listener.close()


@pytest.mark.parametrize("reply", [b"ACK: BYE", b"ACK:BYE", b"ACK"])
@pytest.mark.parametrize("mode", [("-t", "1"), ("-n", "1234567B")])
def test_our_client_against_a_classic_server(reply, mode):
    peer = ClassicServer(reply)
    try:
        done = run_simpleperf("-c", "-p", str(peer.port), *mode, "-f", "B")
    finally:
        peer.close()
    assert done.returncode == 0, done.stderr
    assert peer.saw_bye_alone == [True]
    (row,) = rows(done.stdout.splitlines())
    assert row[3] == peer.counts[0]
    if mode[0] == "-n":
        assert peer.counts[0] == 1_234_567


def classic_client(port: int, chunks: int, ending: str) -> bytes:
    """Send `chunks` x 1000 zero characters, then finish in the given way; returns the reply."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        payload = b"0" * 1000
        for _ in range(chunks - 1):
            sock.sendall(payload)
        if ending == "bye alone":
            sock.sendall(payload)
            time.sleep(0.05)
            sock.sendall(b"BYE")
        elif ending == "bye glued":
            sock.sendall(payload + b"BYE")
        elif ending == "bye split":
            sock.sendall(payload + b"BY")
            time.sleep(0.2)
            sock.sendall(b"E")
        elif ending == "no bye":
            sock.sendall(payload)
            return b""
        sock.settimeout(10)
        return sock.recv(1000)


@pytest.mark.parametrize("ending", ["bye alone", "bye glued", "bye split"])
def test_classic_client_against_our_server(server, ending):
    live, port = server
    reply = classic_client(port, 500, ending)
    assert reply == b"ACK: BYE"
    (row,) = rows(live.wait_for(lambda ls: len(rows(ls)) == 1))
    assert row[3] == 500_000
    assert not any("incomplete" in line for line in live.lines)


def test_classic_client_closing_without_bye_is_reported_with_what_arrived(server):
    live, port = server
    classic_client(port, 300, "no bye")
    lines = live.wait_for(lambda ls: any("incomplete" in line for line in ls))
    (row,) = rows([line.split("  (")[0] for line in lines if "incomplete" in line])
    assert row[3] == 300_000
    assert any("closed without BYE" in line for line in lines)


def test_classic_and_our_client_at_once(server):
    live, port = server
    replies = []
    peer = threading.Thread(target=lambda: replies.append(classic_client(port, 2000, "bye alone")))
    peer.start()
    done = run_simpleperf("-c", "-p", str(port), "-n", "2MB", "-f", "B")
    peer.join(30)
    assert done.returncode == 0 and replies == [b"ACK: BYE"]
    server_rows = rows(live.wait_for(lambda ls: len(rows(ls)) == 2))
    assert sorted(r[3] for r in server_rows) == [2_000_000, 2_000_000]
