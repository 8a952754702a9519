"""One HTTP/2 connection of the responsiveness client, non-blocking, turned by the probe
loop's selector: the TCP handshake, then TLS (the standard library's over memory buffers,
ALPN h2), then h2's client state machine. It keeps each handshake's time (the draft's
tcp_f and tls_f), reads and writes for its owner, and gives back the load's window as the
bytes arrive."""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

from ..description.client_options import ClientOptions
from ..transport import tcp
from .config import Url

READ_BYTES = 256 * 1024
STREAM_WINDOW = 4 * 1024 * 1024  # a download's window: the server is never held back by it
CONNECTION_WINDOW = 16 * 1024 * 1024
MAX_FRAME = 1024 * 1024  # the server may send frames this large (fewer turns of ours)


class ConnectionFailed(Exception):
    """The connection cannot go on: why, in words."""


def client_context(insecure: bool) -> ssl.SSLContext:
    """TLS 1.2 or later, ALPN h2; the certificate checked against the system's authorities
    unless --insecure."""
    context = ssl.create_default_context()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["h2"])
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


class H2Client:
    """A connection to `url`'s server at `address`: connecting once made, `ready` once
    HTTP/2 can carry requests (its owner then asks them)."""

    def __init__(self, url: Url, address: tuple, family: int, context: ssl.SSLContext | None,
                 options: ClientOptions, window: int | None = None,
                 congestion: str | None = None) -> None:
        self.url = url
        self.began = time.monotonic_ns()
        self.connected: int | None = None  # ns, the TCP handshake's end
        self.secured: int | None = None  # ns, the TLS handshake's end
        self.ready = False
        self.out = bytearray()  # bytes for the socket
        self.wire_sent = 0  # bytes written to the socket
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            tcp.prepare(self.sock, window, congestion, tos=options.test.tos, local=options.local)
            self.sock.setblocking(False)
            self.sock.connect_ex(address)
        except BaseException:
            self.sock.close()
            raise
        self.tls: ssl.SSLObject | None = None
        if context is not None:
            self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            self.tls = context.wrap_bio(self.incoming, self.outgoing,
                                        server_hostname=url.host)
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding="utf-8"))

    @property
    def connecting(self) -> bool:
        return self.connected is None

    def request(self, method: str, path: str, end_stream: bool = True,
                length: int | None = None) -> int:
        """A request on a new stream (the connection is ready): its stream's number."""
        sid = self.h2.get_next_available_stream_id()
        headers = [(":method", method), (":scheme", self.url.scheme),
                   (":authority", self.url.authority), (":path", path),
                   ("user-agent", "simpleperf"), ("accept-encoding", "identity")]
        if length is not None:
            headers.append(("content-length", str(length)))
        self.h2.send_headers(sid, headers, end_stream=end_stream)
        self._pump()
        return sid

    def writable(self) -> None:
        """The socket takes bytes: the handshake's end, or what is waiting."""
        if self.connected is None:
            error = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if error:
                raise ConnectionFailed(f"connecting to {self.url.authority} failed: "
                                       f"{os.strerror(error)}")
            self.connected = time.monotonic_ns()
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls is None:
                self._start_http2()
            else:
                self._handshake()
        self.flush()

    def flush(self) -> None:
        if self.out:
            try:
                sent = self.sock.send(self.out)
            except BlockingIOError:
                return
            except OSError as error:
                raise ConnectionFailed(f"sending failed: {error.strerror or error}") from None
            self.wire_sent += sent
            del self.out[:sent]

    def readable(self) -> list[h2.events.Event]:
        """What the server's bytes say (h2's events); ConnectionFailed at its end."""
        try:
            data = self.sock.recv(READ_BYTES)
        except BlockingIOError:
            return []
        except OSError as error:
            raise ConnectionFailed(f"receiving failed: {error.strerror or error}") from None
        if not data:
            raise ConnectionFailed("the server closed the connection")
        if self.tls is None:
            return self._receive(data)
        self.incoming.write(data)
        if self.secured is None:
            self._handshake()
            if self.secured is None:
                return []
        plain = bytearray()
        while True:
            try:
                chunk = self.tls.read(READ_BYTES)
            except ssl.SSLWantReadError:
                break
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                raise ConnectionFailed("the server closed the connection") from None
            except ssl.SSLError as error:
                raise ConnectionFailed(f"TLS failed: {error.reason or error}") from None
            if not chunk:
                break
            plain += chunk
        self._flush_tls()  # what reading made TLS say (a key update's answer)
        return self._receive(bytes(plain)) if plain else []

    def _receive(self, data: bytes) -> list[h2.events.Event]:
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError as error:
            raise ConnectionFailed(f"the server broke HTTP/2's rules: {error}") from None
        for event in events:
            if isinstance(event, h2.events.DataReceived):
                with contextlib.suppress(h2.exceptions.StreamClosedError):
                    self.h2.acknowledge_received_data(event.flow_controlled_length,
                                                      event.stream_id)
            elif isinstance(event, h2.events.ConnectionTerminated):
                raise ConnectionFailed(f"the server ended the connection (HTTP/2 error "
                                       f"{event.error_code!s})")
        self._pump()
        return events

    def _handshake(self) -> None:
        assert self.tls is not None
        try:
            self.tls.do_handshake()
        except ssl.SSLWantReadError:
            self._flush_tls()
            return
        except ssl.SSLCertVerificationError as error:
            raise ConnectionFailed(f"the server's certificate is not trusted "
                                   f"({error.verify_message}): --insecure accepts it "
                                   "unchecked") from None
        except ssl.SSLError as error:
            raise ConnectionFailed(f"TLS failed: {error.reason or error}") from None
        self.secured = time.monotonic_ns()
        self._flush_tls()
        if self.tls.selected_alpn_protocol() != "h2":
            raise ConnectionFailed(f"{self.url.authority} does not speak HTTP/2 over TLS "
                                   f"(ALPN gave {self.tls.selected_alpn_protocol()})")
        self._start_http2()

    def _start_http2(self) -> None:
        self.h2.initiate_connection()
        self.h2.update_settings({
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
            h2.settings.SettingCodes.MAX_FRAME_SIZE: MAX_FRAME,
            h2.settings.SettingCodes.ENABLE_PUSH: 0})
        self.h2.max_inbound_frame_size = MAX_FRAME  # from the start (see http2.py)
        self.h2.increment_flow_control_window(CONNECTION_WINDOW)
        self.ready = True
        self._pump()

    def _pump(self) -> None:
        data = self.h2.data_to_send()
        if not data:
            return
        if self.tls is None:
            self.out += data
        else:
            self.tls.write(data)
            self._flush_tls()

    def _flush_tls(self) -> None:
        assert self.tls is not None
        pending = self.outgoing.read()
        if pending:
            self.out += pending

    def send_body(self, sid: int, budget: int, zeros: memoryview) -> int:
        """Up to `budget` bytes of an upload's body, as far as its windows allow: how many."""
        sent = 0
        frame = min(self.h2.max_outbound_frame_size, len(zeros))
        while sent < budget:
            try:
                window = self.h2.local_flow_control_window(sid)
            except h2.exceptions.StreamClosedError:
                break
            size = min(window, frame, budget - sent)
            if size <= 0:
                break
            self.h2.send_data(sid, zeros[:size].tobytes())
            sent += size
        self._pump()
        return sent

    def window(self, sid: int) -> int:
        try:
            return self.h2.local_flow_control_window(sid)
        except h2.exceptions.StreamClosedError:
            return 0

    def close(self) -> None:
        self.sock.close()
