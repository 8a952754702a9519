"""Serving iperf3 clients: iperf3's exchange on the shared port, any number at once (iperf3's
own server takes one), measured by the same stream threads and Measurement as native tests."""

from __future__ import annotations

import contextlib
import errno
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..description.options import ServerOptions, test_deadline
from ..engine import tcp_stream
from ..engine.measurement import Measurement
from ..engine.records import Stream
from ..errors import ProtocolError, SimpleperfError
from ..policy import Limit, Refusal, ServerPolicy, TestWatch, buffer_bytes
from ..protocol import iperf3
from ..report import native as table
from ..report import server_json
from ..transport import tcp, udp
from ..transport.udp_port import UdpPort
from .control import Iperf3Control

HANDSHAKE_SECONDS = 10.0
STREAMS_SECONDS = 10.0
RESULTS_SECONDS = 10.0
SERVER_STEP_SECONDS = 1.0
# iperf3's error numbers for the limits an iperf3 client can be told about.
REFUSAL_ERRORS = {Limit.PARALLEL: iperf3.IENUMSTREAMS, Limit.DURATION: iperf3.IEDURATION,
                  Limit.UDP: iperf3.IEUNIMP, Limit.RATE: iperf3.IETOTALRATE,
                  Limit.CPU: iperf3.IEAFFINITY}


def _answer(refusal: Refusal) -> bytes:
    """A refusal as iperf3's client understands it."""
    if refusal.limit is Limit.BUSY:  # as iperf3's own server answers a second client
        return iperf3.state(iperf3.ACCESS_DENIED)
    if refusal.limit is Limit.MEMORY:  # "unable to create a new test: Cannot allocate memory"
        return iperf3.server_error(iperf3.IENEWTEST, errno.ENOMEM)
    return iperf3.server_error(REFUSAL_ERRORS[refusal.limit])


@dataclass
class _Iperf3Test:
    cookie: bytes
    peer_host: str
    params: iperf3.Parameters | None = None
    accepting: bool = False
    tcp_arrivals: list[tuple[int, socket.socket]] = field(default_factory=list)
    udp_arrivals: list[tuple[tuple, socket.socket]] = field(default_factory=list)
    complete: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def arrived(self) -> int:
        return len(self.tcp_arrivals) + len(self.udp_arrivals)

    def note_arrival(self) -> None:
        assert self.params is not None
        if self.arrived() >= self.params.stream_count():
            self.accepting = False
            self.complete.set()


class Iperf3Service:
    def __init__(self, options: ServerOptions, policy: ServerPolicy, say: Callable[..., None],
                 stopping: threading.Event, port: UdpPort) -> None:
        self.options = options
        self.policy = policy
        self.say = say
        self.document: Callable[[dict[str, Any]], None] = lambda _: None  # -J, by the server
        self.stopping = stopping
        self.port = port  # the UDP side of the server's port
        self._tests: dict[bytes, _Iperf3Test] = {}
        self._lock = threading.Lock()

    # Connections --------------------------------------------------------------------------

    def serve(self, conn: socket.socket, peer: str, cookie: bytes, accept_index: int) -> bool:
        """A connection that opened with an iperf3 cookie: a data connection of a test that
        awaits its streams (kept open: True), or the control connection of a new test."""
        with self._lock:
            test = self._tests.get(cookie)
        if test is not None:
            with test.lock:
                if not test.accepting or test.params is None or test.params.transport.datagrams:
                    conn.sendall(iperf3.state(iperf3.ACCESS_DENIED))
                    return False
                test.tcp_arrivals.append((accept_index, conn))
                test.note_arrival()
            return True
        self._serve_control(conn, peer, cookie)
        return False

    def awaits_streams(self, cookie: bytes) -> bool:
        """Whether `cookie` names a test that is under way (its connection is a stream)."""
        with self._lock:
            return cookie in self._tests

    def udp_hello(self, data: bytes, peer: tuple[Any, ...]) -> None:
        """A UDP stream's greeting ('9876'): it belongs to the test from that host that
        awaits UDP streams (the oldest, if several do)."""
        host = tcp.endpoint(peer).rsplit(":", 1)[0]
        reply = iperf3.UDP_CONNECT_REPLY if data == iperf3.UDP_CONNECT_MSG else data[::-1]
        with self._lock:
            candidates = [t for t in self._tests.values() if t.peer_host == host]
        for test in candidates:
            with test.lock:
                for address, sock in test.udp_arrivals:
                    if address == peer:  # a greeting the stream's socket did not get
                        sock.send(reply)
                        return
        for test in candidates:
            with test.lock:
                if test.accepting and test.params is not None and test.params.transport.datagrams:
                    sock = self.port.socket_for(peer, data, reply)
                    test.udp_arrivals.append((peer, sock))
                    sock.send(reply)
                    test.note_arrival()
                    return

    # One test -------------------------------------------------------------------------------

    def _serve_control(self, conn: socket.socket, peer: str, cookie: bytes) -> None:
        test = _Iperf3Test(cookie, peer.rsplit(":", 1)[0])
        with self._lock:
            self._tests[cookie] = test
        measurement: Measurement | None = None
        streams: list[Stream] = []
        admitted = False
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            control = Iperf3Control(conn, "client")
            params = self._parameters(control)
            answer, why = self._admit(params)
            if answer is not None:
                conn.sendall(answer)
                self.say(f"Refused iperf3 client {peer}: {why}")
                return
            admitted = True
            with test.lock:
                test.params = params
                test.accepting = True
            conn.sendall(iperf3.state(iperf3.CREATE_STREAMS))
            started_wall = time.time()
            streams = self._await_streams(control, test)
            measurement = self._run(control, params, streams)
            theirs, their_cpu, lines = _exchange_results(control, params, measurement, peer,
                                                         self.options.unit)
            self.say(*lines)
            self.document(server_json.test_document(
                iperf3.spec_from_parameters(params), peer, measurement,
                _by_number(measurement, theirs),
                started_wall, f"iperf3 {params.client_version or 'client'}", their_cpu))
        except (ProtocolError, SimpleperfError, OSError) as error:
            reason = (error.strerror or str(error)).lower() if isinstance(error, OSError) \
                else str(error)
            self.say(f"iperf3 test from {peer} ended: {reason}")
            self.document(server_json.error_document(peer, reason))
        finally:
            if measurement is not None:
                measurement.close()
            tcp_stream.close_files(streams)
            with self._lock:
                self._tests.pop(cookie, None)
            with test.lock:
                test.accepting = False
                if measurement is None:
                    for _, sock in test.tcp_arrivals + test.udp_arrivals:
                        sock.close()
            if admitted:
                self.policy.release(buffer_bytes(params.stream_count(), params.length))

    def _parameters(self, control: Iperf3Control) -> iperf3.Parameters:
        control.conn.sendall(iperf3.state(iperf3.PARAM_EXCHANGE))
        value = control.read_json(iperf3.MAX_PARAMS, HANDSHAKE_SECONDS)
        return iperf3.parse_parameters(value)

    def _admit(self, params: iperf3.Parameters) -> tuple[bytes | None, str]:
        """The answer that refuses this test, and why; (None, "") once it is admitted (a
        slot taken: the parameters were valid)."""
        early = _not_allowed(self.options, params)
        if early is not None:
            return early
        refusal = self.policy.admit(params.transport, params.parallel, params.timed_duration,
                                    params.omit, params.rate * params.stream_count(),
                                    params.server_affinity,
                                    buffer_bytes(params.stream_count(), params.length))
        return (None, "") if refusal is None else (_answer(refusal), str(refusal))

    def _await_streams(self, control: Iperf3Control, test: _Iperf3Test) -> list[Stream]:
        params = test.params
        assert params is not None
        deadline = time.monotonic() + STREAMS_SECONDS
        while not test.complete.is_set():
            if time.monotonic() > deadline or self.stopping.is_set():
                raise ProtocolError(f"only {test.arrived()} of {params.stream_count()} "
                                    "streams connected")
            if control.readable(0.05):
                raise ProtocolError("unexpected control message before the streams")
        with test.lock:
            if not params.transport.datagrams:
                ordered = [sock for _, sock in sorted(test.tcp_arrivals, key=lambda a: a[0])]
            else:
                ordered = [sock for _, sock in test.udp_arrivals]
        return _streams(params, ordered)

    def _run(self, control: Iperf3Control, params: iperf3.Parameters,
             streams: list[Stream]) -> Measurement:
        spec = iperf3.spec_from_parameters(params)
        tcp_stream.attach_server_file(self.options.file, spec.transport, streams)
        every = self.options.interval  # -i: rows as each interval closes
        measurement = Measurement(spec, streams, every or SERVER_STEP_SECONDS,
                                  table.interval_printer(every, streams, spec.transport,
                                                         self.options.unit, self.say),
                                  cpu=params.server_affinity)
        self.port.settled([stream.sock for stream in streams])
        control.conn.sendall(iperf3.state(iperf3.TEST_START) + iperf3.state(iperf3.TEST_RUNNING))
        measurement.begin(time.monotonic())
        limit = test_deadline(params.timed_duration, params.omit, self.policy.time_limit)
        watch = self.policy.test_watch(params.timed_duration)
        while True:
            now = time.monotonic()
            measurement.tick(now)
            _keep_limits(control, measurement, now, limit, watch)
            message = control.read_state(0.05)
            if message is None:
                continue
            if message == iperf3.TEST_END:
                break
            raise ProtocolError(f"the client sent state {message} during the test"
                                if message != iperf3.CLIENT_TERMINATE
                                else "the client terminated the test")
        measurement.stop_sending.set()
        _uncount_undelivered(streams)
        # As iperf3's server does: close what we send on before EXCHANGE_RESULTS. An iperf3
        # client may sit in a blocking read of one; only their end wakes it. What we
        # receive is read on until the client's results say how much it wrote.
        measurement.close_senders()
        return measurement


def _exchange_results(control: Iperf3Control, params: iperf3.Parameters,
                      measurement: Measurement, peer: str, unit: str
                      ) -> tuple[dict[int, dict[str, Any]], tuple[float, float] | None,
                                 list[str]]:
    """Both ends' results crossed; the client's by iperf3 stream id, its CPU, and our
    text report. Ours are fixed once what the client wrote has arrived."""
    conn = control.conn
    conn.sendall(iperf3.state(iperf3.EXCHANGE_RESULTS))
    value = control.read_json(iperf3.MAX_RESULTS, RESULTS_SECONDS)
    theirs = iperf3.parse_results(value)
    measurement.drain_receivers(expected=_written(params, measurement, theirs))
    measurement.finish(time.monotonic())
    measurement.close()
    lines = _text_report(peer, params, measurement, unit)
    ours = _results(params, measurement)
    if params.get_server_output:
        ours["server_output_text"] = "\n".join(lines) + "\n"
    conn.sendall(iperf3.encode_json(ours))
    conn.sendall(iperf3.state(iperf3.DISPLAY_RESULTS))
    with contextlib.suppress(ProtocolError):
        control.read_state(RESULTS_SECONDS)  # IPERF_DONE, or the client just closes
    if len(theirs) != len(measurement.streams):
        raise ProtocolError(f"the client reported {len(theirs)} streams, not "
                            f"{len(measurement.streams)}")
    return theirs, iperf3.parse_cpu(value), lines


def _not_allowed(options: ServerOptions, params: iperf3.Parameters
                 ) -> tuple[bytes, str] | None:
    """The answer and reason for a test refused before the server's limits are asked:
    authentication (iperf3's RSA token, or our shared secret, which iperf3 cannot prove)
    and options we do not serve."""
    if options.rsa_auth is not None:
        why = options.rsa_auth.refusal(params.authtoken)
        if why is not None:
            return iperf3.server_error(iperf3.IEAUTHTEST), f"authentication failed: {why}"
    elif options.secret is not None:
        return (iperf3.server_error(iperf3.IEAUTHTEST),
                "this server requires simpleperf authentication")
    if params.refused is not None:
        return (iperf3.server_error(params.refused),
                f"option '{params.refused_option}' is not supported")
    return None


def _keep_limits(control: Iperf3Control, measurement: Measurement, now: float, limit: float,
                 watch: TestWatch | None) -> None:
    """End the test, telling the client in iperf3's words, once it runs past the server's
    time limit, faster than its rate limit or idle longer than its idle limit."""
    if now - measurement.start > limit:
        with contextlib.suppress(OSError):
            control.conn.sendall(iperf3.state(iperf3.SERVER_TERMINATE))
        raise ProtocolError(f"the test ran past {limit:g} s")
    if watch is not None and (broken := watch.breach(now, measurement.total_bytes())):
        with contextlib.suppress(OSError):
            control.conn.sendall(iperf3.server_error(iperf3.IETOTALRATE)
                                 if broken.limit is Limit.RATE
                                 else iperf3.state(iperf3.SERVER_TERMINATE))
        raise ProtocolError(str(broken))


def _text_report(peer: str, params: iperf3.Parameters, measurement: Measurement,
                 unit: str) -> list[str]:
    title = (f"Test from {peer} (iperf3 {params.client_version or 'client'}): "
             f"{params.protocol.upper()}, {params.direction}, {params.parallel} stream"
             f"{'s' if params.parallel > 1 else ''}")
    return table.test_report(title, params.transport, measurement.streams,
                             measurement.finish(time.monotonic()), unit)


def _streams(params: iperf3.Parameters, ordered: list[socket.socket]) -> list[Stream]:
    """Our streams on the sockets of a test, in the order its client opened them."""
    streams = []
    for position, (number, sock) in enumerate(
            zip(iperf3.stream_ids(len(ordered)), ordered, strict=True), start=1):
        sending = not params.client_sends(position)
        label = tcp.endpoint(sock.getpeername())
        stream = Stream(number, sending, params.protocol, sock, label, header=params.header())
        if not params.transport.datagrams:
            tcp.set_window(sock, params.window)
            tcp_stream.apply_options(sock, iperf3.spec_from_parameters(params))
        elif not sending:
            udp.enable_receive_offload(sock)
        tcp.set_wake_up(sock)
        streams.append(stream)
    return streams


def _uncount_undelivered(streams: list[Stream]) -> None:
    """An iperf3 client stops reading when it sends TEST_END, so what still waits in our
    send buffers (up to the 16 MB Linux allows) never reaches it: count as sent only what
    the client's kernel acknowledged, so that both ends report the same bytes."""
    for stream in streams:
        if stream.sending and not stream.transport.datagrams:
            stream.done.wait(1.0)  # the thread leaves its last write (wake-up timer)
            with contextlib.suppress(OSError):
                stream.num_bytes -= tcp.unacknowledged_bytes(stream.sock)


def _written(params: iperf3.Parameters, measurement: Measurement,
             theirs: dict[int, dict[str, Any]]) -> dict[int, int] | None:
    """The bytes the client says it wrote on each stream we receive, when they are what
    our count must reach: without -O (each end leaves out its own first seconds)."""
    if params.omit:
        return None
    return {s.number: int(theirs[s.number]["bytes"]) for s in measurement.receiving
            if "bytes" in theirs.get(s.number, {})}


def _by_number(measurement: Measurement, theirs: dict[int, dict[str, Any]]
               ) -> dict[int, dict[str, Any]]:
    """The client's results in our terms (our streams carry iperf3's ids): it received
    what we sent."""
    return {s.number: iperf3.result_view(theirs[s.number], s.number, s.transport, s.sending)
            for s in measurement.streams if s.number in theirs}


def _results(params: iperf3.Parameters, measurement: Measurement) -> dict[str, Any]:
    entries = measurement.finish(time.monotonic())
    any_sender = any(s.sending for s in measurement.streams)
    result = iperf3.results_message(
        entries, [entry["stream"] for entry in entries], measurement.cpu_percent(),
        int(not params.transport.datagrams) if any_sender else -1)
    if not params.transport.datagrams:
        result["congestion_used"] = params.congestion or tcp.system_congestion() or "unknown"
    return result
