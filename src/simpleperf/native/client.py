"""The client side of a native test: greet, agree on the test, open the streams, run the
session, then print both ends' view. A server that does not answer the greeting is a classic
server: the test continues with the classic exchange where it can."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import select
import socket
import time
from collections.abc import Callable
from typing import Any

from ..description.client_options import ClientOptions
from ..description.options import DECISION_SECONDS, DEFAULT_NATIVE_INTERVAL
from ..engine import tcp_stream
from ..engine.latency import EchoProber
from ..engine.measurement import Measurement
from ..engine.records import Stream
from ..errors import Interrupted, PeerEnded, PeerGone, PeerRefused, ProtocolError, SimpleperfError
from ..protocol import iperf3
from ..protocol.events import Accepted, Auth, Authenticated, Bye, Error, Hello, Start, Test, Welcome
from ..protocol.exchange import Role
from ..protocol.native import (
    CONTROL,
    UDP_ACK,
    UDP_HELLO,
    VERSION,
    auth_proof,
    data_preface,
    preface,
    udp_data_key,
)
from ..report.client import TestOutput
from ..stats import summarise_rtt
from ..transport import tcp, tcpinfo, udp
from .control import ControlChannel
from .session import NativeSession

CLASSIC_WAIT_MIN = 1.5  # seconds without an answer to our greeting: a classic server
IDLE_PROBES = 5
AUTH_SECONDS = 10.0


RSA_NEEDS_IPERF3 = ("--username is iperf3's RSA authentication, for iperf3 servers; this "
                    "server is not one (a simpleperf server proves a shared secret: "
                    "--auth-secret-file)")


class ClassicServer(Exception):
    """The server did not answer the greeting as a native server does."""


class Iperf3Server(Exception):
    """The server answered the greeting as an iperf3 server does."""


def run(options: ClientOptions, out: Callable[[str], None]) -> None:
    control: socket.socket | None = tcp.connect_to_server(options)
    assert control is not None
    try:
        control.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        channel = ControlChannel(control, Role.CLIENT)
        # Exactly as long as an iperf3 cookie: an iperf3 server takes the greeting for one
        # and asks for the test's parameters, so the connection goes on as iperf3's
        # control connection and a one-off server (iperf3 -s -1) is not spent on asking.
        greeting = channel.greet(Hello(VERSION), preface(CONTROL), iperf3.COOKIE_SIZE)
        sent = len(greeting)
        try:
            welcome = _await_welcome(channel)
        except Iperf3Server:
            handed, control = control, None
            from ..iperf3 import client as iperf3_client

            iperf3_client.run(dataclasses.replace(options, latency=False), out,
                              busy_retries=3, control=(handed, greeting))
            return
        except ClassicServer:
            if options.rsa_username is not None:
                raise SimpleperfError(RSA_NEEDS_IPERF3) from None
            _fall_back_to_classic(options, control, sent, out)
            control = None  # the classic client owns and closes it
            return
        if options.rsa_username is not None:
            raise SimpleperfError(RSA_NEEDS_IPERF3)
        udp_key = _authenticate(channel, welcome, options)
        _NativeTest(options, channel, out, udp_key).run()
    except PeerEnded as ended:
        raise SimpleperfError(f"the server ended the test: {ended}") from None
    except PeerRefused as refusal:
        raise SimpleperfError(f"the server refused the test: {refusal}") from None
    except PeerGone as gone:
        raise SimpleperfError(f"the server ended the test: {gone}") from None
    except ProtocolError as error:
        raise SimpleperfError(f"protocol error: {error}") from None
    finally:
        if control is not None:
            control.close()


def _await_welcome(channel: ControlChannel) -> Welcome:
    rtt = tcpinfo.rtt_seconds(channel.sock)
    wait = max(CLASSIC_WAIT_MIN, 10 * rtt)
    # An iperf3 server answers any first 37 bytes with a one-byte state (PARAM_EXCHANGE,
    # or ACCESS_DENIED / SERVER_ERROR); a native welcome starts with a length's zero byte.
    readable, _, _ = select.select([channel.sock], [], [], wait)
    if readable:
        with contextlib.suppress(OSError):
            first = channel.sock.recv(1, socket.MSG_PEEK)
            if first and first[0] in iperf3.FIRST_ANSWERS:
                raise Iperf3Server()
    try:
        event = channel.receive(wait)
    except ProtocolError:  # PeerGone included: a classic server closes or says nothing
        raise ClassicServer() from None
    if isinstance(event, Error):
        raise PeerRefused(event.message)
    if not isinstance(event, Welcome):
        raise ClassicServer()
    return event


def _authenticate(channel: ControlChannel, welcome: Welcome,
                  options: ClientOptions) -> bytes | None:
    """Prove the secret when the server asks; the test's UDP key, then."""
    if welcome.challenge is None:
        return None
    if options.secret is None:
        raise SimpleperfError("the server requires authentication: give the shared secret "
                              "with --auth-secret-file FILE or $SIMPLEPERF_SECRET")
    channel.send(Auth(auth_proof(options.secret, welcome.challenge, "client")))
    channel.expect(AUTH_SECONDS, Authenticated)
    return udp_data_key(options.secret, welcome.challenge)


def _fall_back_to_classic(options: ClientOptions, control: socket.socket | None, sent: int,
                          out: Callable[[str], None]) -> None:
    assert control is not None
    unsupported = options.beyond_classic()
    if unsupported:
        control.close()
        raise SimpleperfError(
            f"the server at {options.host} port {options.port} speaks only classic "
            f"simpleperf, which cannot do {', '.join(unsupported)}: run a simpleperf server")
    if options.test.num_bytes is not None and options.test.num_bytes < sent:
        control.close()
        control = None
    from ..classic import client as classic_client

    try:
        classic_client.run(options, out, None if control is None else (control, sent))
    finally:
        if control is not None:
            control.close()


class _NativeTest:
    def __init__(self, options: ClientOptions, channel: ControlChannel,
                 out: Callable[[str], None], udp_key: bytes | None) -> None:
        self.options = options
        self.udp_key = udp_key
        self.channel = channel
        self.out = out
        self.spec = options.test
        self.streams: list[Stream] = []
        self.prober: EchoProber | None = None

    # The run -----------------------------------------------------------------------------

    def run(self) -> None:
        options = self.options
        idle = None
        if options.latency:
            self.prober = EchoProber(options.host, options.port, family=options.family,
                                     secret=options.secret, flowlabel=options.flowlabel)
            for _ in range(IDLE_PROBES):
                self.prober.probe()
                time.sleep(0.01)
            idle = summarise_rtt(self.prober.samples_ms)
        self.channel.send(Test(self.spec))
        asked = time.monotonic()
        accepted = self.channel.expect(DECISION_SECONDS, Accepted)
        queued = time.monotonic() - asked  # a busy server's --queue, and a round trip
        try:
            self._open_streams(accepted.token)
            tcp_stream.attach_file(self.streams, options.file)
            self.channel.expect(DECISION_SECONDS, Start)
            output = TestOutput(options, self.spec, self.streams, self.out,
                                "simpleperf-native/1", accepted.token.hex())
            output.queued = queued
            measurement = Measurement(self.spec, self.streams,
                                      options.rows_every or DEFAULT_NATIVE_INTERVAL,
                                      output.interval)
            session = NativeSession(measurement, self.channel)
            output.start()
            if self.prober is not None:
                self.prober.start_background(options.rtt_interval)
            session.begin(time.monotonic())
            congestion = options.test.congestion or tcp.system_congestion()
            try:
                session.run()
            except KeyboardInterrupt:
                measurement.close()
                output.end(measurement, session.peer_view, idle, None, congestion,
                           interrupted=True, peer_intervals=session.peer_intervals)
                raise Interrupted() from None
            loaded_samples = self.prober.stop_background() if self.prober else []
            with contextlib.suppress(OSError):
                self.channel.send(Bye())
            measurement.close()
            output.end(measurement, session.peer_view, idle, summarise_rtt(loaded_samples),
                       congestion, peer_intervals=session.peer_intervals,
                       remote_cpu=session.peer_cpu, peer_congestion=session.peer_congestion)
            errors = measurement.errors()
            if errors:
                raise SimpleperfError(errors[0])
        finally:
            if self.prober is not None:
                self.prober.close()
            tcp_stream.close_files(self.streams)
            for stream in self.streams:
                stream.sock.close()

    def _open_streams(self, token: bytes) -> None:
        for number in range(1, self.spec.stream_count() + 1):
            sending = self.spec.client_sends(number)
            datagrams = self.spec.transport.datagrams
            sock = self._open_udp(token, number, sending) if datagrams else \
                self._open_tcp(token, number)
            self.streams.append(Stream(number, sending, self.spec.protocol, sock,
                                       tcp.endpoint(sock.getsockname()),
                                       key=self.udp_key if datagrams else None, native=True))

    def _open_tcp(self, token: bytes, number: int) -> socket.socket:
        options = self.options
        sock = tcp.connect_to_server(options, stream=number)
        try:
            sock.sendall(data_preface(token, number))
            tcp_stream.apply_options(sock, self.spec)
            tcp.set_wake_up(sock)
        except BaseException:
            sock.close()
            raise
        return sock

    def _open_udp(self, token: bytes, number: int, sending: bool) -> socket.socket:
        sock = udp.greet_server(self.options, number, data_preface(token, number, UDP_HELLO),
                                (data_preface(token, number, UDP_ACK),), not sending,
                                self.channel.sock)
        tcp.set_wake_up(sock)
        return sock


def measure(options: ClientOptions) -> dict[str, Any]:
    """Run one native test quietly and return its JSON document (start, intervals, end)."""
    lines: list[str] = []
    run(dataclasses.replace(options, json=True, json_stream=False), lines.append)
    return json.loads("\n".join(lines))
