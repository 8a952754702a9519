"""A responsiveness run, whatever carries it: the draft's algorithm (engine/responsiveness.py)
fed interval by interval from a source of load and probes (the native protocol's,
native/responsiveness.py; HTTP/2's, responsiveness/probes.py), its lines printed as the run
goes and its result at the end, in text or one JSON document."""

from __future__ import annotations

import contextlib
import random
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Protocol

from ..description.client_options import ClientOptions
from ..engine.responsiveness import PROBE_KINDS, ResponsivenessRun
from ..errors import Interrupted, ReportedError, SimpleperfError
from ..report import responsiveness as rpm_report

WAKE_SECONDS = 0.05


class LoadItem(Protocol):
    """A load-generating connection, as the loop drives it."""

    download: bool
    accepted: bool  # the server took it: it carries load
    deadline: float  # monotonic: not accepted by then ends the run

    @property
    def sock(self) -> socket.socket: ...

    @property
    def events(self) -> int: ...

    def moved(self) -> int: ...

    def ask(self, number: int) -> None: ...


class ProbeItem(Protocol):
    """A foreign probe in flight."""

    deadline: float  # monotonic: not answered by then, it is given up

    @property
    def sock(self) -> socket.socket: ...

    @property
    def events(self) -> int: ...


class ProbeLoop:
    """The run's load-generating connections and its probes, in one selector loop on a
    thread of its own: a probe pair (a foreign probe, a self probe on a load-generating
    connection chosen at random) at the rate the ramp sets, the probes' times collected by
    kind. What a connection and a probe are, and how their events are served, is the
    subclass's (`_load`, `_foreign`, `_serve`)."""

    FAILURES: tuple[type[BaseException], ...] = (OSError,)  # what a served event may raise

    def __init__(self, options: ClientOptions, kinds: tuple[str, ...] = PROBE_KINDS) -> None:
        self.options = options
        # which ways the load runs (download: the server sends); --bidir both at once
        self.directions = (False, True) if options.test.direction == "bidir" else (
            options.test.direction == "reverse",)
        self.kinds = kinds
        self.connections: list[LoadItem] = []
        self.foreign: list[ProbeItem] = []
        self.selector = selectors.DefaultSelector()
        self.lock = threading.Lock()
        self.samples: dict[str, list[float]] = {kind: [] for kind in kinds}
        self.unanswered = 0  # foreign probes that timed out
        self.failure: str | None = None
        self.rate = 1.0  # probe pairs a second, set by the main thread
        self._pairs = 0
        self._next_pair = time.monotonic()
        self._stop = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self.selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._loop, name="rpm load", daemon=True)

    def _load(self, download: bool) -> LoadItem:
        raise NotImplementedError

    def _foreign(self, number: int) -> ProbeItem:
        raise NotImplementedError

    def _serve(self, item: object, events: int) -> None:
        raise NotImplementedError

    def _failed(self, item: object, error: BaseException) -> str:
        kind = "load-generating connection" if item in self.connections else "foreign probe"
        return f"a {kind} failed: " + (
            f"{error.strerror or error}" if isinstance(error, OSError) else f"{error}")

    def open(self, count: int) -> None:
        """`count` more load-generating connections each way the load runs, begun in the
        loop (whose failure, a refusal among them, ends the run)."""
        with self.lock:
            for _ in range(count):
                for download in self.directions:
                    try:
                        connection = self._load(download)
                    except OSError as error:
                        self.failure = self._failed(None, error)
                        return
                    self.connections.append(connection)
                    self.selector.register(connection.sock, connection.events, connection)
        self._wake()
        if not self._thread.is_alive():
            self._thread.start()

    def first_accepted(self) -> None:
        """Wait for the server's answer to the first connection: a refusal, or no answer in
        time, is raised (SimpleperfError) before anything is printed."""
        while not self.loading() and self.failure is None:
            time.sleep(0.005)
        if self.failure is not None:
            raise SimpleperfError(self.failure)

    def loading(self) -> int:
        """Connections the server accepted, carrying load."""
        with self.lock:
            return sum(connection.accepted for connection in self.connections)

    def moved(self) -> tuple[int, int]:
        """Bytes of load moved so far: (uplink, downlink)."""
        with self.lock:
            moved = [(connection.download, connection.moved())
                     for connection in self.connections]
        return (sum(size for download, size in moved if not download),
                sum(size for download, size in moved if download))

    def opened(self) -> int:
        """Load-generating connections opened so far, each way the load runs."""
        with self.lock:
            return len(self.connections) // len(self.directions)

    def take_samples(self) -> dict[str, list[float]]:
        with self.lock:
            taken = self.samples
            self.samples = {kind: [] for kind in taken}
            return taken

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError):
            self._wake_w.send(b"w", socket.MSG_DONTWAIT)

    def _loop(self) -> None:
        while not self._stop.is_set() and self.failure is None:
            now = time.monotonic()
            if now >= self._next_pair and self._launch_pair():
                self._next_pair = max(self._next_pair + 1 / self.rate, now)
            self._expire(now)
            wait = min(WAKE_SECONDS, max(0.001, self._next_pair - time.monotonic()))
            for key, events in self.selector.select(wait):
                if key.data is None:
                    self._wake_r.recv(4096)
                    continue
                try:
                    with self.lock:
                        self._serve(key.data, events)
                except self.FAILURES as error:
                    self.failure = self._failed(key.data, error)

    def _launch_pair(self) -> bool:
        """A foreign and a self probe, once a connection carries load (False before)."""
        with self.lock:
            loading = [c for c in self.connections if c.accepted]
            if not loading:
                return False
            self._pairs += 1
            try:
                probe = self._foreign(self._pairs)
            except OSError as error:
                self.failure = self._failed(None, error)
                return False
            self.foreign.append(probe)
            self.selector.register(probe.sock, probe.events, probe)
            connection = random.choice(loading)
            connection.ask(self._pairs)
            self.selector.modify(connection.sock, connection.events, connection)
            return True

    def _expire(self, now: float) -> None:
        """Foreign probes past their time are given up (and counted); a load-generating
        connection the server has not accepted in time ends the run."""
        with self.lock:
            for probe in [p for p in self.foreign if now > p.deadline]:
                self._forget(probe)
                self.unanswered += 1
            if any(not c.accepted and now > c.deadline for c in self.connections):
                self.failure = (f"the server did not accept a load-generating connection "
                                f"within {self.options.connect_timeout:g} s")

    def _forget(self, probe: ProbeItem) -> None:
        self.foreign.remove(probe)
        self.selector.unregister(probe.sock)
        probe.sock.close()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2)
        for sock in [item.sock for item in self.connections] + [p.sock for p in self.foreign]:
            sock.close()
        self.selector.close()
        self._wake_r.close()
        self._wake_w.close()


def measure(options: ClientOptions, out: Callable[[str], None], probes: ProbeLoop,
            ramp: ResponsivenessRun, idle: dict[str, float], note: str = "") -> None:
    """Ramp until stable or -t is over, then the result; a failure is raised after it (in
    JSON inside the document)."""
    parameters, limit = ramp.parameters, options.seconds
    interrupted = False
    try:
        probes.open(parameters.initial)
        probes.first_accepted()
        if not options.json:
            out(rpm_report.header(options, parameters, limit, note))
        _ramp(probes, ramp, limit, out, options)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        probes.close()
    result = ramp.result(probes.unanswered)
    failure = probes.failure or ("interrupted" if interrupted else None)
    if options.json:
        out(rpm_report.document(options, parameters, limit, idle, result, failure))
    else:
        for line in rpm_report.summary_lines(result, idle, options.unit):
            out(line)
    if interrupted:
        raise Interrupted
    if failure is not None:
        raise ReportedError(failure) if options.json else SimpleperfError(failure)


def _ramp(probes: ProbeLoop, ramp: ResponsivenessRun, limit: float,
          out: Callable[[str], None], options: ClientOptions) -> None:
    """Interval by interval until stable, -t is over, or a connection or probe fails."""
    parameters = ramp.parameters
    began = time.monotonic()
    before = (0, 0)
    while True:
        end = began + (len(ramp.intervals) + 1) * parameters.interval
        while time.monotonic() < end:
            if probes.failure:
                return
            time.sleep(min(WAKE_SECONDS, max(0.0, end - time.monotonic())))
        moved = probes.moved()
        for kind, values in probes.take_samples().items():
            for milliseconds in values:
                ramp.add_probe(kind, milliseconds)
        up, down = moved[0] - before[0], moved[1] - before[1]
        add = ramp.end_interval(up + down, probes.opened(),
                                (up, down) if len(probes.directions) > 1 else None)
        if (idle := ramp.idle_direction()) is not None:
            probes.failure = (f"nothing moved {idle} in {len(ramp.intervals)} intervals: does "
                              "the server load both ways at once?")
        probes.rate = ramp.probe_rate()
        before = moved
        if not options.json:
            out(rpm_report.interval_line(ramp.intervals[-1], parameters, options.unit))
        if ramp.done or time.monotonic() - began + parameters.interval > limit + 1e-6:
            return
        if add:
            probes.open(add)
