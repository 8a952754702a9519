"""`simpleperf -c URL --rpm`: responsiveness as draft-ietf-ippm-responsiveness measures it,
over HTTP/2 with TLS, against any server that serves the draft's endpoints (networkQuality's
and mach's servers, nginx set up as Apple's, a simpleperf server).

The configuration comes first (a GET of the URL), then one foreign probe at idle. Then the
load: each load-generating connection is a connection of its own carrying one GET of the
large object (download) or one POST to the upload sink (upload; with --bidir as many of
each), one more each interval until the draft's algorithm (engine/responsiveness.py) finds
goodput and then responsiveness stable, or -t runs out. Alongside, probe pairs at the
draft's rate: a foreign probe (a new connection: its TCP handshake, its TLS handshake, a GET
of the small object: tcp_f, tls_f, http_f) and a self probe (a GET of the small object on a
load-generating connection, behind its load: http_l)."""

from __future__ import annotations

import contextlib
import selectors
import socket
import time
from collections.abc import Callable

import h2.events

from ..description.client_options import ClientOptions
from ..engine.latency import TCP_REPLY_TIMEOUT
from ..engine.responsiveness import (
    CONNECT,
    FOREIGN,
    LOADED,
    PROBE_KINDS,
    TLS,
    TLS_PROBE_KINDS,
    LoadUnsentLimit,
    ResponsivenessRun,
    RpmParameters,
)
from ..engine.tcp_stream import follow_unsent
from ..errors import SimpleperfError
from ..transport import socket_options, tcpinfo
from . import ramp
from .config import MAX_CONFIG_BYTES, Endpoints, Url, configuration_url, parse_configuration
from .h2_client import ConnectionFailed, H2Client, client_context
from .wire import ZEROS  # an upload's body: a record at a time, from the one buffer

UPLOAD_LENGTH = 10**12  # what an upload says it will send: more than any run does
PROBE_SECONDS = TCP_REPLY_TIMEOUT  # a foreign probe's request, once connected


class Target:
    """Where the requests go: each URL's server resolved once, TLS's context."""

    def __init__(self, options: ClientOptions) -> None:
        self.options = options
        self.context = client_context(options.insecure)
        self._addresses: dict[tuple[str, int], tuple[tuple, int]] = {}

    def address(self, url: Url) -> tuple[tuple, int]:
        key = (url.host, url.port)
        if key not in self._addresses:
            try:
                found = socket.getaddrinfo(url.host, url.port, self.options.family,
                                           socket.SOCK_STREAM)
            except OSError as error:
                raise SimpleperfError(f"{url.host}: {error.strerror or error}") from None
            self._addresses[key] = (found[0][4], found[0][0])
        return self._addresses[key]

    def connect(self, url: Url, load: bool = False) -> H2Client:
        address, family = self.address(url)
        test = self.options.test
        return H2Client(url, address, family, self.context if url.tls else None,
                        self.options, test.window if load else None,
                        test.congestion if load else None)


class Exchange:
    """One request on a connection of its own (the configuration, a foreign probe): the
    handshakes' times and the answer."""

    def __init__(self, target: Target, url: Url) -> None:
        self.client = target.connect(url)
        self.deadline = time.monotonic() + target.options.connect_timeout + PROBE_SECONDS
        self.sid: int | None = None
        self.asked: int | None = None
        self.status: int | None = None
        self.body = bytearray()
        self.ended: int | None = None

    @property
    def sock(self) -> socket.socket:
        return self.client.sock

    def writable(self) -> None:
        self.client.writable()
        self._ask()

    def readable(self) -> bool:
        """Whether the answer is whole."""
        for event in self.client.readable():
            if getattr(event, "stream_id", None) != self.sid:
                continue
            if isinstance(event, h2.events.ResponseReceived):
                self.status = _status(event)
            elif isinstance(event, h2.events.DataReceived):
                if len(self.body) < MAX_CONFIG_BYTES:
                    self.body += event.data
            elif isinstance(event, h2.events.StreamEnded):
                self.ended = time.monotonic_ns()
            elif isinstance(event, h2.events.StreamReset):
                raise ConnectionFailed(f"the server reset the request for "
                                       f"{self.client.url.path}")
        self._ask()
        return self.ended is not None

    def _ask(self) -> None:
        if self.client.ready and self.sid is None:
            self.sid = self.client.request("GET", self.client.url.path)
            self.asked = time.monotonic_ns()
            self.client.flush()

    def times(self) -> dict[str, float]:
        """The foreign probe's round trips, in milliseconds."""
        client = self.client
        assert client.connected is not None and self.asked is not None and self.ended
        times = {CONNECT: (client.connected - client.began) / 1e6}
        if client.secured is not None:
            times[TLS] = (client.secured - client.connected) / 1e6
        times[FOREIGN] = (self.ended - self.asked) / 1e6
        return times

    @property
    def events(self) -> int:
        return selectors.EVENT_READ | (selectors.EVENT_WRITE if self.client.connecting
                                       or self.client.out else 0)


def _status(event: h2.events.ResponseReceived) -> int:
    for name, value in event.headers or ():
        if name == ":status":
            with contextlib.suppress(ValueError):
                return int(value)
    return 0


def exchange(target: Target, url: Url) -> Exchange:
    """One request, blocking: the answer whole, or SimpleperfError saying why not."""
    done = Exchange(target, url)
    selector = selectors.DefaultSelector()
    try:
        selector.register(done.client.sock, done.events)
        while True:
            if time.monotonic() > done.deadline:
                raise SimpleperfError(f"{url}: no answer within "
                                      f"{target.options.connect_timeout + PROBE_SECONDS:g} s")
            for _, mask in selector.select(0.05):
                if mask & selectors.EVENT_WRITE:
                    done.writable()
                if mask & selectors.EVENT_READ and done.readable():
                    return done
            selector.modify(done.client.sock, done.events)
    except ConnectionFailed as error:
        raise SimpleperfError(f"{url}: {error}") from None
    finally:
        selector.close()
        done.client.close()


class LoadConnection:
    """A load-generating connection: one GET of the large object or one POST to the
    upload sink, and the self probes asked on it."""

    def __init__(self, target: Target, endpoints: Endpoints, download: bool) -> None:
        self.download = download
        self.url = endpoints.large if download else endpoints.upload
        self.small = endpoints.small
        self.client = target.connect(self.url, load=True)
        self.deadline = time.monotonic() + target.options.connect_timeout
        self.sid: int | None = None
        self.accepted = False
        self.body_bytes = 0  # the load's body: read (download) or written (upload)
        self.probes: dict[int, int] = {}  # stream -> when it was asked, ns
        self.waiting = 0  # self probes asked before the connection was ready
        self.unsent = LoadUnsentLimit()

    @property
    def events(self) -> int:
        client = self.client
        write = client.connecting or bool(client.out) or (
            not self.download and self.sid is not None and client.window(self.sid) > 0)
        return selectors.EVENT_READ | (selectors.EVENT_WRITE if write else 0)

    def moved(self) -> int:
        """Bytes of the load's body that arrived: read, or acknowledged (in proportion)."""
        if self.download or not self.client.wire_sent:
            return self.body_bytes if self.download else 0
        acked = tcpinfo.bytes_acked(self.client.sock)
        if acked is None:
            return self.body_bytes
        return min(self.body_bytes, acked * self.body_bytes // self.client.wire_sent)

    @property
    def sock(self) -> socket.socket:
        return self.client.sock

    def ask(self, number: int = 0) -> None:
        """A self probe: the small object, on this connection behind its load."""
        if not self.client.ready:
            self.waiting += 1
            return
        sid = self.client.request("GET", self.small.path)
        self.probes[sid] = time.monotonic_ns()

    def writable(self) -> None:
        client = self.client
        client.writable()
        self._start()
        if not self.download and self.sid is not None and not client.out:
            follow_unsent(client.sock, self.unsent, time.monotonic())
            self.body_bytes += client.send_body(self.sid, self.unsent.record, ZEROS)
            client.flush()

    def _start(self) -> None:
        client = self.client
        if not client.ready or self.sid is not None:
            return
        if self.download:
            self.sid = client.request("GET", self.url.path)
        else:
            self.sid = client.request("POST", self.url.path, end_stream=False,
                                      length=UPLOAD_LENGTH)
            self.accepted = True  # its answer comes at the body's end, or on refusal
            socket_options.set_unsent_limit(client.sock, self.unsent.limit)
        for _ in range(self.waiting):
            self.ask()
        self.waiting = 0
        client.flush()

    def readable(self) -> list[float]:
        """Self probes answered, in milliseconds."""
        now = time.monotonic_ns()
        answered = []
        for event in self.client.readable():
            sid = getattr(event, "stream_id", None)
            if sid == self.sid:
                self._load_event(event)
            elif sid in self.probes:
                if isinstance(event, h2.events.StreamEnded):
                    answered.append((now - self.probes.pop(sid)) / 1e6)
                elif isinstance(event, h2.events.ResponseReceived) and _status(event) != 200:
                    raise ConnectionFailed(f"the server answered {_status(event)} to GET "
                                           f"{self.small.path}")
                elif isinstance(event, h2.events.StreamReset):
                    raise ConnectionFailed(f"the server reset GET {self.small.path}")
        self._start()
        return answered

    def _load_event(self, event: h2.events.Event) -> None:
        method = "GET" if self.download else "POST"
        if isinstance(event, h2.events.ResponseReceived):
            if _status(event) != 200 or not self.download:
                raise ConnectionFailed(f"the server answered {_status(event)} to {method} "
                                       f"{self.url.path}")
            self.accepted = True
        elif isinstance(event, h2.events.DataReceived):
            self.body_bytes += event.flow_controlled_length
        elif isinstance(event, h2.events.StreamEnded):
            raise ConnectionFailed(f"the server ended {method} {self.url.path}")
        elif isinstance(event, h2.events.StreamReset):
            raise ConnectionFailed(f"the server reset {method} {self.url.path}")


class ProbeLoop(ramp.ProbeLoop):
    """HTTP/2's load-generating connections and probes (ramp.ProbeLoop)."""

    FAILURES = (ConnectionFailed, OSError)

    def __init__(self, options: ClientOptions, target: Target, endpoints: Endpoints) -> None:
        super().__init__(options, TLS_PROBE_KINDS if endpoints.small.tls else PROBE_KINDS)
        self.target, self.endpoints = target, endpoints

    def _load(self, download: bool) -> LoadConnection:
        return LoadConnection(self.target, self.endpoints, download)

    def _foreign(self, number: int) -> Exchange:
        return Exchange(self.target, self.endpoints.small)

    def _failed(self, item: object, error: BaseException) -> str:
        if isinstance(item, (LoadConnection, Exchange)):
            kind = "foreign probe" if isinstance(item, Exchange) else \
                "load-generating connection"
            return f"a {kind} to {item.client.url.authority} failed: {error}"
        return super()._failed(item, error)

    def _serve(self, item: object, events: int) -> None:
        if isinstance(item, Exchange):
            if events & selectors.EVENT_WRITE:
                item.writable()
            if events & selectors.EVENT_READ and item.readable():
                if item.status != 200:
                    raise ConnectionFailed(f"the server answered {item.status} to GET "
                                           f"{item.client.url.path}")
                for kind, milliseconds in item.times().items():
                    self.samples[kind].append(milliseconds)
                self._forget(item)
                return
            self.selector.modify(item.sock, item.events, item)
            return
        assert isinstance(item, LoadConnection)
        if events & selectors.EVENT_WRITE:
            item.writable()
        if events & selectors.EVENT_READ:
            self.samples[LOADED].extend(item.readable())
        self.selector.modify(item.sock, item.events, item)


def run(options: ClientOptions, out: Callable[[str], None]) -> None:
    assert options.rpm_url is not None
    where = configuration_url(options.rpm_url)
    target = Target(options)
    fetched = exchange(target, where)
    if fetched.status != 200:
        raise SimpleperfError(f"{where}: the server answered {fetched.status}")
    endpoints = parse_configuration(bytes(fetched.body), where)
    idle = exchange(target, endpoints.small)
    if idle.status != 200:
        raise SimpleperfError(f"{endpoints.small}: the server answered {idle.status}")
    parameters = RpmParameters(interval=options.rpm_interval)
    probes = ProbeLoop(options, target, endpoints)
    note = " (HTTP/2" + (", TLS unchecked: --insecure)" if options.insecure and
                         endpoints.small.tls else ")")
    ramp.measure(options, out, probes, ResponsivenessRun(parameters, probes.kinds),
                 idle.times(), note)
