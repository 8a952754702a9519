"""What a server allows: its limits on a test (--max-parallel, --max-duration, UDP) and how
many tests run at once (--max-clients), native and iperf3 tests alike. The drivers ask here
and only phrase the answer in their protocol."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from enum import Enum

from .options import ServerOptions


class Limit(Enum):
    PARALLEL = "parallel"
    DURATION = "duration"
    UDP = "udp"
    BUSY = "busy"
    CONNECTIONS = "connections"


@dataclass(frozen=True)
class Refusal:
    limit: Limit
    reason: str  # one line, for the client and the server's log

    def __str__(self) -> str:
        return self.reason


class TestSlots:
    """Tests running at once, native and iperf3 together, against --max-clients."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.running = 0
        self._lock = threading.Lock()

    def acquire(self) -> bool:
        with self._lock:
            if self.limit is not None and self.running >= self.limit:
                return False
            self.running += 1
            return True

    def release(self) -> None:
        with self._lock:
            self.running -= 1


class ServerPolicy:
    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        self.slots = TestSlots(options.max_clients)
        self.udp_available = True  # until the server finds it cannot open its UDP port
        self.connections: dict[str, int] = {}  # open connections by the peer's address
        self._lock = threading.Lock()

    def admit_connection(self, host: str) -> Refusal | None:
        """A new connection from `host` is counted, or refused when the server holds as
        many as --max-connections (or --max-connections-per-host from that address)."""
        options = self.options
        with self._lock:
            total = sum(self.connections.values())
            if total >= options.max_connections:
                return Refusal(Limit.CONNECTIONS, f"the server holds {total} connections, at "
                               f"most {options.max_connections} (--max-connections)")
            mine = self.connections.get(host, 0)
            if mine >= options.max_connections_per_host:
                return Refusal(Limit.CONNECTIONS, f"{mine} connections from {host} are open, "
                               f"at most {options.max_connections_per_host} from one "
                               "address (--max-connections-per-host)")
            self.connections[host] = mine + 1
            return None

    def release_connection(self, host: str) -> None:
        with self._lock:
            left = self.connections.get(host, 0) - 1
            if left > 0:
                self.connections[host] = left
            else:
                self.connections.pop(host, None)

    @property
    def time_limit(self) -> float | None:
        return self.options.test_time_limit

    def refusal(self, protocol: str, parallel: int, duration: float | None,
                omit: float) -> Refusal | None:
        """Why a test of this shape is refused; None if it is allowed. `duration`: None for
        a test of an amount of data."""
        options = self.options
        if options.max_parallel is not None and parallel > options.max_parallel:
            return Refusal(Limit.PARALLEL, f"{parallel} parallel streams asked, this server "
                           f"allows at most {options.max_parallel} (--max-parallel)")
        if (options.max_duration is not None and duration is not None
                and duration + omit > options.max_duration):
            return Refusal(Limit.DURATION, f"a {duration + omit:g} s test asked, this server "
                           f"allows at most {options.max_duration:g} s (--max-duration)")
        if protocol == "udp" and not self.udp_available:
            return Refusal(Limit.UDP, "this server could not open its UDP port")
        return None

    def admit(self, protocol: str, parallel: int, duration: float | None,
              omit: float) -> Refusal | None:
        """refusal(), and if allowed, a slot taken (give it back with release())."""
        refusal = self.refusal(protocol, parallel, duration, omit)
        if refusal is not None:
            return refusal
        if not self.slots.acquire():
            return Refusal(Limit.BUSY, f"the server is busy: {self.slots.running} tests "
                           f"running, at most {self.options.max_clients} at once "
                           "(--max-clients)")
        return None

    def release(self) -> None:
        self.slots.release()
