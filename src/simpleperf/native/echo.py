"""The echo service RTT probes use (TCP and UDP): a probe comes back unchanged, and with a
shared secret only an authentic one does."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

from ..protocol.native import ECHO_PROBE, ECHO_TAG_SIZE, echo_probe_is_authentic
from ..transport import tcp

ECHO_IDLE_SECONDS = 60.0


class EchoService:
    def __init__(self, secret: bytes | None, stopping: threading.Event,
                 say: Callable[..., None]) -> None:
        self.secret = secret
        self.stopping = stopping
        self.say = say

    def allowed(self, probe: bytes) -> bool:
        """With a shared secret only authentic probes are answered; without one, a probe
        with or without a tag (its client cannot know whether the server wants one)."""
        if self.secret is not None:
            return echo_probe_is_authentic(self.secret, probe)
        return len(probe) in (ECHO_PROBE.size, ECHO_PROBE.size + ECHO_TAG_SIZE)

    def serve(self, conn: socket.socket, initial: bytes) -> None:
        """Echo what comes; with a shared secret, probe by probe and only authentic ones
        (the first that is not ends the connection)."""
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        tcp.set_wake_up(conn)
        record = ECHO_PROBE.size + ECHO_TAG_SIZE
        pending = initial
        last = time.monotonic()
        while not self.stopping.is_set():
            if self.secret is None:
                if pending:
                    conn.sendall(pending)
                pending = b""
            while len(pending) >= record:
                if not self.allowed(pending[:record]):
                    self.say("Echo from an unauthenticated peer refused")
                    return
                conn.sendall(pending[:record])
                pending = pending[record:]
            try:
                data = conn.recv(4096)
            except BlockingIOError:
                if time.monotonic() - last > ECHO_IDLE_SECONDS:
                    return
                continue
            if not data:
                return
            last = time.monotonic()
            pending += data
