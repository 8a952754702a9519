"""`simpleperf -c HOST --rpm`: responsiveness under working conditions, as
draft-ietf-ippm-responsiveness measures it, against a simpleperf server.

Load-generating connections (protocol/load.py) carry bulk data one way (the client sends;
with -R the server does; with --bidir both at once, as many connections each way, as
Apple's networkQuality runs by default), one more (each way) each interval until the
draft's algorithm (engine/responsiveness.py) finds goodput and then responsiveness stable,
or -t runs out.
Alongside, probe pairs: a foreign probe opens a new connection to the server's echo service
(the handshake's time is the draft's tcp_f) and makes one round trip on it (http_f); a self
probe is a record sent on a load-generating connection, answered behind the bulk data that
direction carries (http_l). Without TLS the draft's TCP-only formula applies."""

from __future__ import annotations

import contextlib
import math
import os
import random
import selectors
import socket
import threading
import time
from collections.abc import Callable

from ..description.client_options import ClientOptions
from ..description.transports import TCP
from ..engine.latency import TCP_REPLY_TIMEOUT, EchoProber
from ..engine.responsiveness import (
    CONNECT,
    FOREIGN,
    LOADED,
    PROBE_KINDS,
    LoadUnsentLimit,
    ResponsivenessRun,
    RpmParameters,
)
from ..engine.tcp_stream import follow_unsent
from ..errors import Interrupted, ProtocolError, ReportedError, SimpleperfError
from ..protocol import load
from ..protocol.native import ECHO, ECHO_PROBE, LOAD, echo_probe, preface
from ..report import responsiveness as rpm_report
from ..transport import socket_options, tcp, tcpinfo

READ_SIZE = 256 * 1024
WAKE_SECONDS = 0.05
ECHO_SECONDS = TCP_REPLY_TIMEOUT


def _connecting(address: tuple, family: int, options: ClientOptions,
                window: int | None = None, congestion: str | None = None) -> socket.socket:
    """A non-blocking socket whose handshake to `address` has begun (writable once done)."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        tcp.prepare(sock, window, congestion, tos=options.test.tos, local=options.local)
        sock.setblocking(False)
        sock.connect_ex(address)
    except BaseException:
        sock.close()
        raise
    return sock


def _connected(sock: socket.socket) -> None:
    """A writable connecting socket: its handshake's outcome (OSError if it failed)."""
    error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if error:
        raise OSError(error, os.strerror(error))


class LoadConnection:
    """One load-generating connection, driven by ProbeLoop's selector loop: connecting,
    then its request sent and the server's answer awaited, then load and self probes."""

    def __init__(self, options: ClientOptions, address: tuple, family: int, request: bytes,
                 download: bool) -> None:
        self.download = download
        self.secret = options.secret
        self.sock = _connecting(address, family, options, options.test.window,
                                options.test.congestion)
        self.deadline = time.monotonic() + options.connect_timeout
        self.request = preface(LOAD) + request
        self.accepted = False
        self.reader = load.RecordReader()
        self.out = bytearray()  # probe records (and, uploading, the current bulk record)
        self.queued: list[bytes] = []  # uploading: probes waiting for the record to end
        self.started: dict[int, int] = {}  # probe number -> when it was asked, ns
        self._acked_at_start = 0
        self._written = 0
        self.unsent = LoadUnsentLimit()

    @property
    def events(self) -> int:
        if self.request or (not self.download and self.accepted) or self.out:
            return selectors.EVENT_READ | selectors.EVENT_WRITE
        return selectors.EVENT_READ

    def moved(self) -> int:
        """Bytes of load that arrived so far: read (download) or acknowledged (upload)."""
        if self.download or not self.accepted:
            return self.reader.bulk_bytes
        acked = tcpinfo.bytes_acked(self.sock)
        return self._written if acked is None else acked - self._acked_at_start

    def ask(self, number: int) -> None:
        self.started[number] = time.monotonic_ns()
        probe = load.record(load.PROBE, echo_probe(number, time.monotonic_ns(), self.secret))
        if self.download:
            self.out += probe
        else:
            self.queued.append(probe)

    def writable(self) -> None:
        if self.request:  # the handshake is over: the request (small, the socket takes it)
            _connected(self.sock)
            self.sock.send(self.request)
            self.request = b""
            return
        if not self.out and not self.download:
            follow_unsent(self.sock, self.unsent, time.monotonic())
            self.out += b"".join(self.queued) + load.bulk(self.unsent.record)
            self.queued.clear()
        sent = self.sock.send(self.out)
        self._written += sent
        del self.out[:sent]

    def readable(self) -> list[float] | str:
        """Self probes answered, in milliseconds; or why the connection ends: the server's
        refusal or reason ("refused: ...", "ended: ..."), or "" if it closed it."""
        data = self.sock.recv(READ_SIZE)
        if not data:
            return ""
        now = time.monotonic_ns()
        answered = []
        for kind, payload in self.reader.feed(data):
            if kind == load.REFUSED:
                reason = payload.decode(errors="replace")
                return f"ended: {reason}" if self.accepted else f"refused: {reason}"
            if kind == load.ACCEPTED and not self.accepted:
                self._accept()
                continue
            if kind != load.PROBE or not self.accepted:
                raise ProtocolError(f"a record of kind {kind!r} "
                                    f"{'amid the load' if self.accepted else 'for an answer'}")
            began = self.started.pop(ECHO_PROBE.unpack_from(payload)[0], None)
            if began is not None:
                answered.append((now - began) / 1e6)
        return answered

    def _accept(self) -> None:
        self.accepted = True
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if not self.download:
            self._acked_at_start = tcpinfo.bytes_acked(self.sock) or 0
            socket_options.set_unsent_limit(self.sock, self.unsent.limit)


class ForeignProbe:
    """A foreign probe in flight: a new connection to the server's echo service (its
    handshake is the draft's tcp_f), then one echo on it (http_f)."""

    def __init__(self, address: tuple, family: int, options: ClientOptions, number: int
                 ) -> None:
        self.began = time.monotonic_ns()
        self.deadline = time.monotonic() + options.connect_timeout + ECHO_SECONDS
        self.sock = _connecting(address, family, options)
        self.message = echo_probe(number, self.began, options.secret)
        self.connected: int | None = None
        self.received = b""

    def writable(self) -> None:
        """The handshake is over: send the echo (a few bytes: the socket takes them)."""
        _connected(self.sock)
        self.connected = time.monotonic_ns()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.send(preface(ECHO) + self.message)

    def readable(self) -> tuple[float, float] | None:
        """(handshake, request) in milliseconds once the echo is back whole."""
        data = self.sock.recv(len(self.message))
        if not data:
            raise OSError(0, "the server closed the probe's connection")
        self.received += data
        if len(self.received) < len(self.message) or self.connected is None:
            return None
        return ((self.connected - self.began) / 1e6,
                (time.monotonic_ns() - self.connected) / 1e6)


class ProbeLoop:
    """The run's load-generating connections and its probes, in one selector loop on a
    thread of its own: bulk both ways, a probe pair (a foreign probe, a self probe on a
    load-generating connection chosen at random) at the rate the main thread sets, and
    the probes' times collected for it by kind."""

    def __init__(self, options: ClientOptions, address: tuple, family: int, seconds: int,
                 connections: int) -> None:
        self.options = options
        self.address, self.family = address, family
        # which ways the load runs (download: the server sends); --bidir both at once
        self.directions = (False, True) if options.test.direction == "bidir" else (
            options.test.direction == "reverse",)
        self.token = os.urandom(load.TOKEN_SIZE)
        self.seconds = seconds
        self.max_connections = connections * len(self.directions)
        self.connections: list[LoadConnection] = []
        self.foreign: list[ForeignProbe] = []
        self.selector = selectors.DefaultSelector()
        self.lock = threading.Lock()
        self.samples: dict[str, list[float]] = {kind: [] for kind in PROBE_KINDS}
        self.unanswered = 0  # foreign probes that timed out
        self.failure: str | None = None
        self.rate = 1.0  # probe pairs a second, set by the main thread
        self._pairs = 0
        self._next_pair = time.monotonic()
        self._stop = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self.selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._loop, name="rpm load", daemon=True)

    def open(self, count: int) -> None:
        """`count` more load-generating connections each way the load runs, begun in the
        loop (whose failure, a refusal among them, ends the run)."""
        with self.lock:
            for _ in range(count):
                for download in self.directions:
                    request = load.request(self.token, download, self.seconds,
                                           self.max_connections, self.options.secret,
                                           self.options.test.congestion)
                    connection = LoadConnection(self.options, self.address, self.family,
                                                request, download)
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
                except (OSError, ProtocolError) as error:
                    kind = "foreign probe" if isinstance(key.data, ForeignProbe) else \
                        "load-generating connection"
                    self.failure = f"a {kind} failed: {error.strerror or error}" \
                        if isinstance(error, OSError) else f"a {kind} failed: {error}"

    def _launch_pair(self) -> bool:
        """A foreign and a self probe, once a connection carries load (False before)."""
        with self.lock:
            loading = [c for c in self.connections if c.accepted]
            if not loading:
                return False
            self._pairs += 1
            probe = ForeignProbe(self.address, self.family, self.options, self._pairs)
            self.foreign.append(probe)
            self.selector.register(probe.sock, selectors.EVENT_WRITE, probe)
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

    def _forget(self, probe: ForeignProbe) -> None:
        self.foreign.remove(probe)
        self.selector.unregister(probe.sock)
        probe.sock.close()

    def _serve(self, item: LoadConnection | ForeignProbe, events: int) -> None:
        if isinstance(item, ForeignProbe):
            if events & selectors.EVENT_WRITE:
                item.writable()
                self.selector.modify(item.sock, selectors.EVENT_READ, item)
            elif (times := item.readable()) is not None:
                self.samples[CONNECT].append(times[0])
                self.samples[FOREIGN].append(times[1])
                self._forget(item)
            return
        if events & selectors.EVENT_WRITE:
            with contextlib.suppress(BlockingIOError):
                item.writable()
        if events & selectors.EVENT_READ:
            try:
                answered = item.readable()
            except BlockingIOError:
                answered = []
            if isinstance(answered, str):
                self.failure = (f"the server {answered.replace(': ', ' the run: ', 1)}"
                                if answered else "the server closed a load-generating "
                                "connection (is it a simpleperf server of this version?)")
                return
            self.samples[LOADED].extend(answered)
        self.selector.modify(item.sock, item.events, item)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2)
        for sock in [item.sock for item in self.connections] + [p.sock for p in self.foreign]:
            sock.close()
        self.selector.close()
        self._wake_r.close()
        self._wake_w.close()


def idle_probe(options: ClientOptions) -> tuple[tuple[float, float], tuple, int]:
    """A foreign probe before any load, blocking (the echo prober's one round trip): the
    server answers (or one line says why not), its idle times, and the address every later
    probe connects to."""
    began = time.monotonic_ns()
    prober = EchoProber(options.host, options.port, TCP, options.family, options.secret,
                        options.connect_timeout, options.test.tos, options.local)
    connected = time.monotonic_ns()
    try:
        address, family = prober.sock.getpeername(), prober.sock.family
        answered = prober.probe()
    except OSError as error:
        raise SimpleperfError(f"a probe's connection failed: {error.strerror or error}"
                              ) from None
    finally:
        prober.close()
    assert answered is not None  # TCP: an answer, or SimpleperfError
    return ((connected - began) / 1e6, answered), address, family


def run(options: ClientOptions, out: Callable[[str], None]) -> None:
    parameters = RpmParameters(interval=options.rpm_interval)
    limit = options.seconds
    ramp = ResponsivenessRun(parameters)
    idle, address, family = idle_probe(options)
    probes = ProbeLoop(options, address, family, math.ceil(limit), parameters.max_connections)
    interrupted = False
    try:
        probes.open(parameters.initial)
        probes.first_accepted()
        if not options.json:
            out(rpm_report.header(options, parameters, limit))
        _ramp(probes, ramp, parameters, limit, out, options)
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


def _ramp(probes: ProbeLoop, ramp: ResponsivenessRun, parameters: RpmParameters,
          limit: float, out: Callable[[str], None], options: ClientOptions) -> None:
    """Interval by interval until stable, -t is over, or a connection or probe fails."""
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
                              "the server load both ways at once (a simpleperf server of this "
                              "version)?")
        probes.rate = ramp.probe_rate()
        before = moved
        if not options.json:
            out(rpm_report.interval_line(ramp.intervals[-1], parameters, options.unit))
        if ramp.done or time.monotonic() - began + parameters.interval > limit + 1e-6:
            return
        if add:
            probes.open(add)
