"""iperf3's control connection as both ends read it."""

from __future__ import annotations

import select
import socket
import time
from typing import Any

from ..errors import PeerGone, ProtocolError
from ..protocol import iperf3


class Iperf3Control:
    """iperf3's control connection, either side: one-byte states, fixed-size fields and
    length-prefixed JSON, each read with a deadline. The peer closing is a ProtocolError."""

    def __init__(self, conn: socket.socket, peer: str) -> None:
        self.conn = conn
        self.peer = peer  # "client" or "server", for the messages
        self.pending = b""

    def _fill(self, timeout: float) -> bool:
        """Add what arrives within `timeout` to what is pending; False if nothing did."""
        readable, _, _ = select.select([self.conn], [], [], max(0.0, timeout))
        if not readable:
            return False
        data = self.conn.recv(65536)
        if not data:
            raise PeerGone(f"the {self.peer} closed the control connection")
        self.pending += data
        return True

    def readable(self, timeout: float) -> bool:
        return bool(self.pending) or self._fill(timeout)

    def read_state(self, timeout: float) -> int | None:
        """The next one-byte state (signed), or None if none came within `timeout`."""
        if not self.readable(timeout):
            return None
        value = iperf3.signed(self.pending[0])
        self.pending = self.pending[1:]
        return value

    def read_bytes(self, count: int, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while len(self.pending) < count:
            if deadline - time.monotonic() <= 0:
                raise ProtocolError(f"the {self.peer} stopped answering")
            self._fill(deadline - time.monotonic())
        data, self.pending = self.pending[:count], self.pending[count:]
        return data

    def read_json(self, limit: int, timeout: float) -> dict[str, Any]:
        reader = iperf3.JsonReader(limit)
        deadline = time.monotonic() + timeout
        value = reader.feed(self.pending)
        self.pending = b""
        while value is None:
            if deadline - time.monotonic() <= 0:
                raise ProtocolError(f"the {self.peer}'s JSON did not arrive in time")
            if self._fill(deadline - time.monotonic()):
                data, self.pending = self.pending, b""
                value = reader.feed(data)
        self.pending = bytes(reader.buffer)
        return value
