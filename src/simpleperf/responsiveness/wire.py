"""A connection's bytes in and out, over TLS or not (the standard library's TLS over
memory buffers: the port has already read the first bytes, the ClientHello's among them),
with the connection's deadline and the server's stop checked at every wait."""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import threading
import time

from ..engine.responsiveness import LoadUnsentLimit
from ..engine.tcp_stream import follow_unsent
from ..transport.socket_options import set_unsent_limit
from . import endpoints

READ_BYTES = 256 * 1024
WAKE_SECONDS = 0.5  # a wait's longest, between checks of the deadline and the stop
LINGER_SECONDS = 2.0  # a closing connection's wait for the peer's end (nginx's lingering)
CONNECTION_MEMORY = 2 * READ_BYTES + 2 * endpoints.CHUNK_BYTES  # what one holds, at most
# ... of which an idle connection (probes, the configuration) holds one read's buffer and
# its TLS and HTTP/2 states: charged at once; the rest once it carries a load (a client
# such as mach keeps hundreds of probe connections open)
IDLE_MEMORY = READ_BYTES
LOAD_MEMORY = CONNECTION_MEMORY - IDLE_MEMORY
ZEROS = memoryview(bytes(endpoints.CHUNK_BYTES))


class Closed(Exception):
    """The connection ended (the peer closed it, its time is up, the server stops)."""


class Wire:
    """A connection's bytes, in and out, over TLS or not: the bytes the port read first
    come before the socket's. What it keeps unsent follows its own rate, as the draft asks
    of a load-generating connection's ends (TCP_NOTSENT_LOWAT at about 5 ms of what the
    client acknowledges, the load's writes as long): an answer to a self probe waits behind
    that much of the load, not behind the socket's whole buffer, else the client would
    measure the server's queue and not the network's."""

    def __init__(self, conn: socket.socket, prefix: bytes, deadline: float,
                 stopping: threading.Event, tls: ssl.SSLContext | None) -> None:
        self.conn, self.deadline, self.stopping = conn, deadline, stopping
        self.left = prefix
        self.tls: ssl.SSLObject | None = None
        self.sent = self.received = 0  # bytes of HTTP, both ways
        # Since when the connection waits for a request with nothing under way (None: it
        # is busy); the server may ask such a connection to close (drained: its place for
        # a new one, as nginx closes idle keep-alive connections when it runs short)
        self.idle_since: float | None = None
        self.drained = threading.Event()
        self._closes_itself = False  # drained: its protocol closes it (else the next wait)
        self.unsent = LoadUnsentLimit()
        set_unsent_limit(conn, self.unsent.limit)
        if tls is not None:
            self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            self.tls = tls.wrap_bio(self.incoming, self.outgoing, server_side=True)
            self.incoming.write(self.left)
            self.left = b""
            self._handshake()

    @property
    def alpn(self) -> str | None:
        return self.tls.selected_alpn_protocol() if self.tls is not None else None

    def _handshake(self) -> None:
        assert self.tls is not None
        while True:
            try:
                self.tls.do_handshake()
                self._flush_tls()
                return
            except ssl.SSLWantReadError:
                self._flush_tls()
                self._feed()

    def _feed(self) -> None:
        """More of the socket's bytes into TLS (Closed at its end)."""
        data = self._socket_recv()
        if not data:
            self.incoming.write_eof()
            raise Closed
        self.incoming.write(data)

    def _socket_recv(self) -> bytes:
        while True:
            self._check()
            try:
                return self.conn.recv(READ_BYTES)
            except BlockingIOError:  # the wake-up timer
                continue
            except OSError:
                raise Closed from None

    def _check(self) -> None:
        if self.stopping.is_set() or time.monotonic() > self.deadline or (
                self.drained.is_set() and self.idle_since is not None and
                not self._closes_itself):
            raise Closed

    def linger(self, seconds: float) -> None:
        """Close as nginx's lingering close does: our side shut, then what the peer still
        sends (an upload's frames in flight when it said GOAWAY) read and let go until it
        closes, `seconds` at most. A socket closed with unread bytes resets the connection,
        which the client counts as an error; over TLS our close_notify goes first (a TLS
        stream that ends without one is cut short, to rustls an error too)."""
        if self.tls is not None:
            with contextlib.suppress(ssl.SSLError, ValueError):
                self.tls.unwrap()  # close_notify into the outgoing buffer
            with contextlib.suppress(OSError):
                self.conn.sendall(self.outgoing.read())
        with contextlib.suppress(OSError):
            self.conn.shutdown(socket.SHUT_WR)
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0 and not self.stopping.is_set():
            if not select.select([self.conn], [], [], min(left, WAKE_SECONDS))[0]:
                continue
            try:
                if not self.conn.recv(READ_BYTES):
                    return
            except BlockingIOError:
                continue
            except OSError:
                return

    def idle(self, idle: bool, closes_itself: bool = False) -> None:
        """Whether the connection now waits for a request with nothing under way; with
        `closes_itself` its protocol, drained, closes it in its own words (HTTP/2's
        GOAWAY), else the wait it is in ends (Closed)."""
        self._closes_itself = closes_itself
        if not idle:
            self.idle_since = None
        elif self.idle_since is None:
            self.idle_since = time.monotonic()

    def recv(self) -> bytes:
        """The next bytes the peer sent (b"" at its end)."""
        if self.left:
            data, self.left = self.left, b""
            self.received += len(data)
            return data
        if self.tls is None:
            data = self._socket_recv()
            self.received += len(data)
            return data
        while True:
            try:
                data = self.tls.read(READ_BYTES)
                self.received += len(data)
                return data
            except ssl.SSLWantReadError:
                self._flush_tls()
                try:
                    self._feed()
                except Closed:
                    return b""
            except (ssl.SSLEOFError, ssl.SSLZeroReturnError):
                return b""

    def readable(self, seconds: float) -> bool:
        """Whether recv() has something (or the end) without waiting longer than this."""
        return self.ready(seconds)[0]

    def ready(self, seconds: float, write: bool = False) -> tuple[bool, bool]:
        """Whether recv() has something (or the end), and with `write` whether the socket
        takes a load's record: poll honours TCP_NOTSENT_LOWAT, a blocking send does not
        (the kernel adds to its last unsent segment, up to 64 kB, whatever the limit: at a
        1.25 Mbit/s share that is 400 ms a self probe's answer waits behind). Waits at most
        `seconds` for either. Bytes of TLS already read count only once they make a whole
        record: part of one would have recv() wait on the socket for the rest."""
        if self._buffered():
            writable = write and bool(select.select([], [self.conn], [], 0)[1])
            return True, writable
        self._check()
        found = select.select([self.conn], [self.conn] if write else [], [], seconds)
        return bool(found[0]), bool(found[1])

    def _buffered(self) -> bool:
        """Whether bytes already read wait for recv() (decrypting what TLS holds)."""
        if self.left:
            return True
        if self.tls is not None and (self.tls.pending() or self.incoming.pending):
            try:
                self.left = self.tls.read(READ_BYTES)
            except ssl.SSLWantReadError:
                self._flush_tls()
            except (ssl.SSLEOFError, ssl.SSLZeroReturnError):
                return True  # the end: recv() says so
        return bool(self.left)

    def wait_writable(self) -> None:
        """Until the socket takes a load's record (see ready)."""
        while not select.select([], [self.conn], [], WAKE_SECONDS)[1]:
            self._check()

    @property
    def record(self) -> int:
        """How much of a load to write at once: the unsent limit (about 5 ms of the
        connection's rate), at most the large object's buffer: at gigabits a turn of the
        loop moves 256 kB, not a native bulk record's 64 kB."""
        now = time.monotonic()
        if self.unsent.due(now):
            follow_unsent(self.conn, self.unsent, now)
        return min(self.unsent.limit, endpoints.CHUNK_BYTES)

    def send(self, data: bytes | memoryview) -> None:
        if not data:
            return
        self.sent += len(data)
        if self.tls is None:
            self._socket_send(data)
            return
        self.tls.write(data)
        self._flush_tls()

    def _flush_tls(self) -> None:
        pending = self.outgoing.read()
        if pending:
            self._socket_send(pending)

    def _socket_send(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            self._check()
            try:
                view = view[self.conn.send(view):]
            except BlockingIOError:  # the wake-up timer: the peer reads slowly
                continue
            except OSError:
                raise Closed from None


