"""How many tests a server runs at once, native and iperf3 together (--max-clients)."""

from __future__ import annotations

import threading


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
