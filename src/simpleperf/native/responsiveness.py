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
import selectors
import socket
import time
from collections.abc import Callable

from ..description.client_options import ClientOptions
from ..description.transports import TCP
from ..engine.latency import TCP_REPLY_TIMEOUT, EchoProber
from ..engine.responsiveness import (
    CONNECT,
    FOREIGN,
    LOADED,
    LoadUnsentLimit,
    ResponsivenessRun,
    RpmParameters,
)
from ..engine.tcp_stream import follow_unsent
from ..errors import ProtocolError, SimpleperfError
from ..protocol import load
from ..protocol.native import ECHO, ECHO_PROBE, LOAD, echo_probe, preface
from ..responsiveness import ramp
from ..transport import socket_options, tcp, tcpinfo

READ_SIZE = 256 * 1024
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

    @property
    def events(self) -> int:
        return selectors.EVENT_WRITE if self.connected is None else selectors.EVENT_READ

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


class ProbeLoop(ramp.ProbeLoop):
    """The native protocol's load-generating connections and probes (ramp.ProbeLoop): bulk
    records each way, echoes on new connections."""

    FAILURES = (OSError, ProtocolError)

    def __init__(self, options: ClientOptions, address: tuple, family: int, seconds: int,
                 connections: int) -> None:
        super().__init__(options)
        self.address, self.family = address, family
        self.token = os.urandom(load.TOKEN_SIZE)
        self.seconds = seconds
        self.max_connections = connections * len(self.directions)

    def _load(self, download: bool) -> LoadConnection:
        request = load.request(self.token, download, self.seconds, self.max_connections,
                               self.options.secret, self.options.test.congestion)
        return LoadConnection(self.options, self.address, self.family, request, download)

    def _foreign(self, number: int) -> ForeignProbe:
        return ForeignProbe(self.address, self.family, self.options, number)

    def _serve(self, item: object, events: int) -> None:
        if isinstance(item, ForeignProbe):
            if events & selectors.EVENT_WRITE:
                item.writable()
                self.selector.modify(item.sock, selectors.EVENT_READ, item)
            elif (times := item.readable()) is not None:
                self.samples[CONNECT].append(times[0])
                self.samples[FOREIGN].append(times[1])
                self._forget(item)
            return
        assert isinstance(item, LoadConnection)
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
    idle, address, family = idle_probe(options)
    probes = ProbeLoop(options, address, family, math.ceil(options.seconds),
                       parameters.max_connections)
    ramp.measure(options, out, probes, ResponsivenessRun(parameters),
                 {CONNECT: idle[0], FOREIGN: idle[1]})
