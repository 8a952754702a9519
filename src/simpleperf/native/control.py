"""A native control connection: the exchange's events over a TCP socket, read with
deadlines. The order is the exchange's (protocol/exchange.py); this only moves bytes."""

from __future__ import annotations

import select
import socket
import threading
import time
from collections import deque
from typing import TypeVar

from ..errors import PeerGone, PeerRefused, ProtocolError
from ..protocol.events import Error, Event
from ..protocol.exchange import Exchange, Role
from ..protocol.native import padded

E = TypeVar("E", bound=Event)


class ControlChannel:
    def __init__(self, sock: socket.socket, role: Role) -> None:
        self.sock = sock
        self.exchange = Exchange(role)
        self._queued: deque[Event] = deque()
        self._lock = threading.Lock()
        self.closed = False

    def send(self, event: Event, preface: bytes = b"") -> int:
        """Send `event` (after `preface`, in one write); the number of bytes written."""
        return len(self.greet(event, preface))

    def greet(self, event: Event, preface: bytes, size: int | None = None) -> bytes:
        """Send `preface` and `event` in one write, padded to exactly `size` bytes when
        given; the bytes written."""
        with self._lock:
            encoded = self.exchange.send(event)
            data = preface + (encoded if size is None else padded(encoded, size - len(preface)))
            self.sock.sendall(data)
        return data

    def feed(self, data: bytes) -> None:
        self._queued.extend(self.exchange.receive(data))

    def receive(self, timeout: float) -> Event | None:
        """The next event, or None if none arrived within `timeout` seconds. The peer
        closing the connection is PeerGone (unless an event is still queued)."""
        deadline = time.monotonic() + timeout
        while not self._queued:
            if self.closed:
                raise PeerGone("the peer closed the control connection")
            remaining = deadline - time.monotonic()
            readable, _, _ = select.select([self.sock], [], [], max(0.0, remaining))
            if not readable:
                return None
            try:
                data = self.sock.recv(65536)
            except BlockingIOError:
                continue
            except OSError as error:
                raise PeerGone(f"the control connection failed: "
                               f"{(error.strerror or str(error)).lower()}") from None
            if not data:
                self.closed = True
                continue
            self.feed(data)
        return self._queued.popleft()

    def expect(self, timeout: float, *kinds: type[E]) -> E:
        """The next event if it is one of `kinds`; the peer's error is PeerRefused."""
        names = "/".join(kind.TYPE for kind in kinds)
        event = self.receive(timeout)
        if event is None:
            raise ProtocolError(f"no '{names}' message within {timeout:g} s")
        if isinstance(event, Error) and Error not in kinds:
            raise PeerRefused(event.message)
        if not isinstance(event, kinds):
            raise ProtocolError(f"expected a '{names}' message, got '{event.TYPE}'")
        return event
