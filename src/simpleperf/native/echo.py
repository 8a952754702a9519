"""The echo service RTT probes use (TCP and UDP): a probe comes back unchanged, and with a
shared secret only an authentic one does."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

from ..description.options import MIN_RTT_INTERVAL
from ..engine.unproven import ReplyBudget
from ..protocol.native import ECHO_PROBE, ECHO_TAG_SIZE, echo_probe_is_authentic
from ..transport import tcp

# UDP echo answers: twice the fastest prober's rate for a host, and a hundred such in all
UDP_REPLIES_PER_HOST = 2 / MIN_RTT_INTERVAL
UDP_REPLIES = 100 * UDP_REPLIES_PER_HOST


class EchoService:
    def __init__(self, secret: bytes | None, stopping: threading.Event,
                 say: Callable[..., None], idle_limit: float) -> None:
        self.secret = secret
        self.idle_limit = idle_limit  # a probe or more in this long, or the connection ends
        self.stopping = stopping
        self.say = say
        self.replies = ReplyBudget(UDP_REPLIES_PER_HOST, UDP_REPLIES)  # UDP's (unproven)

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
        # A probe or more every idle limit: a trickle that never makes one ends.
        window_start, window_bytes = time.monotonic(), len(initial)
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
                data = None
            if data == b"":
                return
            window_bytes += len(data or b"")
            now = time.monotonic()
            if now - window_start > self.idle_limit:
                if window_bytes < ECHO_PROBE.size:
                    return
                window_start, window_bytes = now, 0
            if data:
                pending += data
