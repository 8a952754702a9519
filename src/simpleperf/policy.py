"""What a server allows: its limits on a test (--max-parallel, --max-duration, UDP), how
many tests run at once (--max-clients) and what their buffers take together
(--memory-budget), native and iperf3 tests alike. The drivers ask here and only phrase the
answer in their protocol."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from .description.options import (
    LARGE_SHARE,
    MIN_RATE_WINDOW,
    SMALL_TEST_BYTES,
    TRICKLE_BYTES,
    ServerOptions,
)
from .description.transports import Transport
from .engine.measurement import cpus
from .units import format_rate


class Limit(Enum):
    PARALLEL = "parallel"
    DURATION = "duration"
    UDP = "udp"
    BUSY = "busy"
    CONNECTIONS = "connections"
    RATE = "rate"
    CPU = "cpu"
    IDLE = "idle"
    MEMORY = "memory"


@dataclass(frozen=True)
class Refusal:
    limit: Limit
    reason: str  # one line, for the client and the server's log

    def __str__(self) -> str:
        return self.reason


class TestSlots:
    """Tests running at once, native and iperf3 together, against --max-clients; with
    --queue, up to that many more wait (each at most --queue-wait) for a place, in turn."""

    def __init__(self, limit: int | None, queue: int = 0, wait: float = 0.0) -> None:
        self.limit, self.queue, self.wait = limit, queue, wait
        self.running = 0
        self._changed = threading.Condition()
        self._turns: deque[object] = deque()  # the waiting tests, first come first

    def acquire(self) -> bool:
        with self._changed:
            if self.limit is None or self.running < self.limit and not self._turns:
                self.running += 1
                return True
            if len(self._turns) >= self.queue:
                return False
            me = object()
            self._turns.append(me)
            deadline = time.monotonic() + self.wait
            try:
                while self.running >= self.limit or self._turns[0] is not me:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._changed.wait(left)
                self.running += 1
                return True
            finally:
                self._turns.remove(me)
                self._changed.notify_all()

    def release(self) -> None:
        with self._changed:
            self.running -= 1
            self._changed.notify_all()


class MemoryBudget:
    """Bytes of buffers the running tests hold, against --memory-budget. Large tests (more
    than SMALL_TEST_BYTES) may hold at most LARGE_SHARE of it together: the rest stays for
    ordinary tests, so a few clients asking for the largest buffers cannot keep everyone
    else out."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.held = 0
        self.held_large = 0
        self._lock = threading.Lock()

    def take(self, size: int) -> bool:
        large = size > SMALL_TEST_BYTES
        with self._lock:
            if self.held + size > self.budget or (
                    large and self.held_large + size > self.budget * LARGE_SHARE):
                return False
            self.held += size
            self.held_large += size if large else 0
            return True

    def give_back(self, size: int) -> None:
        with self._lock:
            self.held -= size
            self.held_large -= size if size > SMALL_TEST_BYTES else 0

    def free_for(self, size: int) -> int:
        """What a test of `size` could have now."""
        free = self.budget - self.held
        if size > SMALL_TEST_BYTES:
            free = min(free, int(self.budget * LARGE_SHARE) - self.held_large)
        return max(free, 0)


def buffer_bytes(streams: int, length: int) -> int:
    """What a test's buffers take: one of the test's length a stream."""
    return streams * length


class ServerPolicy:
    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        self.slots = TestSlots(options.max_clients, options.queue, options.queue_wait)
        self.memory = MemoryBudget(options.memory_budget)
        self.udp_available = True  # until the server finds it cannot open its UDP port
        self.connections: dict[str, int] = {}  # open connections by the peer's address
        # ... of which asked to close for a new one's place (idle HTTP), until they have
        self.draining: dict[str, int] = {}
        self._lock = threading.Lock()

    def admit_connection(self, host: str, drain: Callable[[str | None], str | None] | None
                         = None) -> Refusal | None:
        """A new connection from `host` is counted, or refused when the server holds as
        many as --max-connections (or --max-connections-per-host from that address) and
        `drain` frees none: asked for a place (any host's, or `host`'s), it asks an idle
        connection to close and names its host, whose count then leaves it out."""
        options = self.options
        with self._lock:
            total = sum(self.connections.values()) - sum(self.draining.values())
            if total >= options.max_connections and not self._drained(drain, None):
                return Refusal(Limit.CONNECTIONS, f"the server holds {total} connections, at "
                               f"most {options.max_connections} (--max-connections)")
            mine = self.connections.get(host, 0) - self.draining.get(host, 0)
            if mine >= options.max_connections_per_host and not self._drained(drain, host):
                return Refusal(Limit.CONNECTIONS, f"{mine} connections from {host} are open, "
                               f"at most {options.max_connections_per_host} from one "
                               "address (--max-connections-per-host)")
            self.connections[host] = self.connections.get(host, 0) + 1
            return None

    def _drained(self, drain: Callable[[str | None], str | None] | None, host: str | None
                 ) -> bool:
        freed = drain(host) if drain is not None else None
        if freed is not None:
            self.draining[freed] = self.draining.get(freed, 0) + 1
        return freed is not None

    def drained(self, host: str) -> None:
        """A connection asked to close (admit_connection's `drain`) has: before its
        release_connection."""
        with self._lock:
            _count_down(self.draining, host)

    def release_connection(self, host: str) -> None:
        with self._lock:
            _count_down(self.connections, host)

    @property
    def time_limit(self) -> float | None:
        return self.options.test_time_limit

    def test_watch(self, duration: float | None) -> TestWatch | None:
        """A running test's watch on --server-bitrate-limit and --idle-timeout, and for a
        test with no stated end (`duration` None: an amount of data, a header-less iperf2
        stream) on its trickle: less than TRICKLE_BYTES in a --rcv-timeout ends it. None
        when there is nothing to watch."""
        options = self.options
        trickle = options.idle_limit if duration is None else None
        if options.rate_limit is None and options.idle_timeout is None and trickle is None:
            return None
        return TestWatch(options.rate_limit, options.rate_window, options.idle_timeout,
                         trickle)

    def refusal(self, transport: Transport, parallel: int, duration: float | None,
                omit: float, total_rate: float = 0.0, cpu: int | None = None
                ) -> Refusal | None:
        """Why a test of this shape is refused; None if it is allowed. `duration`: None for
        a test of an amount of data; `total_rate`: the rate asked of all its streams
        together, 0 for as fast as they go; `cpu`: where the client wants its streams run."""
        options = self.options
        if cpu is not None and cpu not in cpus():
            return Refusal(Limit.CPU, f"CPU {cpu} is not one this server has (CPUs 0 to "
                           f"{cpus()[-1]})")
        if options.rate_limit is not None and total_rate > options.rate_limit:
            return Refusal(Limit.RATE, f"{format_rate(total_rate)} in all asked, this server "
                           f"allows at most {format_rate(options.rate_limit)} "
                           "(--server-bitrate-limit)")
        if options.max_parallel is not None and parallel > options.max_parallel:
            return Refusal(Limit.PARALLEL, f"{parallel} parallel streams asked, this server "
                           f"allows at most {options.max_parallel} (--max-parallel)")
        if (options.max_duration is not None and duration is not None
                and duration + omit > options.max_duration):
            return Refusal(Limit.DURATION, f"a {duration + omit:g} s test asked, this server "
                           f"allows at most {options.max_duration:g} s (--max-duration)")
        if transport.datagrams and not self.udp_available:
            return Refusal(Limit.UDP, "this server could not open its UDP port")
        return None

    def admit(self, transport: Transport, parallel: int, duration: float | None,
              omit: float, total_rate: float = 0.0, cpu: int | None = None,
              memory: int = 0) -> Refusal | None:
        """refusal(), and if allowed, a slot taken and `memory` bytes of the budget (give
        both back with release(memory))."""
        refusal = self.refusal(transport, parallel, duration, omit, total_rate, cpu)
        if refusal is not None:
            return refusal
        budget = self.memory.budget
        if memory > budget:
            return Refusal(Limit.MEMORY, f"the test's buffers would take {_megabytes(memory)}"
                           f", more than this server's {_megabytes(budget)} "
                           "(--memory-budget)")
        if not self.slots.acquire():
            queued = (f"; --queue {self.options.queue}: full, or the "
                      f"{self.options.queue_wait:g} s wait ran out") if self.options.queue \
                else ""
            return Refusal(Limit.BUSY, f"the server is busy: {self.slots.running} tests "
                           f"running, at most {self.options.max_clients} at once "
                           f"(--max-clients{queued})")
        if not self.memory.take(memory):
            self.slots.release()
            return Refusal(Limit.MEMORY, f"the server is busy: the test's buffers would take "
                           f"{_megabytes(memory)}, and the running tests leave "
                           f"{_megabytes(self.memory.free_for(memory))} for it of its "
                           f"{_megabytes(budget)} (--memory-budget"
                           + (f"; tests over {_megabytes(SMALL_TEST_BYTES)} share "
                              f"{LARGE_SHARE:.0%} of it)" if memory > SMALL_TEST_BYTES
                              else ")"))
        return None

    def release(self, memory: int = 0) -> None:
        self.memory.give_back(memory)
        self.slots.release()


def _count_down(counts: dict[str, int], host: str) -> None:
    """One fewer of `host`'s, which leaves the table at none."""
    left = counts.get(host, 0) - 1
    if left > 0:
        counts[host] = left
    else:
        counts.pop(host, None)


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


class TestWatch:
    """What a server watches while a test runs. --server-bitrate-limit, as iperf3's server
    keeps it: the bytes of all the test's streams, both directions, over the last `window`
    seconds (over what has passed, at the start, once a second has), against the limit.
    --idle-timeout: how long those bytes may stand still (a client stopped, or gone without
    a word) before the test is ended and its place freed."""

    SAMPLE_SECONDS = 0.1

    def __init__(self, rate_limit: float | None, window: float, idle: float | None,
                 trickle: float | None = None) -> None:
        self.rate_limit = rate_limit
        self.window = window
        self.idle = idle
        self.trickle = trickle  # a test with no stated end: TRICKLE_BYTES every this long
        self._samples: deque[tuple[float, int]] = deque()
        self._moved: tuple[float, int] | None = None  # when the bytes last changed, and to
        self._trickled: tuple[float, int] | None = None  # when the window began, and at

    def breach(self, now: float, total_bytes: int) -> Refusal | None:
        """Which limit the test broke, and how; None while it keeps within them."""
        if self.trickle is not None:
            if self._trickled is None or total_bytes - self._trickled[1] >= TRICKLE_BYTES:
                self._trickled = (now, total_bytes)
            elif now - self._trickled[0] >= self.trickle:
                return Refusal(Limit.IDLE, f"{total_bytes - self._trickled[1]} bytes moved in "
                               f"{now - self._trickled[0]:.1f} s of a test with no stated "
                               f"end, less than {TRICKLE_BYTES} in this server's "
                               f"{self.trickle:g} s (--rcv-timeout)")
        if self.idle is not None:
            if self._moved is None or total_bytes != self._moved[1]:
                self._moved = (now, total_bytes)
            elif now - self._moved[0] >= self.idle:
                return Refusal(Limit.IDLE, f"nothing moved for {now - self._moved[0]:.1f} s, "
                               f"this server's limit is {self.idle:g} s (--idle-timeout)")
        return self._over_rate(now, total_bytes) if self.rate_limit is not None else None

    def _over_rate(self, now: float, total_bytes: int) -> Refusal | None:
        samples = self._samples
        if samples and now - samples[-1][0] < self.SAMPLE_SECONDS:
            return None
        samples.append((now, total_bytes))
        while len(samples) > 2 and now - samples[1][0] >= self.window:
            samples.popleft()
        began, before = samples[0]
        seconds = now - began
        if seconds < MIN_RATE_WINDOW:
            return None
        rate = (total_bytes - before) * 8 / seconds
        assert self.rate_limit is not None
        if rate <= self.rate_limit:
            return None
        return Refusal(Limit.RATE, f"the test ran at {format_rate(rate)} over {seconds:.1f} "
                       f"s, more than this server's limit of {format_rate(self.rate_limit)} "
                       "(--server-bitrate-limit)")
