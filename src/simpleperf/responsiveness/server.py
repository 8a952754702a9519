"""The server's HTTP connections: the draft's endpoints (endpoints.py) over HTTP/2 with TLS
(ALPN h2, what networkQuality and mach speak), HTTP/1.1 with or without TLS, and cleartext
HTTP/2 (h2c, a client's prior knowledge). One thread a connection, as every protocol of
the port; HTTP/2's framing is h2's (sans IO, as our own exchange is), TLS the standard
library's over memory buffers, since the port has read the connection's first bytes to
tell what it speaks.

A connection is one of the server's tests for --max-clients and the memory budget (a
refusal is a 503 with Retry-After; an idle connection is charged what it holds, one that
carries a load the rest when its first load is asked for), lives at most
CONNECTION_SECONDS (or the server's --max-duration), and keeps the limits of endpoints.py
on header sizes and open streams. When the port runs short of connections, the one idle
longest is asked to close for the new one's place (drain)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Callable

from ..description.options import ServerOptions
from ..description.transports import TCP
from ..errors import SimpleperfError
from ..policy import ServerPolicy
from ..protocol.detect import H2C, TLS, detect
from ..units import format_iperf3_amount
from . import endpoints
from .endpoints import Answer
from .http1 import serve_http1
from .tls import ServerTls, tls_names
from .wire import IDLE_MEMORY, LINGER_SECONDS, LOAD_MEMORY, Closed, Wire

DRAIN_IDLE_SECONDS = 1.0  # an idle connection closed for a new one's place: idle this long


class HttpService:
    """Serves the port's HTTP connections (protocol/detect.py: TLS, HTTP/1.1, h2c)."""

    def __init__(self, options: ServerOptions, policy: ServerPolicy,
                 say: Callable[..., None], stopping: threading.Event) -> None:
        self.options, self.policy, self.say, self.stopping = options, policy, say, stopping
        self.open: dict[Wire, str] = {}  # the connections being served: their host
        self._lock = threading.Lock()
        self.tls: ServerTls | None = None
        self.tls_missing = ""  # without a certificate: why
        try:
            self.tls = ServerTls(options.cert, options.key, tls_names(options.bind))
        except SimpleperfError as error:
            if options.cert is not None:
                raise
            self.tls_missing = str(error)

    def banner(self) -> str:
        """Where responsiveness clients find the configuration, and the certificate."""
        bind = self.options.bind
        host = bind if bind not in (None, "0.0.0.0", "::") else "127.0.0.1"
        where = f"[{host}]:{self.options.port}" if ":" in str(host) else \
            f"{host}:{self.options.port}"
        if self.tls is None:
            return (f"Responsiveness (RPM): http://{where}/.well-known/nq; no HTTPS: "
                    f"{self.tls_missing}")
        made = "self-signed, made at start" if self.tls.self_signed else "--cert"
        return (f"Responsiveness (RPM): https://{where}/.well-known/nq (certificate {made}, "
                f"SHA-256 {self.tls.fingerprint})")

    def drain(self, host: str | None) -> str | None:
        """Ask the connection (of `host`, or any) idle longest, DRAIN_IDLE_SECONDS at
        least, to close for a new one's place, as nginx closes idle keep-alive connections
        when it runs short (mach keeps its probes' connections open to its test's end):
        its host, or None if none is."""
        now = time.monotonic()
        with self._lock:
            idle = [(wire.idle_since, wire, owner) for wire, owner in self.open.items()
                    if wire.idle_since is not None and not wire.drained.is_set()
                    and now - wire.idle_since >= DRAIN_IDLE_SECONDS
                    and host in (None, owner)]
            if not idle:
                return None
            _, wire, owner = min(idle, key=lambda found: found[0])
            wire.drained.set()
            return owner

    def serve(self, conn: socket.socket, peer: str, host: str, prefix: bytes) -> bool:
        """Serve one connection (HTTPS, HTTP/1.1 or h2c, as its first bytes say) from
        `host`; whether it carried a load (a large object or an upload)."""
        kind = detect(prefix)
        # an answer goes out at once, not after the peer's (delayed) acknowledgement of
        # what went before it: a probe's time is the path's, as nginx's tcp_nodelay keeps it
        with contextlib.suppress(OSError):
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if kind == TLS and self.tls is None:
            self.say(f"HTTPS from {peer} closed: this server has no certificate")
            return False
        limit = min(endpoints.CONNECTION_SECONDS, self.policy.time_limit or float("inf"))
        began = time.monotonic()
        refused = self.policy.admit(TCP, 1, None, 0.0, memory=IDLE_MEMORY)
        connection = _Connection(self, peer, refused is not None)
        wire = None
        try:
            context = self.tls.context if kind == TLS and self.tls is not None else None
            wire = Wire(conn, prefix, began + limit, self.stopping, context)
            with self._lock:
                self.open[wire] = host
            http2 = wire.alpn == "h2" or (kind == H2C)
            connection.serve(wire, http2)
        except (Closed, ssl.SSLError, OSError):
            pass
        finally:
            if refused is None:
                self.policy.release(IDLE_MEMORY)
            if connection.load_held:
                self.policy.memory.give_back(LOAD_MEMORY)
            if wire is not None:
                wire.linger(LINGER_SECONDS)
                with self._lock:
                    self.open.pop(wire, None)
                if wire.drained.is_set():
                    self.policy.drained(host)
        if connection.loads:
            self.say(connection.summary(time.monotonic() - began))
        return bool(connection.loads)


class _Connection:
    """One HTTP connection's requests and what they moved."""

    def __init__(self, service: HttpService, peer: str, refused: bool) -> None:
        self.service, self.peer, self.refused = service, peer, refused
        self.requests = 0
        self.loads: list[str] = []  # the endpoints that moved a load: large, upload
        self.load_held = False  # LOAD_MEMORY of the budget taken for them
        self.wire: Wire | None = None
        self.how = ""

    def serve(self, wire: Wire, http2: bool) -> None:
        self.wire = wire
        self.how = ("HTTP/2" if http2 else "HTTP/1.1") + (" over TLS" if wire.tls else "")
        scheme = "https" if wire.tls is not None else "http"
        if not http2:
            serve_http1(wire, self.answer, scheme)
            return
        try:
            from .http2 import serve_http2
        except ImportError:  # h2, the rpm extra's: HTTP/2 is said to be missing
            self.service.say(f"HTTP/2 from {self.peer} closed: it needs h2 (pip install "
                             "'simpleperf[rpm]')")
            return
        serve_http2(wire, self.answer, scheme)

    def answer(self, method: str, target: str, authority: str | None, scheme: str) -> Answer:
        """What a request gets: a refusal while the server is full, else its endpoint's."""
        self.requests += 1
        if self.refused:
            return endpoints.refusal(503, "this server runs as many tests as it takes "
                                     "(--max-clients) or its memory budget is spent", 1)
        found, endpoint = endpoints.answer(method, target, authority, scheme)
        if endpoint is not None and (endpoint.body is None or endpoint.sink):
            if not self.load_held:
                if not self.service.policy.memory.take(LOAD_MEMORY):
                    return endpoints.refusal(503, "this server's memory budget is spent "
                                             "(--memory-budget): no load now", 1)
                self.load_held = True
            if endpoint.name not in self.loads:
                self.loads.append(endpoint.name)
        return found

    def summary(self, seconds: float) -> str:
        wire = self.wire
        moved = "nothing moved" if wire is None else (
            f"{format_iperf3_amount(wire.sent)} sent, "
            f"{format_iperf3_amount(wire.received)} received")
        return (f"Responsiveness load from {self.peer} ({self.how}): {' and '.join(self.loads)}"
                f", {moved} in {seconds:.1f} s, {self.requests} requests")

