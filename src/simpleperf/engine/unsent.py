"""How much a TCP sender keeps written but not yet sent in its socket (TCP_NOTSENT_LOWAT),
from the rate its peer acknowledges, sans IO.

Left alone, the kernel lets a socket's buffer grow with the congestion window, to megabytes
(net.ipv4.tcp_wmem). Over a slow path with a deep queue that is many seconds of data the
sender has written and the path has not yet taken: a test's sender would count it as sent
within the test, and the test would end only once the path had carried it all (a 20 s test
of four CUBIC flows over 2 Mbit/s and a 1000-packet queue ran 44 s and its sender read
4.1 Mbit/s). A limit of a few milliseconds of the connection's own rate keeps the sender
ahead of its congestion window and the rest out of the socket."""

from __future__ import annotations

MIN_UNSENT = 1500  # about a segment: less would not fill one; limits are whole steps of it
MAX_UNSENT = 1 << 26  # 64 MiB: 5 ms at 100 Gbit/s
RATE_SAMPLE_SECONDS = 0.05  # the acknowledged rate, over this long


class UnsentLimit:
    """A sender's unsent limit: `seconds` of the rate acknowledged over the last sample, at
    least `least` bytes; `initial` until the first sample."""

    def __init__(self, seconds: float, initial: int, least: int = MIN_UNSENT) -> None:
        self.seconds, self.least = seconds, least
        self.limit = initial
        self._sample: tuple[float, int] | None = None

    def due(self, now: float) -> bool:
        """Whether a reading taken now would make a sample (take none otherwise: each
        costs a system call)."""
        return self._sample is None or now - self._sample[0] >= RATE_SAMPLE_SECONDS

    def update(self, now: float, delivered: int) -> bool:
        """Take a reading of the bytes the peer acknowledged so far; True when the limit
        changed (then set it on the socket)."""
        if self._sample is None:
            self._sample = (now, delivered)
            return False
        began, before = self._sample
        if now - began < RATE_SAMPLE_SECONDS:
            return False
        self._sample = (now, delivered)
        rate = (delivered - before) / (now - began)
        wanted = min(MAX_UNSENT, max(self.least, rate * self.seconds))
        limit = int(wanted // MIN_UNSENT) * MIN_UNSENT  # whole steps: fewer changes
        changed = limit != self.limit
        self.limit = limit
        return changed


# A test's bulk sender (iperf's kind, -t or -n): 50 ms of its rate, 8 segments at least, and
# 128 KiB until the rate is known (slow start's first round trips need far less; a socket
# whose -w fixed its buffer at megabytes would take them all in the first moment). Its
# Python loop takes the GIL each compiled slice, so a few milliseconds between refills are
# ordinary; 50 ms leaves the connection never waiting for data while what it has written at
# the test's end is at most 50 ms of the path's rate.
BULK_SECONDS = 0.05
BULK_LEAST = 8 * MIN_UNSENT
BULK_INITIAL = 128 * 1024


def bulk_limit() -> UnsentLimit:
    return UnsentLimit(BULK_SECONDS, BULK_INITIAL, BULK_LEAST)
