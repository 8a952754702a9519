"""The server side of native tests: the control exchange with its limits and
authentication, data connections and UDP streams joining their test by token, the echo
service for RTT probes, and each test's report."""

from __future__ import annotations

import contextlib
import hmac
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import __version__
from ..description.options import ServerOptions
from ..description.testspec import TestSpec
from ..engine import tcp_stream
from ..engine.measurement import Measurement
from ..engine.records import Stream
from ..engine.unproven import same_host
from ..errors import PeerGone, PeerRefused, ProtocolError, SimpleperfError
from ..policy import ServerPolicy, buffer_bytes
from ..protocol.events import Accepted, Auth, Authenticated, Error, Hello, Start, Test, Welcome
from ..protocol.exchange import Role
from ..protocol.native import (
    AUTH_DATAGRAM_HEADER,
    DATA_PREFACE_SIZE,
    MAGIC,
    PREFACE_SIZE,
    TOKEN_SIZE,
    UDP_ACK,
    UDP_ECHO,
    UDP_HELLO,
    VERSION,
    auth_proof,
    data_preface,
    parse_data_preface,
    udp_data_key,
)
from ..report import native as table
from ..report import server_json
from ..transport import tcp, udp
from ..transport.udp_port import UdpPort
from .control import ControlChannel
from .echo import EchoService
from .load import LoadService
from .session import NativeSession

HANDSHAKE_SECONDS = 10.0  # greeting to test description, however slowly it trickles
STREAMS_SECONDS = 10.0  # accepted to every stream connected
BYE_SECONDS = 2.0
CHALLENGE_BYTES = 16


@dataclass
class PendingTest:
    spec: TestSpec
    peer_host: str
    udp_key: bytes | None = None  # with a shared secret: in every UDP data datagram
    streams: dict[int, Stream] = field(default_factory=dict)
    complete: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def attach(self, stream: Stream) -> bool:
        with self.lock:
            if stream.number in self.streams or self.complete.is_set():
                return False
            self.streams[stream.number] = stream
            if len(self.streams) == self.spec.stream_count():
                self.complete.set()
            return True


class NativeService:
    def __init__(self, options: ServerOptions, port: UdpPort, say: Callable[..., None],
                 stopping: threading.Event, policy: ServerPolicy) -> None:
        self.options = options
        self.say = say
        self.stopping = stopping
        self.policy = policy
        self.echo = EchoService(options.secret, stopping, say, options.idle_limit)
        self.load = LoadService(policy, options.secret, stopping, say)
        self.port = port  # the UDP side of the server's port
        self.document: Callable[[dict[str, Any]], None] = lambda _: None  # -J, by the server
        self._tests: dict[bytes, PendingTest] = {}
        self._lock = threading.Lock()

    # UDP -----------------------------------------------------------------------------------

    def datagram(self, data: bytes, peer: tuple[Any, ...]) -> None:
        """A native datagram that reached the port's listener: an echo probe, answered from
        it, or a stream's hello."""
        if len(data) < PREFACE_SIZE or data[:4] != MAGIC or data[5] != VERSION:
            return  # not ours: ignore rather than answer strangers
        kind = data[4:5]
        if kind == UDP_ECHO and self.echo.allowed(data[PREFACE_SIZE:]) and \
                self.echo.replies.take(tcp.endpoint(peer), time.monotonic()):
            self.port.reply(data, peer)
        elif kind == UDP_HELLO and len(data) == DATA_PREFACE_SIZE:
            self._udp_hello(data, peer)

    def _udp_hello(self, data: bytes, peer: tuple[Any, ...]) -> None:
        try:
            token, number = parse_data_preface(data)
        except ProtocolError:
            return
        pending = self._tests.get(token)
        if pending is None or not pending.spec.transport.datagrams or \
                not 1 <= number <= pending.spec.stream_count():
            return
        if not same_host(tcp.endpoint(peer), pending.peer_host):
            return  # its test's control connection proved another address: forged
        existing = pending.streams.get(number)
        ack = data_preface(token, number, UDP_ACK)
        if existing is not None:  # a hello from another port of the same client: answer
            existing.sock.send(ack)
            return
        sock = self.port.socket_for(peer, data, ack)
        sending = not pending.spec.client_sends(number)
        if not sending:
            udp.enable_receive_offload(sock)
        if pending.spec.window:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, pending.spec.window)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, pending.spec.window)
        tcp.set_wake_up(sock)
        stream = Stream(number, sending, "udp", sock, tcp.endpoint(peer), key=pending.udp_key,
                        native=True)
        if pending.attach(stream):
            sock.send(ack)
        else:
            self.port.settled([sock])
            sock.close()

    # TCP connections by kind ---------------------------------------------------------------

    def serve_data(self, conn: socket.socket, initial: bytes) -> bool:
        """Attach a data connection to its test; False if it belongs to none (the caller
        closes it). `initial`: the bytes of its preface read so far."""
        preface = initial + _receive_exactly(conn, DATA_PREFACE_SIZE - len(initial),
                                             HANDSHAKE_SECONDS)
        token, number = parse_data_preface(preface[:DATA_PREFACE_SIZE])
        pending = self._tests.get(token)
        if pending is None or pending.spec.transport.datagrams or \
                not 1 <= number <= pending.spec.stream_count():
            return False
        stream = Stream(number, not pending.spec.client_sends(number), "tcp", conn,
                        tcp.endpoint(conn.getpeername()))
        return pending.attach(stream)

    def serve_control(self, conn: socket.socket, peer: str, initial: bytes) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        channel = ControlChannel(conn, Role.SERVER)
        token = None
        try:
            channel.feed(initial)
            spec, udp_key = self._handshake(channel)
            try:
                token = os.urandom(TOKEN_SIZE)
                pending = PendingTest(spec, peer, udp_key)
                with self._lock:
                    self._tests[token] = pending
                channel.send(Accepted(token))
                self._run(channel, pending, peer)
            finally:
                self.policy.release(_memory(spec))
        except _Refusal as refusal:
            _tell(channel, str(refusal))
            self._failed(peer, f"Refused {peer}: {refusal}", f"refused: {refusal}")
        except (ProtocolError, PeerRefused) as error:
            if not isinstance(error, PeerGone):
                _tell(channel, f"protocol error: {error}")
            self._failed(peer, f"Test from {peer} ended: {error}", str(error))
        except SimpleperfError as error:
            if not isinstance(error, _Told):
                _tell(channel, str(error))
            self._failed(peer, f"Test from {peer} failed: {error}", str(error))
        finally:
            if token is not None:
                with self._lock:
                    ended = self._tests.pop(token, None)
                if ended is not None:
                    for stream in ended.streams.values():
                        stream.sock.close()

    def _handshake(self, channel: ControlChannel) -> tuple[TestSpec, bytes | None]:
        """The test a client describes, allowed by the policy, and its UDP key."""
        deadline = time.monotonic() + HANDSHAKE_SECONDS

        def remaining() -> float:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Refusal(f"the test was not described within {HANDSHAKE_SECONDS:g} s")
            return left

        channel.expect(remaining(), Hello)
        secret = self.options.secret
        if self.options.rsa_auth is not None and secret is None:
            raise _Refusal("this server requires iperf3's RSA authentication (an iperf3 "
                           "client's --username); simpleperf clients prove a shared secret, "
                           "which it has none of")
        challenge = os.urandom(CHALLENGE_BYTES).hex() if secret else None
        channel.send(Welcome(VERSION, f"simpleperf {__version__}", challenge))
        if secret is not None and challenge is not None:
            auth = channel.expect(remaining(), Auth)
            expected = auth_proof(secret, challenge, "client")
            if not hmac.compare_digest(auth.proof, expected):
                raise _Refusal("authentication failed: wrong shared secret")
            channel.send(Authenticated())
        spec = channel.expect(remaining(), Test).spec
        udp_key = udp_data_key(secret, challenge) if secret and challenge else None
        if udp_key is not None and spec.transport.datagrams and \
                spec.length < AUTH_DATAGRAM_HEADER.size:
            raise _Refusal(f"with a shared secret, UDP datagrams need at least "
                           f"{AUTH_DATAGRAM_HEADER.size} bytes")
        refusal = self.policy.admit(spec.transport, spec.parallel, spec.duration, spec.omit,
                                    spec.rate * spec.stream_count(), spec.affinity,
                                    _memory(spec))
        if refusal is not None:
            raise _Refusal(str(refusal))
        return spec, udp_key

    def _run(self, channel: ControlChannel, pending: PendingTest, peer: str) -> None:
        _await_streams(channel, pending)
        streams = _ready(pending)
        self.port.settled([stream.sock for stream in streams])
        tcp_stream.attach_server_file(self.options.file, pending.spec.transport, streams)
        try:
            rows = table.interval_printer(self.options.interval, streams,
                                          pending.spec.transport, self.options.unit, self.say)
            measurement = Measurement(pending.spec, streams, pending.spec.sample, rows,
                                      cpu=pending.spec.affinity)
            session = NativeSession(measurement, channel, self.policy.time_limit,
                                    self.policy.test_watch(pending.spec.duration))
            channel.send(Start())
            started_wall = time.time()
            session.begin(time.monotonic())
            try:
                session.run()
                _await_bye(channel)
            except SimpleperfError as error:  # a limit, a failed stream: the client hears
                _tell(channel, str(error))  # why before its streams close under it
                raise _Told(str(error)) from None
            finally:
                measurement.close()
        finally:
            tcp_stream.close_files(streams)
        self.say(*_text_report(pending.spec, peer, measurement, self.options.unit))
        self.document(server_json.test_document(pending.spec, peer, measurement,
                                                session.peer_view, started_wall, "native",
                                                session.peer_cpu))

    def _failed(self, peer: str, line: str, reason: str) -> None:
        """A test that did not run to its end: a line of text, or (-J) a document."""
        self.say(line)
        self.document(server_json.error_document(peer, reason))


def _memory(spec: TestSpec) -> int:
    return buffer_bytes(spec.stream_count(), spec.length)


def _ready(pending: PendingTest) -> list[Stream]:
    """A test's streams in order, TCP ones with the test's socket options."""
    streams = [pending.streams[n] for n in sorted(pending.streams)]
    for stream in streams:
        if not stream.transport.datagrams:
            tcp_stream.apply_options(stream.sock, pending.spec)
            tcp.set_wake_up(stream.sock)
    return streams


def _text_report(spec: TestSpec, peer: str, measurement: Measurement, unit: str) -> list[str]:
    title = (f"Test from {peer}: {spec.protocol.upper()}, {spec.direction}, "
             f"{spec.parallel} stream{'s' if spec.parallel > 1 else ''}")
    return table.test_report(title, spec.transport, measurement.streams,
                             measurement.local_results(), unit)


class _Refusal(Exception):
    """A test this server will not run; the message goes to the client and the log."""


def _await_streams(channel: ControlChannel, pending: PendingTest) -> None:
    """Until every stream has connected; a client that gives up meanwhile ends it."""
    deadline = time.monotonic() + STREAMS_SECONDS
    while not pending.complete.is_set():
        if time.monotonic() > deadline:
            raise _Refusal(f"only {len(pending.streams)} of "
                           f"{pending.spec.stream_count()} streams connected within "
                           f"{STREAMS_SECONDS:g} s")
        channel.receive(0.05)  # the exchange allows the client nothing until start


class _Told(SimpleperfError):
    """A test's failure the client has been told of already."""


def _tell(channel: ControlChannel, message: str) -> None:
    """Our last word to a client we are done with; it may already be gone."""
    with contextlib.suppress(OSError, ProtocolError):
        channel.send(Error(message))


def _await_bye(channel: ControlChannel) -> None:
    with contextlib.suppress(ProtocolError, OSError):
        channel.receive(BYE_SECONDS)


def _receive_exactly(conn: socket.socket, size: int, timeout: float) -> bytes:
    data = b""
    deadline = time.monotonic() + timeout
    while len(data) < size:
        if time.monotonic() > deadline:
            raise ProtocolError("the stream preface did not arrive in time")
        try:
            chunk = conn.recv(size - len(data))
        except BlockingIOError:
            continue
        if not chunk:
            raise ProtocolError("the connection closed during its preface")
        data += chunk
    return data
