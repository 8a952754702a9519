"""The server: accept connections, serve each in its own thread, report each when it ends.

Each connection is independent: one that sends nothing, trickles or dies never delays the
others, and its thread and socket are gone when it ends.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..classic.server import ClassicService
from ..description.options import ServerOptions
from ..errors import ProtocolError
from ..iperf2.server import Iperf2Service
from ..iperf3.server import Iperf3Service
from ..native.server import NativeService
from ..policy import ServerPolicy
from ..protocol import iperf2, iperf3, native
from ..protocol.detect import CLASSIC, H2C, HTTP1, IPERF2, IPERF3, NATIVE, NEEDED, TLS, detect
from ..report import classic as table
from ..responsiveness.server import HttpService
from ..transport import tcp
from ..transport.udp_port import UdpPort
from ..units import format_rate
from .refuser import Refuser

UNDECIDED_SECONDS = 2.0  # a prefix that could be more than one protocol: then classic
CLOSED_EMPTY = "closed"  # what _identify says of a connection closed before its first byte


@dataclass
class _Served:
    """What a connection turned out to be, as its protocol's server says: kept open (it
    belongs to a test now) and a test of its own (-1 exits after it)."""

    accepted: float  # monotonic time
    index: int  # the accept loop's count
    keep_open: bool = False
    a_test: bool = False


class Server:
    def __init__(self, options: ServerOptions, out: Callable[[str], None]) -> None:
        self.options = options
        self._out = out
        self._print_lock = threading.Lock()
        self._stopping = threading.Event()
        self._active: dict[threading.Thread, socket.socket] = {}
        self._active_lock = threading.Lock()
        self._idle_limit = options.idle_limit
        self.listener = tcp.open_listener(options.bind, options.port, window=options.window,
                                          congestion=options.congestion, mptcp=options.mptcp,
                                          device=options.bind_dev)
        policy = self.policy = ServerPolicy(options)
        self.refuser = Refuser(self.say, self._stopping)
        self.udp_port = UdpPort(self.listener, self._stopping, self._datagram)
        policy.udp_available = self.udp_port.available
        self.native = NativeService(options, self.udp_port, self.say, self._stopping, policy)
        self.iperf3 = Iperf3Service(options, policy, self.say, self._stopping, self.udp_port)
        self.iperf2 = Iperf2Service(options, policy, self.say, self._stopping, self.udp_port)
        self.classic = ClassicService(options, policy, self.say, self._stopping)
        self.http = HttpService(options, policy, self.say, self._stopping)
        self.native.document = self.iperf3.document = self.iperf2.document = self.document
        self.classic.document = self.document
        self._accepted = 0
        # who serves a connection, by what its first bytes are (protocol/detect.py)
        self._protocols: dict[str, Callable[[socket.socket, str, bytes, _Served], None]] = {
            NATIVE: self._serve_native, IPERF2: self._serve_iperf2,
            IPERF3: self._serve_iperf3, CLASSIC: self._serve_classic,
            **dict.fromkeys((TLS, HTTP1, H2C), self._serve_http),  # responsiveness clients
            CLOSED_EMPTY: self._serve_nothing}

    def say(self, *lines: str) -> None:
        """Text output: with -J there is none, only documents."""
        if self.options.json:
            return
        with self._print_lock:
            for line in lines:
                self._out(line)

    def document(self, value: dict[str, Any]) -> None:
        """With -J, one JSON document for each test (nothing without)."""
        if self.options.json:
            with self._print_lock:
                self._out(json.dumps(value, indent=2))

    def serve_forever(self) -> None:
        """Accept until stop() or Ctrl-C; then end every connection and close."""
        tcp.set_wake_up(self.listener)
        self.refuser.start()
        self.udp_port.start()  # before the banner: a server that says it listens, does
        self.say(*_banner(self.options), self.http.banner())
        # Waiting in poll(), not in accept(): an MPTCP listener's accept ignores the wake-up
        # timer (SO_RCVTIMEO), and would never notice a stop (-1, Ctrl-C).
        ready = select.poll()
        ready.register(self.listener, select.POLLIN)
        lifetime = self.options.permit_key_timeout  # as iperf2's: a keyed server's life
        ends = None if lifetime is None else time.monotonic() + lifetime
        try:
            while not self._stopping.is_set():
                if ends is not None and time.monotonic() >= ends:
                    self._last_tests(f"the permit key's {lifetime:g} s are over "
                                     "(--permit-key-timeout)")
                    break
                if not ready.poll(tcp.WAKE_UP_SECONDS * 1000):
                    continue
                try:
                    conn, address = self.listener.accept()
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    if self._stopping.is_set():
                        break
                    time.sleep(0.05)  # e.g. out of file descriptors: back off, keep serving
                    continue
                self._start(conn, address)
        finally:
            self._shut_down()

    def stop(self) -> None:
        self._stopping.set()

    def _last_tests(self, why: str) -> None:
        """No new tests (`why`); the server ends once those under way have."""
        self.listener.close()
        self.say(f"No new tests: {why}; ending once the tests under way have")
        while not self._stopping.is_set():
            with self._active_lock:
                workers = list(self._active)
            if not workers:
                return
            workers[0].join(tcp.WAKE_UP_SECONDS)

    def _datagram(self, data: bytes, peer: tuple[Any, ...]) -> None:
        """A datagram at the port's listener, to the protocol that speaks it."""
        if data in (iperf3.UDP_CONNECT_MSG, iperf3.UDP_CONNECT_MSG[::-1]):
            self.iperf3.udp_hello(data, peer)
        elif data[:4] != native.MAGIC and (iperf2.could_be_datagram(data) or
                                           iperf2.bare_header(data, time.time())):
            self.iperf2.datagram(data, peer)
        else:
            self.native.datagram(data, peer)

    def _start(self, conn: socket.socket, address: tuple[Any, ...]) -> None:
        peer = tcp.endpoint(address)
        refusal = self.policy.admit_connection(_host(peer), self.http.drain)
        if refusal is not None:
            self.refuser.refuse(conn, peer, str(refusal))
            return
        if _closed_already(conn):  # --connect-only, a port check: no thread for it
            self.say(_no_test(peer))
            conn.close()
            self.policy.release_connection(_host(peer))
            return
        self._accepted += 1  # iperf3 numbers its streams in the order they connected
        worker = threading.Thread(target=self._serve_connection,
                                  args=(conn, address, self._accepted),
                                  name=f"serve {address[0]}:{address[1]}", daemon=True)
        with self._active_lock:
            self._active[worker] = conn
        worker.start()

    def _shut_down(self) -> None:
        self._stopping.set()
        self.listener.close()
        self.udp_port.close()
        with self._active_lock:
            connections = list(self._active.items())
        for _, conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for worker, _ in connections:
            worker.join(2)

    def _serve_connection(self, conn: socket.socket, address: tuple[Any, ...], index: int) -> None:
        accepted = time.monotonic()
        served = _Served(accepted, index)
        try:
            peer = tcp.endpoint(address)
            tcp.set_wake_up(conn)
            protocol, prefix = _identify(conn, accepted, self._stopping, self._idle_limit)
            self._protocols[protocol](conn, peer, prefix, served)
        except (OSError, ProtocolError):
            pass  # the peer vanished or spoke nonsense before a test began: nothing to report
        finally:
            if not served.keep_open:
                conn.close()
            if served.a_test and self.options.one_off:
                self.stop()  # -1: the accept loop notices at its next wake-up
            with self._active_lock:
                self._active.pop(threading.current_thread(), None)
            self.policy.release_connection(_host(tcp.endpoint(address)))

    def _serve_nothing(self, conn: socket.socket, peer: str, prefix: bytes,
                       served: _Served) -> None:
        self.say(_no_test(peer))  # --connect-only, a port scan: no test, one line

    def _serve_iperf2(self, conn: socket.socket, peer: str, prefix: bytes,
                      served: _Served) -> None:
        served.keep_open = self.iperf2.serve_tcp(conn, peer, prefix)
        served.a_test = not served.keep_open  # not one of a -P test's later connections

    def _serve_iperf3(self, conn: socket.socket, peer: str, prefix: bytes,
                      served: _Served) -> None:
        served.a_test = not self.iperf3.awaits_streams(prefix)  # not one of its streams
        served.keep_open = self.iperf3.serve(conn, peer, prefix, served.index)

    def _serve_http(self, conn: socket.socket, peer: str, prefix: bytes, _: _Served) -> None:
        # not a test for -1: a run is many connections
        self.http.serve(conn, peer, _host(peer), prefix)

    def _serve_classic(self, conn: socket.socket, peer: str, prefix: bytes,
                       served: _Served) -> None:
        refused = self.classic.admit()
        if refused is not None:
            self.refuser.note(peer, refused)  # closed: a classic client has no words for it
            return
        served.a_test = True
        self.classic.serve(conn, peer, prefix, served.accepted)

    def _serve_native(self, conn: socket.socket, peer: str, prefix: bytes,
                      served: _Served) -> None:
        """A native connection: a test's control connection, one of its data streams (kept
        open: it belongs to the test now), an echo or a load connection."""
        while len(prefix) < native.PREFACE_SIZE:
            chunk = conn.recv(native.PREFACE_SIZE - len(prefix))
            if not chunk:
                return
            prefix += chunk
        kind = native.parse_preface(prefix)
        rest = prefix[native.PREFACE_SIZE:]
        if kind == native.DATA:
            served.keep_open = self.native.serve_data(conn, prefix)
        elif kind == native.ECHO:
            self.native.echo.serve(conn, rest)
        elif kind == native.LOAD:  # a responsiveness run is one test (its end: -1 exits)
            served.a_test = self.native.load.serve(conn, rest, peer)
        else:
            self.say(table.server_connected(peer, tcp.endpoint(conn.getsockname())))
            self.native.serve_control(conn, peer, rest)
            served.a_test = True  # once served: one that broke off leaves -1 waiting


def _identify(conn: socket.socket, accepted: float, stopping: threading.Event,
              idle_limit: float) -> tuple[str, bytes]:
    """The protocol of a new connection and the bytes read to tell (which belong to
    whatever comes next: payload, a message, a preface)."""
    prefix = b""
    while True:
        protocol = detect(prefix)
        if protocol is not None:
            return protocol, prefix
        try:
            chunk = conn.recv(NEEDED - len(prefix))
        except BlockingIOError:  # the wake-up timer
            waited = time.monotonic() - accepted
            if stopping.is_set() or waited > idle_limit:
                return CLASSIC, prefix
            if prefix and waited > UNDECIDED_SECONDS:
                return CLASSIC, prefix
            continue
        if not chunk:
            return (CLASSIC if prefix else CLOSED_EMPTY), prefix
        prefix += chunk


def _banner(options: ServerOptions) -> list[str]:
    """What the server says when it listens: its port, and what clients must prove."""
    lines = [table.server_banner(options.port)]
    if options.permit_key is not None:  # iperf2's clients must state it
        lifetime = options.permit_key_timeout
        lines.append(f"iperf2 permit key: {options.permit_key}" + (
            f" (new tests for {lifetime:g} s: --permit-key-timeout)" if lifetime else ""))
    if options.unproven_rate:  # what a forged datagram may direct at anyone: said
        lines.append(f"UDP clients that cannot prove their address (iperf2's) may be sent "
                     f"up to {format_rate(options.unproven_rate)} for "
                     f"{options.unproven_seconds:g} s a test (--unproven-udp)")
    if options.secret is not None:
        lines.append("Clients must prove the shared secret; classic clients, which cannot, "
                     + ("are served anyway (--allow-classic)" if options.allow_classic
                        else "are refused (--allow-classic serves them)"))
    return lines


def _no_test(peer: str) -> str:
    """The line for a connection closed before its first byte (in the accept loop, or by
    its serving thread when its end of stream came later)."""
    return f"{peer} connected and closed without sending anything: no test"


def _closed_already(conn: socket.socket) -> bool:
    """Has the peer closed before sending a byte (its FIN already here)?"""
    try:
        return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except OSError:  # nothing yet (EAGAIN), or reset: the serving thread finds out
        return False


def _host(endpoint: str) -> str:
    """The address part of "host:port" (IPv4-mapped addresses already shown as IPv4)."""
    return endpoint.rsplit(":", 1)[0]

