"""Testing against an iperf2 server (--iperf2): each stream opens with iperf2's client
header, as iperf 2.1.8 writes it, and is measured by our own stream threads and
Measurement, printed with simpleperf's tables and JSON.

iperf2 has no control connection: a TCP test ends when the sender closes its side (the
server closes in turn once it has counted everything), a UDP test with a datagram whose
number is negative, which the server answers with its report (bytes, loss, jitter),
sent again every RETRY_SECONDS until it does, for at most REPORT_SECONDS."""

from __future__ import annotations

import contextlib
import dataclasses
import random
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from ..description.client_options import ClientOptions
from ..description.options import DEFAULT_NATIVE_INTERVAL
from ..description.testspec import TestSpec, beyond_iperf2
from ..engine import tcp_stream
from ..engine.measurement import Measurement
from ..engine.records import Stream
from ..engine.streams import run_stream
from ..errors import Interrupted, ProtocolError, SimpleperfError
from ..protocol import iperf2
from ..report.client import TestOutput
from ..stats import UdpReceiveAccount
from ..transport import socket_options, tcp, udp
from . import bursts, datagrams

CLOSE_SECONDS = 5.0  # a TCP server's close after ours, at most this long awaited
CONNECT_BACK_SECONDS = 5.0  # -d, -r: the server's connections back, awaited this long
ASK_TIMES = 100  # UDP -R: our header sent at most this often until the server sends
IDLE_SECONDS = 10.0  # UDP -R: a server silent this long has gone


def refusal(options: ClientOptions) -> str | None:
    """What this test asks that an iperf2 server cannot do (or that we do not yet ask of
    one), as the line to print; None when it can run."""
    where = f"the server at {options.host} port {options.port} is an iperf2 server"
    beyond = beyond_iperf2(options.test)
    if beyond is not None:
        needs, lacks = beyond
        return f"{where}, which {lacks}: {needs}"
    if options.compatibility and (options.test.direction != "forward" or options.dualtest or
                                  options.tradeoff or options.test.trip_times or
                                  options.test.frame_rate > 0 or options.peer_detect
                                  or options.permit_key is not None or options.no_udp_fin):
        return (f"{where}: -R, --bidir/--full-duplex, -d, -r, --trip-times, --isochronous, -X,"
                " --permit-key and --no-udp-fin are told in iperf2's header, which "
                "--compatibility leaves out")
    return None


def run(options: ClientOptions, out: Callable[[str], None]) -> None:
    why = refusal(options)
    if why is not None:
        raise SimpleperfError(why)
    _Iperf2Test(options, out).run()


class _Iperf2Test:
    def __init__(self, options: ClientOptions, out: Callable[[str], None]) -> None:
        self.options = options
        self.out = out
        self.spec = options.test
        if options.compatibility:  # iperf2's digits after each datagram's number and time
            self.spec = dataclasses.replace(self.spec, repeating_payload=True)
        self.back = "dual" if options.dualtest else "tradeoff" if options.tradeoff else None
        # -d, -r: where the server connects back, a port of ours it learns from the header
        self.listener = _listen_back(options) if self.back else None
        port = self.listener.getsockname()[1] if self.listener else options.port
        wall = time.time()
        self.header = iperf2.header_from_spec(
            self.spec, port, (int(wall), int((wall - int(wall)) * 1e6)),
            "length" in options.given or options.test.transport.datagrams, self.back,
            options.peer_detect, options.no_udp_fin)
        self.server_version = ""  # -X: what the server said it is
        self.streams: list[Stream] = []
        self.receivers: dict[int, datagrams.UdpReceiver] = {}  # UDP -R: by stream number
        self.body: Callable[..., None] | None = None  # the stream threads' (else engine's)
        self.ended: set[int] = set()  # UDP: our sending streams whose thread has ended

    def run(self) -> None:
        try:
            self._open_streams()
            if self.back == "dual":
                self.streams += self._accept_back()
                self._measure(dataclasses.replace(self.spec, direction="bidir"))
                return
            self._measure(self.spec)
            if self.back == "tradeoff":
                forward, self.streams = self.streams, self._accept_back()
                for stream in forward:
                    stream.sock.close()
                self._measure(dataclasses.replace(self.spec, direction="reverse"))
        finally:
            for stream in self.streams:
                stream.sock.close()
            if self.listener is not None:
                self.listener.close()

    def _accept_back(self) -> list[Stream]:
        """The server's connections back (-d at once, -r after our test), one per stream,
        numbered after ours; each sends iperf2's pattern, no header, until it closes."""
        assert self.listener is not None
        streams: list[Stream] = []
        deadline = time.monotonic() + CONNECT_BACK_SECONDS
        first = len(self.streams) + 1 if self.back == "dual" else 1
        if self.spec.transport.datagrams:  # its datagrams to our port: one stream
            return [self._udp_back(first)]
        while len(streams) < self.spec.parallel:
            readable, _, _ = select.select([self.listener], [], [],
                                           max(deadline - time.monotonic(), 0))
            if not readable:
                raise SimpleperfError(
                    f"the iperf2 server did not connect back to port "
                    f"{self.listener.getsockname()[1]} within {CONNECT_BACK_SECONDS:g} s "
                    "(a firewall between us, or a server that does not serve -d/-r?)")
            sock, _ = self.listener.accept()
            tcp.set_wake_up(sock)
            # labelled by the server's end: ours is the listener's, the same for all
            streams.append(Stream(first + len(streams), False, "tcp", sock,
                                  tcp.endpoint(sock.getpeername()), low_water=True))
        return streams

    def _udp_back(self, number: int) -> Stream:
        """UDP -d, -r: the server's datagrams to our port, from a port of its own (where
        our report for its last goes: the stream's thread connects to it once the first
        is there); read as our server reads iperf2's clients."""
        assert self.listener is not None
        sock, self.listener = self.listener, None
        tcp.set_wake_up(sock)
        udp.enable_receive_offload(sock)
        self.receivers[number] = datagrams.UdpReceiver([], True, IDLE_SECONDS)
        ours = self.streams[0].label.rsplit(":", 1)[0]  # the address our test goes from
        return Stream(number, False, "udp", sock, f"{ours}:{sock.getsockname()[1]}")

    def _open_streams(self) -> None:
        options, spec = self.options, self.spec
        udp_test = spec.transport.datagrams
        first = b"" if options.compatibility else iperf2.encode_header(self.header, udp_test)
        if options.permit_key is not None:  # TCP only (the flag says so)
            first = iperf2.with_permit_key(first, options.permit_key)
        for number in range(1, spec.parallel + 1):
            sending = spec.direction != "reverse"
            if udp_test:
                sock = _open_udp(options)
                stream = Stream(number, sending, "udp", sock, tcp.endpoint(sock.getsockname()),
                                header=iperf2.LAYOUT, payload=first)
                if not sending:  # -R: the header until the server sends, as iperf2's does
                    self.receivers[number] = datagrams.UdpReceiver([], True, IDLE_SECONDS)
                    _ask_to_send(sock, first, spec.length)
            else:
                sock = tcp.connect_to_server(options, stream=number)
                stream = Stream(number, sending, "tcp", sock,
                                tcp.endpoint(sock.getsockname()), low_water=True)
                sock.sendall(first)
                if options.peer_detect:
                    self.server_version = _read_ack(sock, spec.trip_times)
                stream.num_bytes = len(first) if sending else 0
                tcp_stream.apply_options(sock, spec)
            tcp.set_wake_up(sock)
            self.streams.append(stream)
        if not udp_test and spec.trip_times:  # our writes as iperf2's timed bursts, its
            # reads (-R) as such
            self.body = bursts.timed({}, iperf2.encode_header(self.header, udp=False),
                                     head_sent=True)
        if spec.direction == "bidir":  # --full-duplex: the server's too, on the same
            for ours in list(self.streams):  # connections (sockets)
                back = Stream(spec.parallel + ours.number, False, spec.protocol, ours.sock,
                              ours.label)
                if udp_test:  # read as our server reads iperf2's clients
                    self.receivers[back.number] = datagrams.UdpReceiver([], True, IDLE_SECONDS)
                self.streams.append(back)

    def _measure(self, spec: TestSpec) -> None:
        options = self.options
        if self.server_version and not (options.json or options.json_stream):
            self.out(f"The server is iperf {self.server_version} (its acknowledgement)")
        name = f"iperf2 {self.server_version}" if self.server_version else "iperf2"
        output = TestOutput(options, spec, self.streams, self.out, name)
        measurement = Measurement(spec, self.streams,
                                  options.rows_every or DEFAULT_NATIVE_INTERVAL,
                                  output.interval)
        output.start()
        if spec.transport.datagrams and (self.receivers or spec.isochronous or
                                         self.header.no_udp_fin):
            self.body = self._body
        measurement.begin(time.monotonic(), *([self.body] if self.body else []))
        congestion = options.test.congestion or tcp.system_congestion()
        try:
            ours = spec.transport.datagrams and self.body is not None  # _body sends
            while not all(s.done.is_set() and (s.number in self.ended or not s.sending
                                               or not ours) for s in self.streams):
                measurement.tick(time.monotonic())
                time.sleep(0.02)
            remote = self._end(measurement)
            measurement.finish(time.monotonic())
        except KeyboardInterrupt:
            measurement.close()
            output.end(measurement, {}, None, None, congestion, interrupted=True)
            raise Interrupted() from None
        measurement.close()
        output.end(measurement, remote, None, None, congestion)
        errors = measurement.errors()
        if errors:
            raise SimpleperfError(errors[0])

    def _body(self, stream: Stream, spec: TestSpec, start: float,
              stop: threading.Event) -> None:
        """A UDP stream's thread: what iperf2's server sends (-R, -d, -r, --full-duplex),
        until its last datagram; ours as the engine sends it, or as iperf2 sends frames."""
        receiver = self.receivers.get(stream.number)
        if receiver is None:
            try:
                run_stream(stream, spec, start, stop,  # --isochronous: iperf2's frames
                           datagrams.send_frames if spec.isochronous else None)
                if self.header.no_udp_fin:  # the last once, no report (--full-duplex's too)
                    with contextlib.suppress(OSError):
                        datagrams.send_last(stream, spec.length)
            finally:
                self.ended.add(stream.number)
            return
        if self.back is not None:  # -d, -r: from the server's port, once it sends
            try:
                _await_sender(stream.sock, stop)
            except SimpleperfError as error:
                stream.error = str(error)
                stream.done.set()
                return
        receiver.run(stream, spec, start, stop)

    def _end(self, measurement: Measurement) -> dict[int, dict[str, Any]]:
        """The test's end as iperf2 has it: the server's view, by stream number (UDP)."""
        if not self.spec.transport.datagrams:
            closed = _await_close([s.sock for s in self.streams if s.sending])
            return _told_by_close(self.streams, closed)
        return _udp_end(self.streams, self.receivers, not self.header.no_udp_fin)


def _udp_end(streams: list[Stream], receivers: dict[int, datagrams.UdpReceiver],
             exchange: bool) -> dict[int, dict[str, Any]]:
    """A UDP test's end: the server's sending streams (-R, -d, -r, --full-duplex) answered
    with iperf2's report for their last datagram, as its own client answers them, and ours
    ended with ours until its report comes; the server's view, by stream number. Without
    the final `exchange` (--no-udp-fin, --full-duplex) neither: our last was sent once."""
    remote = {}
    for stream in streams:  # the server's first: its sender waits for our report
        receiver = receivers.get(stream.number)
        if receiver is None or receiver.last is None or stream.account is None:
            continue
        if exchange:
            datagrams.send_report(stream.sock, stream, receiver.last)
        remote[stream.number] = _sender_view(stream, stream.account)
    for stream in streams if exchange else []:
        if stream.number not in receivers:
            report = datagrams.ask_report(stream)
            remote[stream.number] = {
                "stream": stream.number, "bytes": report.num_bytes,
                "seconds": report.seconds, "packets": report.datagrams, "lost": report.lost,
                "out_of_order": report.out_of_order, "jitter_ms": report.jitter * 1000}
    return remote


def _sender_view(stream: Stream, account: UdpReceiveAccount) -> dict[str, Any]:
    """An iperf2 server's sending stream as we know it: the datagrams its numbers say it
    sent, of the size those that arrived had."""
    sent = account.highest
    arrived = max(sent - account.lost, 1)
    return {"stream": stream.number, "packets": sent,
            "bytes": round(stream.num_bytes * sent / arrived),
            "seconds": (stream.last or 0.0) - (stream.first or 0.0)}


def _await_sender(sock: socket.socket, stop: threading.Event) -> None:
    """UDP -d, -r: our socket connected to where the server's first datagram came from,
    once it is there (at most CONNECT_BACK_SECONDS)."""
    deadline = time.monotonic() + CONNECT_BACK_SECONDS
    while not stop.is_set() and time.monotonic() < deadline:
        readable, _, _ = select.select([sock], [], [], 0.1)
        if readable:
            try:
                _, sender = sock.recvfrom(1, socket.MSG_PEEK)
            except BlockingIOError:
                continue
            sock.connect(sender)
            return
    raise SimpleperfError(f"the iperf2 server sent nothing to port {sock.getsockname()[1]} "
                          f"within {CONNECT_BACK_SECONDS:g} s (a firewall between us, or a "
                          "server that does not serve -d/-r?)")


def _read_ack(sock: socket.socket, trip_times: bool) -> str:
    """-X: the server's acknowledgement of our header, its version ("2.1.8")."""
    size = iperf2.ACK.size + (iperf2.ACK_TIMES.size if trip_times else 0)
    data = b""
    deadline = time.monotonic() + CLOSE_SECONDS
    while len(data) < size and time.monotonic() < deadline:
        readable, _, _ = select.select([sock], [], [], max(deadline - time.monotonic(), 0))
        if not readable:
            break
        try:
            chunk = sock.recv(size - len(data))
        except BlockingIOError:
            continue
        if not chunk:
            break
        data += chunk
    try:
        return iperf2.parse_ack(data)
    except ProtocolError:
        raise SimpleperfError(f"the iperf2 server did not acknowledge our header with its "
                              f"version within {CLOSE_SECONDS:g} s (-X)") from None


def _ask_to_send(sock: socket.socket, first: bytes, length: int) -> None:
    """UDP -R: our header (in a datagram of -l bytes) again, every 10 to 20 ms, until the
    server's first datagram is there (at most ASK_TIMES), as iperf2's client asks."""
    datagram = bytearray(max(length, iperf2.DATAGRAM.size + len(first)))
    datagram[iperf2.DATAGRAM.size:iperf2.DATAGRAM.size + len(first)] = first
    for _ in range(ASK_TIMES):
        datagram[:iperf2.DATAGRAM.size] = iperf2.datagram_header(1, time.time())
        try:
            sock.send(datagram)
            readable, _, _ = select.select([sock], [], [], 0.01 + random.random() * 0.01)
            if readable and sock.recv(1, socket.MSG_PEEK):  # data, or the ICMP error
                return
        except BlockingIOError:
            continue
        except ConnectionRefusedError:
            raise SimpleperfError("nothing listens on that UDP port (ICMP port "
                                  "unreachable): is an iperf2 server there (iperf -s -u)?"
                                  ) from None
    raise SimpleperfError("the iperf2 server sent nothing for our -R test (is it a UDP "
                          "server: iperf -s -u?)")


def _listen_back(options: ClientOptions) -> socket.socket:
    """-d, -r: a listener for the server's connections back (--listenport, else any port),
    on the address our test connections come from; over UDP the socket its datagrams
    come to."""
    family = socket.AF_INET6 if options.family == socket.AF_INET6 or (
        options.local and ":" in options.local) else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM if options.test.transport.datagrams
                         else socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((options.local or "", options.listen_port or 0))
        if not options.test.transport.datagrams:
            sock.listen(options.test.parallel)
    except OSError as error:
        sock.close()
        raise SimpleperfError(f"cannot listen on port {options.listen_port or 0} for the "
                              f"iperf2 server's connections back: "
                              f"{(error.strerror or str(error)).lower()}") from None
    return sock


def _open_udp(options: ClientOptions) -> socket.socket:
    try:
        infos = socket.getaddrinfo(options.host, options.port, options.family,
                                   socket.SOCK_DGRAM)
    except socket.gaierror:
        raise SimpleperfError(f"cannot resolve server name '{options.host}'") from None
    family, _, _, _, remote = infos[0]
    local = (options.local or "", 0) if options.local else None
    try:
        sock = udp.open_connected(family, local, remote, device=options.bind_dev,
                                  flowlabel=options.flowlabel)
    except OSError as error:
        raise SimpleperfError(f"cannot open a UDP socket to {options.host} port "
                              f"{options.port}: {(error.strerror or str(error)).lower()}"
                              ) from None
    if options.test.tos:
        tcp.set_tos(sock, options.test.tos)
    socket_options.apply(sock, options, "udp")
    return sock


def _await_close(socks: list[socket.socket]) -> dict[socket.socket, float]:
    """Our side is closed; the server closes its own once it has read everything: when
    each did (monotonic), those that closed cleanly."""
    deadline = time.monotonic() + CLOSE_SECONDS
    open_socks = list(socks)
    closed: dict[socket.socket, float] = {}
    while open_socks and time.monotonic() < deadline:
        readable, _, _ = select.select(open_socks, [], [], 0.1)
        for sock in readable:
            try:
                if not sock.recv(65536):
                    open_socks.remove(sock)
                    closed[sock] = time.monotonic()
            except BlockingIOError:
                continue
            except OSError:
                open_socks.remove(sock)
    return closed


def _told_by_close(streams: list[Stream], closed: dict[socket.socket, float]
                   ) -> dict[int, dict[str, Any]]:
    """An iperf2 TCP server reports nothing to its client, but its clean close says what
    it counted: it closes once it has read our end of stream, so it received every byte
    we sent, by then (half a round trip before we saw it); and a stream it sent us ended
    with its close, so it sent what we read. Streams that failed or stayed open: none."""
    views: dict[int, dict[str, Any]] = {}
    for stream in streams:
        if stream.error or stream.first is None:
            continue
        if stream.sending and stream.sock in closed:
            views[stream.number] = {"stream": stream.number, "bytes": stream.num_bytes,
                                    "seconds": closed[stream.sock] - stream.first}
        elif not stream.sending and stream.last is not None:
            views[stream.number] = {"stream": stream.number, "bytes": stream.num_bytes,
                                    "seconds": stream.last - stream.first}
    return views
