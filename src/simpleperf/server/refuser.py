"""Connections a server will not take (over its connection limits) get their refusal in
their own protocol's words, from one thread: a native client is told why, an iperf3 client
hears ACCESS_DENIED (it prints that the server is busy), a classic one is closed. Nothing
here waits long or holds many: at most MAX_PENDING sockets, each for at most ANSWER_SECONDS.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Callable

from ..protocol import iperf3
from ..protocol.detect import IPERF3, NATIVE, NEEDED, detect
from ..protocol.events import Error
from ..protocol.native import CONTROL, PREFACE_SIZE, encode

MAX_PENDING = 64
ANSWER_SECONDS = 1.0
LOG_EVERY_SECONDS = 1.0


class Refuser:
    def __init__(self, say: Callable[..., None], stopping: threading.Event) -> None:
        self.say = say
        self.stopping = stopping
        self._pending: dict[socket.socket, tuple[float, bytes, str]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._refused = 0
        self._last_log = 0.0
        self._thread = threading.Thread(target=self._loop, name="refuser", daemon=True)

    def start(self) -> None:
        """Not at construction: a server may go to the background (fork) in between, and
        a forked process keeps no threads."""
        self._thread.start()

    def refuse(self, conn: socket.socket, peer: str, reason: str) -> None:
        self.note(peer, reason)
        with self._lock:
            if len(self._pending) >= MAX_PENDING:
                conn.close()  # no room even to say why: the client sees a closed connection
                return
            conn.setblocking(False)
            self._pending[conn] = (time.monotonic() + ANSWER_SECONDS, b"", reason)
        self._wake.set()

    def note(self, peer: str, reason: str) -> None:
        """Log a refusal (at most one line a second, with the count since)."""
        self._refused += 1
        now = time.monotonic()
        if now - self._last_log >= LOG_EVERY_SECONDS:
            more = f" ({self._refused} refused so far)" if self._refused > 1 else ""
            self.say(f"Refused a connection from {peer}: {reason}{more}")
            self._last_log = now

    def _loop(self) -> None:
        while not self.stopping.is_set():
            with self._lock:
                sockets = list(self._pending)
            if not sockets:
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            readable, _, _ = select.select(sockets, [], [], 0.05)
            now = time.monotonic()
            for conn in sockets:
                self._step(conn, conn in readable, now)
        with self._lock:
            for conn in self._pending:
                conn.close()
            self._pending.clear()

    def _step(self, conn: socket.socket, readable: bool, now: float) -> None:
        deadline, prefix, reason = self._pending[conn]
        ended = False
        if readable:
            try:
                chunk = conn.recv(NEEDED - len(prefix))
            except OSError:
                chunk = b""
            ended = not chunk
            prefix += chunk
        protocol = detect(prefix)
        if protocol is None and not ended and now < deadline:
            with self._lock:
                self._pending[conn] = (deadline, prefix, reason)
            return
        with contextlib.suppress(OSError):
            if protocol == NATIVE and prefix[4:5] == CONTROL and len(prefix) >= PREFACE_SIZE:
                conn.sendall(encode(Error(reason).to_message()))
            elif protocol == IPERF3:
                conn.sendall(iperf3.state(iperf3.ACCESS_DENIED))
        with self._lock:
            del self._pending[conn]
        conn.close()
