"""iperf2 clients at our server, on the port every other client uses: a TCP connection that
opens with iperf2's header (protocol/detect.py says so), or a UDP datagram carrying it at
the port's listener. TCP is measured as any other test; a UDP test ends at the client's
last datagram (a negative number), answered with iperf2's server report until the client
goes quiet, so the client prints loss and jitter as against its own server.

`-P N` arrives as N connections stating N threads, as iperf2 runs it: they are one test,
gathered by the client's address and header for up to GATHER_SECONDS."""

from __future__ import annotations

import contextlib
import dataclasses
import hmac
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..description.options import ServerOptions, test_deadline
from ..description.testspec import TestSpec
from ..description.transports import TCP, UDP
from ..engine import tcp_stream
from ..engine.measurement import Measurement
from ..engine.records import Stream
from ..engine.streams import run_stream
from ..engine.unproven import Unproven
from ..errors import ProtocolError, SimpleperfError
from ..policy import ServerPolicy, buffer_bytes
from ..protocol import iperf2
from ..report import native as table
from ..report import server_json
from ..transport import tcp, udp
from ..transport.udp_port import UdpPort
from . import bounceback, bursts, datagrams

GATHER_SECONDS = 2.0  # the connections of one -P test arrive within this of the first
STEP_SECONDS = 1.0  # the server's intervals, for -J
HEADER_SECONDS = 5.0  # a TCP client's header must be whole by then
EARLY_DATAGRAMS = 1024  # kept of those the listener reads before a test's socket is there
ENDED_SECONDS = 5.0  # a UDP client heard of this recently after its test starts nothing
UNPROVEN_REVERSE = ("UDP -R, and iperf2's client cannot prove its address (one forged "
                    "datagram would make this server send to anyone): this server sends "
                    "to such clients only with --unproven-udp RATE/SECONDS")


@dataclass
class _Gathering:
    """The connections of one -P test, until all have arrived."""

    header: iperf2.ClientHeader
    conns: list[tuple[socket.socket, bytes]] = field(default_factory=list)
    complete: threading.Event = field(default_factory=threading.Event)


class Iperf2Service:
    def __init__(self, options: ServerOptions, policy: ServerPolicy, say: Callable[..., None],
                 stopping: threading.Event, port: UdpPort) -> None:
        self.options = options
        self.policy = policy
        self.say = say
        self.document: Callable[[dict[str, Any]], None] = lambda _: None  # -J, by the server
        self.stopping = stopping
        self.port = port
        self._gatherings: dict[tuple[str, bytes], _Gathering] = {}
        self._udp = _UdpTests(self)
        self._lock = threading.Lock()

    # TCP ------------------------------------------------------------------------------------

    def serve_tcp(self, conn: socket.socket, peer: str, prefix: bytes) -> bool:
        """A connection that opened with an iperf2 header; True when it joined a -P test
        another connection serves (it is kept open), False once served (or refused)."""
        if iperf2.is_bounceback(prefix):
            self._serve_bounceback(conn, peer, prefix)
            return False
        if iperf2.is_bare_stream(prefix):  # no header: its bytes, until it closes
            self._run_tcp(peer, iperf2.ClientHeader(bare=True), [(conn, prefix)])
            return False
        try:
            raw, rest = _read_header(conn, prefix, self.stopping)
            header = iperf2.parse_header(raw)
            rest = _check_permit_key(conn, raw, rest, self.options.permit_key, self.stopping)
        except ProtocolError as error:
            self.say(f"Refused iperf2 client {peer}: {error}")
            self.document(server_json.error_document(peer, str(error)))
            return False
        if iperf2.wants_ack(header):  # our version, as 2.1.8's listener sends its own
            read_at = time.time()
            with contextlib.suppress(OSError):
                conn.sendall(iperf2.encode_ack(header, read_at, time.time()))
        host = peer.rsplit(":", 1)[0]
        if header.threads > 1:
            key = (host, raw)
            with self._lock:
                gathering = self._gatherings.get(key)
                if gathering is not None and not gathering.complete.is_set():
                    gathering.conns.append((conn, rest))
                    if len(gathering.conns) == header.threads:
                        gathering.complete.set()
                    return True
                gathering = self._gatherings[key] = _Gathering(header)
                gathering.conns.append((conn, rest))
            gathering.complete.wait(GATHER_SECONDS)
            with self._lock:
                gathering.complete.set()  # latecomers start a test of their own
                self._gatherings.pop(key, None)
                conns = list(gathering.conns)
        else:
            conns = [(conn, rest)]
        try:
            self._run_tcp(peer, header, conns)
        finally:
            for other, _ in conns[1:]:
                other.close()
        return False

    def _run_tcp(self, peer: str, header: iperf2.ClientHeader,
                 conns: list[tuple[socket.socket, bytes]]) -> None:
        spec = iperf2.spec_from_header(header, TCP, self.options.length)
        spec = dataclasses.replace(spec, parallel=len(conns))
        iperf2_bytes = 0 if header.bare else (iperf2.tcp_header_length(header.flags) or
                                              iperf2.CLIENT_V1.size)
        refusal = self._refusal(spec)
        if refusal is not None:
            self.say(f"Refused iperf2 client {peer}: {refusal}")
            self.document(server_json.error_document(peer, refusal))
            return
        memory = buffer_bytes(spec.stream_count(), spec.length)
        try:
            streams = []
            for number, (sock, rest) in enumerate(conns, start=1):
                stream = Stream(number, header.reverse, "tcp", sock,
                                tcp.endpoint(sock.getpeername()), low_water=True)
                # the header counts, as at iperf2's client
                stream.num_bytes = 0 if header.reverse else iperf2_bytes + len(rest)
                tcp.set_wake_up(sock)
                streams.append(stream)
            if header.full_duplex:  # ours on the same connections, at once
                streams += [Stream(len(conns) + s.number, True, "tcp", s.sock, s.label)
                            for s in list(streams)]
            if header.connects_back == "dual":  # -d: our streams to the client, at once
                streams += _connect_back(peer, header, spec.parallel)
            timed = bursts.timed({s.number: rest for s, (_, rest) in zip(
                streams[:len(conns)], conns, strict=True)}, iperf2.reverse_head(header)
                ) if spec.trip_times else None
            self._measure(peer, header, spec, streams, _all_done, timed)
            if header.connects_back == "tradeoff":  # -r: ours once the client's ended
                back = dataclasses.replace(spec, direction="reverse")
                self._measure(peer, header, back,
                              _connect_back(peer, header, spec.parallel), _all_done)
        except (OSError, SimpleperfError) as error:
            reason = (error.strerror or str(error)).lower() if isinstance(error, OSError) \
                else str(error)
            self.say(f"iperf2 test from {peer} ended: {reason}")
            self.document(server_json.error_document(peer, reason))
        finally:
            self.policy.release(memory)

    def _serve_bounceback(self, conn: socket.socket, peer: str, prefix: bytes) -> None:
        """--bounceback: every message back, stamped (bounceback.Echo), until the client
        ends; one row of what it sent."""
        tcp.set_wake_up(conn)
        try:
            first, read_at = bounceback.first_message(conn, prefix, self.stopping,
                                                      self.options.idle_limit)
            echo = bounceback.Echo(first, read_at, self.options.idle_limit)
        except (ProtocolError, OSError) as error:
            reason = str(error) if isinstance(error, ProtocolError) else \
                (error.strerror or str(error)).lower()
            self.say(f"Refused iperf2 client {peer}: {reason}")
            self.document(server_json.error_document(peer, reason))
            return
        spec = TestSpec(protocol="tcp", duration=None, length=echo.bounce.size, nodelay=True)
        refusal = self._refusal(spec)
        if refusal is not None:
            self.say(f"Refused iperf2 client {peer}: {refusal}")
            self.document(server_json.error_document(peer, refusal))
            return
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            stream = Stream(1, False, "tcp", conn, peer)
            self._measure(peer, iperf2.ClientHeader(), spec, [stream],
                          lambda m: stream.done.is_set(), echo.run)
        finally:
            self.policy.release(buffer_bytes(1, spec.length))

    # UDP ------------------------------------------------------------------------------------

    def datagram(self, data: bytes, peer: tuple[Any, ...]) -> None:
        """A datagram at the port's listener that carries iperf2's header."""
        self._udp.datagram(data, peer)

    # Both -----------------------------------------------------------------------------------

    def _refusal(self, spec: TestSpec) -> str | None:
        """Why this test is not run (and if it is, its slot and memory are taken)."""
        if self.options.rsa_auth is not None or self.options.secret is not None:
            return "this server requires authentication, which iperf2's protocol cannot carry"
        refusal = self.policy.admit(spec.transport, spec.parallel, spec.duration, 0.0,
                                    spec.rate * spec.parallel, None,
                                    buffer_bytes(spec.stream_count(), spec.length))
        return None if refusal is None else str(refusal)

    def _measure(self, peer: str, header: iperf2.ClientHeader, spec: TestSpec,
                 streams: list[Stream], ended: Callable[[Measurement], bool],
                 body: Callable[..., None] | None = None,
                 answer: Callable[[], None] | None = None) -> None:
        """Run the test until `ended`, `answer` the client (UDP's report), say the result.
        `body`: the stream threads' (the engine's by default)."""
        started_wall = time.time()
        every = self.options.interval  # -i: rows as each interval closes
        measurement = Measurement(spec, streams, every or STEP_SECONDS, table.interval_printer(
            every, streams, spec.transport, self.options.unit, self.say))
        if not spec.transport.datagrams and not header.reverse:
            tcp_stream.apply_options(streams[0].sock, spec)
        measurement.begin(time.monotonic(), *([body] if body is not None else []))
        limit = test_deadline(spec.duration, 0.0, self.policy.time_limit) + 1.0
        watch = self.policy.test_watch(spec.duration)  # its place is held while it moves
        try:
            while not ended(measurement):
                now = time.monotonic()
                measurement.tick(now)
                if now - measurement.start > limit or self.stopping.is_set():
                    raise SimpleperfError(f"the test ran past {limit:g} s"
                                          if not self.stopping.is_set() else "server stopped")
                if watch is not None and (broken := watch.breach(now,
                                                                 measurement.total_bytes())):
                    raise SimpleperfError(str(broken))
                time.sleep(0.02)
            measurement.stop.set()
            results = measurement.finish(time.monotonic())
            if answer is not None:
                answer()
            version = header.peer_version
            name = f"iperf2 {version}" if version else "iperf2"
            title = (f"Test from {peer} ({name}): {spec.protocol.upper()}, {spec.direction}, "
                     f"{spec.parallel} stream{'s' if spec.parallel > 1 else ''}")
            self.say(*table.test_report(title, spec.transport, streams, results,
                                        self.options.unit))
            self.document(server_json.test_document(spec, peer, measurement, {},
                                                    started_wall, name))
        except SimpleperfError as error:
            self.say(f"iperf2 test from {peer} ended: {error}")
            self.document(server_json.error_document(peer, str(error)))
        finally:
            measurement.close()  # a reverse test ends when we close: the client's EOF


class _UdpTests:
    """iperf2's UDP tests at the port's listener: a datagram with its header starts one, a
    socket connected to that client takes the rest (the service runs and reports it)."""

    def __init__(self, service: Iperf2Service) -> None:
        self.service = service
        self.peers = _UdpPeers()

    def datagram(self, data: bytes, peer: tuple[Any, ...]) -> None:
        """A datagram at the port's listener that carries iperf2's header."""
        if not self.peers.arrived(peer, data):
            return
        label = tcp.endpoint(peer)
        try:
            header = iperf2.bare_header(data, time.time()) if \
                not iperf2.could_be_datagram(data) else None
            if header is None:
                header = iperf2.parse_header(data, iperf2.DATAGRAM.size)
            sock = self.service.port.socket_for(peer, data, b"")
        except (ProtocolError, OSError) as error:
            self.peers.forget(peer)
            self.service.say(f"Refused iperf2 client {label}: {error}")
            return
        self.service.port.settled([sock])
        self.peers.add(peer, self.service.port.backlog_of(peer))
        threading.Thread(target=self._serve_udp, args=(sock, peer, label, header),
                         name=f"iperf2 udp {label}", daemon=True).start()

    def _serve_udp(self, sock: socket.socket, peer: tuple[Any, ...], label: str,
                   header: iperf2.ClientHeader) -> None:
        first = self.peers.take(peer)
        spec = iperf2.spec_from_header(header, UDP, len(first[0][0]))
        options = self.service.options
        # nothing proves where the datagrams came from: what we send it is bounded
        unproven = Unproven(options.unproven_rate, options.unproven_seconds, time.monotonic())
        first_bytes = sum(len(data) for data, _ in first)
        if header.reverse:  # -R: on the operator's allowance alone, or refused
            spec = unproven.capped(spec)
        refusal = UNPROVEN_REVERSE if header.reverse and not unproven.allowance else \
            self.service._refusal(spec)
        try:
            if refusal is not None:
                self.service.say(f"Refused iperf2 client {label}: {refusal}")
                self.service.document(server_json.error_document(label, refusal))
                return
            tcp.set_wake_up(sock)
            if header.reverse:  # -R: we send, as iperf2's client would, and end as it does
                self._send(sock, label, header, spec,
                           lambda: unproven.allowed(first_bytes, time.monotonic()))
                return
            stream = Stream(1, False, "udp", sock, label)
            udp.enable_receive_offload(sock)
            receiver = datagrams.UdpReceiver(first, bool(header.flags & iperf2.SEQNO64B),
                                             self.service.options.idle_limit,
                                             header.isochronous)

            if header.full_duplex:  # ours on the same socket, at once; no reports
                back: Stream | None = Stream(2, True, "udp", sock, label, header=iperf2.LAYOUT)
            else:
                back = _udp_back(peer, header) if header.connects_back else None
            if back is not None:  # at most the factor times what the client sent us
                back.allowance = lambda: unproven.allowed(max(first_bytes, stream.num_bytes),
                                                          time.monotonic())
            dual = back is not None and spec.direction == "bidir"
            ended = threading.Event()  # our last datagram sent (--full-duplex's end)

            def report() -> None:  # before the sockets close; -d: both ends at once
                asking = threading.Thread(target=self._ask_report, args=(back, label),
                                          daemon=True) if dual and back and \
                    not header.full_duplex else None
                if asking is not None:
                    asking.start()
                if receiver.last is not None and not header.no_udp_fin:
                    datagrams.send_report(sock, stream, receiver.last)
                if asking is not None:
                    asking.join()

            def body(one: Stream, *args: Any) -> None:  # -d: ours sent as the engine sends
                if not one.sending:
                    receiver.run(one, *args)
                    return
                try:
                    run_stream(one, *args)
                finally:
                    if header.full_duplex:  # the last, once: 2.1.8's --full-duplex end
                        with contextlib.suppress(OSError):
                            datagrams.send_last(one, spec.length)
                        ended.set()

            forward = dataclasses.replace(spec, direction="forward") if back else spec
            self.service._measure(
                label, header, spec if dual else forward,
                [stream, back] if dual and back else [stream],
                lambda m: _all_done(m) and (ended.is_set() or not header.full_duplex),
                body, report)
            if back is not None and not dual:  # -r: ours once the client's test ended
                self.service._measure(label, header, dataclasses.replace(
                    spec, direction="reverse"), [back], _all_done,
                    answer=lambda: self._ask_report(back, label))
        except OSError as error:
            reason = (error.strerror or str(error)).lower()
            self.service.say(f"iperf2 test from {label} ended: {reason}")
        finally:
            sock.close()
            self.peers.forget(peer)
            if refusal is None:
                self.service.policy.release(buffer_bytes(spec.stream_count(), spec.length))


    def _ask_report(self, stream: Stream, label: str) -> None:
        """Our sending stream's last datagram, until the client's report of it comes."""
        try:
            datagrams.ask_report(stream, "client")
        except datagrams.ReceiverGone:
            pass  # it has our last datagram and has left, as iperf2's client does
        except SimpleperfError as error:
            self.service.say(f"iperf2 test from {label}: {error}")

    def _send(self, sock: socket.socket, label: str, header: iperf2.ClientHeader,
              spec: TestSpec, allowance: Callable[[], int]) -> None:
        """-u -R: datagrams in iperf2's layout at the client's -b for its -t; then the last,
        until the client's report comes (what it received: not our row, which is ours)."""
        stream = Stream(1, True, "udp", sock, label, header=iperf2.LAYOUT, allowance=allowance)
        self.service._measure(label, header, spec, [stream], lambda m: stream.done.is_set(),
                              answer=lambda: self._ask_report(stream, label))


def _connect_back(peer: str, header: iperf2.ClientHeader, count: int
                  ) -> list[Stream]:
    """-r and -d: our streams to the client's own port (its header's), as iperf2's
    server opens them (their payload iperf2's pattern, no header)."""
    host = peer.rsplit(":", 1)[0].strip("[]")
    streams: list[Stream] = []
    try:
        for number in range(count + 1, 2 * count + 1):
            sock = tcp.connect(host, header.port, window=header.window or None)
            tcp.set_wake_up(sock)
            streams.append(Stream(number, True, "tcp", sock,
                                  tcp.endpoint(sock.getpeername())))
    except SimpleperfError:
        for stream in streams:
            stream.sock.close()
        raise SimpleperfError(f"cannot connect back to port {header.port} of {host}, "
                              "where an iperf2 client with -r or -d listens") from None
    return streams


def _udp_back(peer: tuple[Any, ...], header: iperf2.ClientHeader) -> Stream:
    """UDP -r and -d: our stream to the client's own port (its header's), datagrams in
    iperf2's layout (its pattern, no header), as iperf2's server sends them."""
    sock = socket.socket(socket.AF_INET6 if ":" in peer[0] else socket.AF_INET,
                         socket.SOCK_DGRAM)
    try:
        sock.connect((peer[0], header.port))
        tcp.set_wake_up(sock)
    except OSError:
        sock.close()
        raise
    return Stream(2, True, "udp", sock, tcp.endpoint(sock.getpeername()),
                  header=iperf2.LAYOUT)


def _all_done(measurement: Measurement) -> bool:
    return all(stream.done.is_set() for stream in measurement.streams)


class _UdpPeers:
    """The clients with a UDP test under way, and those whose test ended a moment ago: what
    they still send (their last datagrams again, the rest of a refused test) starts nothing
    for as long as they keep sending."""

    def __init__(self) -> None:
        self._early: dict[tuple[Any, ...], list[tuple[bytes, float]]] = {}
        self._ended: dict[tuple[Any, ...], float] = {}  # peer: when it was last heard of
        self._lock = threading.Lock()

    def arrived(self, peer: tuple[Any, ...], data: bytes) -> bool:
        """A datagram of `peer` at the listener: whether it starts a test."""
        arrival = time.time()
        with self._lock:
            early = self._early.get(peer)
            if early is not None:  # before its socket was connected: the test's
                if len(early) < EARLY_DATAGRAMS:
                    early.append((data, arrival))
                return False
            if arrival - self._ended.get(peer, -ENDED_SECONDS) < ENDED_SECONDS:
                self._ended[peer] = arrival
                return False
            if iperf2.sequence(data, 0, False)[0] < 0:
                return False  # a test's last datagram, its test gone: nothing to start
            self._early[peer] = [(data, arrival)]
            return True

    def add(self, peer: tuple[Any, ...], datagrams: list[bytes]) -> None:
        arrival = time.time()
        with self._lock:
            self._early.setdefault(peer, []).extend((data, arrival) for data in datagrams)

    def take(self, peer: tuple[Any, ...]) -> list[tuple[bytes, float]]:
        """The datagrams of `peer` the listener read before its socket was connected."""
        with self._lock:
            early = self._early.get(peer, [])
            taken = list(early)
            early.clear()
            return taken

    def forget(self, peer: tuple[Any, ...]) -> None:
        """Its test is over (or refused)."""
        with self._lock:
            self._early.pop(peer, None)
            now = time.time()
            self._ended = {p: t for p, t in self._ended.items() if now - t < ENDED_SECONDS}
            self._ended[peer] = now


def _check_permit_key(conn: socket.socket, raw: bytes, rest: bytes, expected: str | None,
                      stopping: threading.Event) -> bytes:
    """--permit-key, as 2.1.8's listener checks it: the key after the header must be the
    server's (`expected`), and a client without one is refused by a server that has one.
    What came after the header, the key included: iperf2's client counts it in its
    bytes."""
    length = iperf2.permit_key_length(raw)
    if length is None:
        if expected is not None:
            raise ProtocolError("no permit key (this server has --permit-key)")
        return rest
    data = _read_exactly(conn, rest, length, stopping, "permit key", time.monotonic())
    if expected is None:
        raise ProtocolError("a permit key, and this server has no --permit-key")
    if not hmac.compare_digest(data[:length], expected.encode()):
        raise ProtocolError("the wrong permit key")
    return data


def _read_exactly(conn: socket.socket, data: bytes, needed: int, stopping: threading.Event,
                  what: str, began: float) -> bytes:
    """At least `needed` bytes (`data` holds the first of them), within HEADER_SECONDS of
    `began`; `what` they are, for the line that says they did not come."""
    while len(data) < needed:
        try:
            chunk = conn.recv(needed - len(data))
        except BlockingIOError:  # the wake-up timer
            if stopping.is_set() or time.monotonic() - began > HEADER_SECONDS:
                raise ProtocolError(f"the iperf2 {what} did not arrive whole") from None
            continue
        if not chunk:
            raise ProtocolError(f"the iperf2 client closed inside its {what}")
        data += chunk
    return data


def _read_header(conn: socket.socket, prefix: bytes, stopping: threading.Event
                 ) -> tuple[bytes, bytes]:
    """The whole header (its length from its flags) and what came after it."""
    began = time.monotonic()
    data = _read_exactly(conn, prefix, 4, stopping, "header", began)
    needed = max(iperf2.tcp_header_length(int.from_bytes(data[:4], "big")),
                 iperf2.CLIENT_V1.size)
    data = _read_exactly(conn, data, needed, stopping, "header", began)
    return data[:needed], data[needed:]
