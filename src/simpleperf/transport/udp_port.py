"""The UDP side of a server's one port: the listener on the TCP listener's address, a socket
connected to each client stream that a greeting opened, and the greetings answered again
until their test starts.

Once a stream's socket is connected to its client, the kernel gives that client's datagrams
to it, not to the listener: a greeting the client sends again because our answer was lost
arrives there, so the port watches those sockets too and answers it until settled() (the
test starts and its streams read their sockets). Everything else that reaches the listener
goes to `on_datagram`, which the server dispatches by protocol.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections.abc import Callable
from typing import Any

from . import tcp, udp

DATAGRAM_BYTES = 2048  # the largest greeting, hello or echo probe a stream socket reads
LISTENER_BYTES = 65535  # what the listener reads: an iperf2 client's test datagrams whole


class UdpPort:
    def __init__(self, listener: socket.socket, stopping: threading.Event,
                 on_datagram: Callable[[bytes, tuple[Any, ...]], None]) -> None:
        self.stopping = stopping
        self.on_datagram = on_datagram
        address = listener.getsockname()
        self._local = (address[0], address[1])
        self._family = listener.family
        v6_only = listener.family == socket.AF_INET6 and bool(
            listener.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY))
        self._device = tcp.bound_device(listener)  # --bind-dev: UDP on it too
        # None when the port is taken for UDP: TCP tests still work, UDP tests are refused
        self.sock = udp.open_shared_listener(listener.family, address, v6_only, self._device)
        self._greeted: dict[socket.socket, tuple[bytes, bytes]] = {}  # greeting, answer
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def available(self) -> bool:
        return self.sock is not None

    def start(self) -> None:
        if self.sock is not None:
            self._thread = threading.Thread(target=self._loop, name="udp port", daemon=True)
            self._thread.start()

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        if self._thread is not None:
            self._thread.join(2)

    def reply(self, data: bytes, peer: tuple[Any, ...]) -> None:
        """A datagram back from the listener (an echo probe's answer)."""
        if self.sock is not None:
            self.sock.sendto(data, peer)

    def socket_for(self, peer: tuple[Any, ...], greeting: bytes, answer: bytes
                   ) -> socket.socket:
        """A UDP socket on our port connected to `peer`: the kernel gives it that peer's
        datagrams, the listener keeps everyone else's. Until settled(), `greeting` arriving
        on it again is given `answer` again."""
        sock = udp.open_connected(self._family, self._local, peer, reuse_address=True,
                                  device=self._device)
        with self._lock:
            self._greeted[sock] = (greeting, answer)
        return sock

    def backlog_of(self, peer: tuple[Any, ...]) -> list[bytes]:
        """In the port's own thread (from `on_datagram`), once a socket is connected to
        `peer`: what `peer` sent that the listener had queued before; everyone else's is
        dispatched as usual. Nothing of `peer`'s comes to the listener after this."""
        ours: list[bytes] = []
        while self.sock is not None:
            try:
                data, sender = self.sock.recvfrom(LISTENER_BYTES, socket.MSG_DONTWAIT)
            except OSError:  # nothing queued (or the port is closing)
                break
            if sender == peer:
                ours.append(data)
            else:
                with contextlib.suppress(OSError):
                    self.on_datagram(data, sender)
        return ours

    def settled(self, socks: list[socket.socket]) -> None:
        """The test of these sockets starts: what arrives on them is its data."""
        with self._lock:
            for sock in socks:
                self._greeted.pop(sock, None)

    def _loop(self) -> None:
        sock = self.sock
        assert sock is not None
        while not self.stopping.is_set():
            with self._lock:
                for stale in [s for s in self._greeted if s.fileno() == -1]:
                    del self._greeted[stale]
                watched = [sock, *self._greeted]
            try:
                readable, _, _ = select.select(watched, [], [], tcp.SETTLE_MAX_SECONDS)
            except (OSError, ValueError):  # a stream socket closed meanwhile: look again
                continue
            for stream_socket in readable:
                if stream_socket is not sock:
                    self._greet_again(stream_socket)
            if sock not in readable:
                continue
            try:
                data, peer = sock.recvfrom(LISTENER_BYTES)
            except (BlockingIOError, InterruptedError, ConnectionRefusedError):
                continue
            except OSError:
                return
            try:
                self.on_datagram(data, peer)
            except OSError:
                continue

    def _greet_again(self, sock: socket.socket) -> None:
        """A datagram on a stream socket whose test has not started: its client's greeting
        again (our answer was lost), or nothing that belongs there yet."""
        with self._lock:
            expected = self._greeted.get(sock)
            if expected is None:
                return  # settled meanwhile: its stream reads it
            try:
                if sock.recv(DATAGRAM_BYTES, socket.MSG_DONTWAIT) == expected[0]:
                    sock.send(expected[1])
            except OSError:
                pass
