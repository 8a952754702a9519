"""Testing against an iperf3 server: iperf3's exchange on the client side, measured by our
own stream threads and Measurement, printed with simpleperf's tables and JSON."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable
from typing import Any

from .. import __version__, rsa_auth
from ..description.client_options import ClientOptions
from ..description.options import DEFAULT_NATIVE_INTERVAL, is_congestion_name
from ..description.testspec import TestSpec, beyond_iperf3
from ..description.transports import Transport
from ..engine import tcp_stream
from ..engine.measurement import Measurement
from ..engine.records import Stream
from ..errors import Interrupted, PeerGone, ProtocolError, SimpleperfError
from ..protocol import iperf3
from ..protocol.exchange import Iperf3Order
from ..report.client import TestOutput
from ..transport import tcp, udp
from .control import Iperf3Control

STATE_SECONDS = 15.0
SETTLE_LIMIT = 2.0


RSA_REFUSED = ("the iperf3 server closed the connection on our authentication: a wrong user "
               "or password, a clock further from its own than its --time-skew-threshold, "
               "or a padding it does not use (--use-pkcs1-padding for iperf3 before 3.17)")


class Busy(SimpleperfError):
    pass


def run(options: ClientOptions, out: Callable[[str], None], busy_retries: int = 0,
        control: tuple[socket.socket, bytes] | None = None) -> None:
    """`control`: a connection whose first COOKIE_SIZE bytes, already sent, an iperf3 server
    took for the test's cookie (another protocol's greeting); the test goes on over it."""
    for attempt in range(busy_retries + 1):
        try:
            _Iperf3Test(options, out, control).run()
            return
        except Busy:
            control = None  # a busy server closed it: the next try connects anew
            if attempt == busy_retries:
                raise
            time.sleep(0.3)


class _Iperf3Test:
    def __init__(self, options: ClientOptions, out: Callable[[str], None],
                 control: tuple[socket.socket, bytes] | None = None) -> None:
        self.options = options
        self.out = out
        self.spec = options.test  # -n: all streams together
        self.handed = control[0] if control is not None else None
        self.cookie = control[1] if control is not None else iperf3.make_cookie()
        self.order = Iperf3Order()
        self.streams: list[Stream] = []
        self.remote_cpu: tuple[float, float] | None = None  # the server's, from its results
        self.remote_congestion: str | None = None
        self.server_output: str | None = None  # --get-server-output: the server's text

    def run(self) -> None:
        options = self.options
        control = self.handed
        if control is None:
            control = tcp.connect_to_server(options)
            control.sendall(self.cookie)
        self.control = Iperf3Control(control, "server")
        try:
            beyond = beyond_iperf3(self.spec)
            if beyond is not None:
                needs, lacks = beyond
                raise SimpleperfError(f"the server at {options.host} port {options.port} is "
                                      f"an iperf3 server, which {lacks}: {needs}")
            control.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._expect()  # PARAM_EXCHANGE
            parameters = iperf3.parameters_message(self.spec, f"simpleperf-{__version__}")
            if options.get_server_output:
                parameters["get_server_output"] = 1
            if options.rsa_username is not None and options.rsa_public_key is not None:
                parameters["authtoken"] = rsa_auth.make_token(
                    options.rsa_username, rsa_auth.password(),
                    rsa_auth.load_public_key(options.rsa_public_key), options.rsa_pkcs1)
            control.sendall(iperf3.encode_json(parameters))
            try:
                self._expect()  # CREATE_STREAMS
            except PeerGone:
                if "authtoken" not in parameters:
                    raise
                raise SimpleperfError(RSA_REFUSED) from None
            self._open_streams()
            tcp_stream.attach_file(self.streams, options.file)
            self._expect()  # TEST_START
            self._expect()  # TEST_RUNNING
            self._measure()
        except ProtocolError as error:
            raise SimpleperfError(f"iperf3 protocol error: {error}") from None
        finally:
            control.close()
            tcp_stream.close_files(self.streams)
            for stream in self.streams:
                stream.sock.close()

    # The exchange ----------------------------------------------------------------------------

    def _read_state(self, timeout: float) -> int | None:
        """The server's next state; its refusals and endings become one-line errors."""
        value = self.control.read_state(timeout)
        if value == iperf3.ACCESS_DENIED:
            raise Busy(f"the iperf3 server at {self.options.host} port {self.options.port} "
                       "is busy running a test (iperf3 serves one at a time); try again later")
        if value == iperf3.SERVER_ERROR:
            code, errno = iperf3.parse_server_error(self.control.read_bytes(8, STATE_SECONDS))
            raise SimpleperfError(f"the iperf3 server refused the test: "
                                  f"{iperf3.error_text(code)}"
                                  + (f" (errno {errno})" if errno else ""))
        if value == iperf3.SERVER_TERMINATE:
            raise SimpleperfError("the iperf3 server terminated the test")
        return value

    def _expect(self) -> None:
        """The server's next state, which must be the one the exchange's order names."""
        value = self._read_state(STATE_SECONDS)
        if value is None:
            raise ProtocolError(f"no state {self.order.expected} from the server within "
                                f"{STATE_SECONDS:g} s")
        self.order.advance(value)

    # Streams ---------------------------------------------------------------------------------

    def _open_streams(self) -> None:
        options = self.options
        header = iperf3.HEADER_64
        for number in range(1, self.spec.stream_count() + 1):
            sending = self.spec.client_sends(number)
            if not self.spec.transport.datagrams:
                sock = tcp.connect_to_server(options, stream=number)
                self.streams.append(Stream(number, sending, "tcp", sock,
                                           tcp.endpoint(sock.getsockname())))
                sock.sendall(self.cookie)
                tcp_stream.apply_options(sock, self.spec)
            else:
                sock = udp.greet_server(options, number, iperf3.UDP_CONNECT_MSG,
                                        (iperf3.UDP_CONNECT_REPLY,
                                         iperf3.UDP_CONNECT_REPLY_LEGACY),
                                        not sending, self.control.conn)
                self.streams.append(Stream(number, sending, "udp", sock,
                                           tcp.endpoint(sock.getsockname()), header=header))
            tcp.set_wake_up(sock)

    # The test --------------------------------------------------------------------------------

    def _measure(self) -> None:
        options = self.options
        output = TestOutput(options, self.spec, self.streams, self.out, "iperf3",
                            self.cookie.rstrip(b"\0").decode())
        measurement = Measurement(self._local_spec(), self.streams,
                                  options.rows_every or DEFAULT_NATIVE_INTERVAL,
                                  output.interval)
        output.start()
        measurement.begin(time.monotonic())
        congestion = options.test.congestion or tcp.system_congestion()
        try:
            self._run_until_done(measurement)
            measurement.stop_sending.set()
            _settle_senders(self.streams, self.spec.transport)
            self.control.conn.sendall(iperf3.state(iperf3.TEST_END))
            measurement.drain_receivers()
            measurement.finish(time.monotonic())
            measurement.stop.set()
            remote = self._exchange_results(measurement)
        except KeyboardInterrupt:
            with contextlib.suppress(OSError):
                self.control.conn.sendall(iperf3.state(iperf3.CLIENT_TERMINATE))
            measurement.close()
            output.end(measurement, {}, None, None, congestion, interrupted=True)
            raise Interrupted() from None
        measurement.close()
        output.server_output = self.server_output
        output.end(measurement, remote, None, None, congestion, remote_cpu=self.remote_cpu,
                   peer_congestion=self.remote_congestion)
        errors = measurement.errors()
        if errors:
            raise SimpleperfError(errors[0])

    def _local_spec(self) -> TestSpec:
        """Our senders stop on their own at -n (split across the streams), or when we end
        the test; the clock is ours, as in iperf3, where the client ends every test."""
        spec = self.spec
        senders = sum(1 for s in self.streams if s.sending) or 1
        share = -(-spec.num_bytes // senders) if spec.num_bytes else None
        return TestSpec(**{**spec.__dict__, "duration": None, "num_bytes": share})

    def _run_until_done(self, measurement: Measurement) -> None:
        spec = self.spec
        while True:
            now = time.monotonic()
            measurement.tick(now)
            elapsed = now - measurement.start
            if spec.end is not None and elapsed >= spec.end:
                return
            if spec.num_bytes is not None and (
                    sum(s.num_bytes for s in self.streams if s.sending) >= spec.num_bytes
                    or sum(s.num_bytes for s in self.streams if not s.sending)
                    >= spec.num_bytes):
                return
            value = self._read_state(0.02)
            if value is not None:
                raise ProtocolError(f"the server sent state {value} during the test")

    def _exchange_results(self, measurement: Measurement) -> dict[int, dict[str, Any]]:
        self._expect()  # EXCHANGE_RESULTS
        ids = iperf3.stream_ids(len(self.streams))
        self.control.conn.sendall(iperf3.encode_json(iperf3.results_message(
            measurement.finish(time.monotonic()), ids, measurement.cpu_percent(),
            1 if any(s.sending for s in self.streams) else -1)))
        value = self.control.read_json(iperf3.MAX_RESULTS, STATE_SECONDS)
        theirs = iperf3.parse_results(value)
        self.remote_cpu = iperf3.parse_cpu(value)
        text = value.get("server_output_text")
        if isinstance(text, str) and len(text) <= iperf3.MAX_RESULTS:
            self.server_output = text
        used = value.get("congestion_used")
        self.remote_congestion = used if is_congestion_name(used) else None
        self._expect()  # DISPLAY_RESULTS
        with contextlib.suppress(OSError):
            self.control.conn.sendall(iperf3.state(iperf3.IPERF_DONE))
        remote = {}
        for number, stream_id in zip(range(1, len(self.streams) + 1), ids, strict=True):
            view = theirs.get(stream_id)
            if view is None:
                continue
            remote[number] = iperf3.result_view(view, number, self.spec.transport,
                                                self.spec.client_sends(number))
        return remote


def _settle_senders(streams: list[Stream], transport: Transport) -> None:
    """An iperf3 server counts what it has read when TEST_END arrives: let what we wrote
    be acknowledged, then read (at most SETTLE_LIMIT), so both ends report the same."""
    sending = [s for s in streams if s.sending]
    deadline = time.monotonic() + SETTLE_LIMIT
    for stream in sending:
        stream.done.wait(max(0.0, deadline - time.monotonic()))
    if transport.datagrams or not sending:
        return
    try:
        while time.monotonic() < deadline:
            if all(tcp.unacknowledged_bytes(s.sock) == 0 for s in sending):
                # iperf3's server is one thread: while it also sends (--bidir) it
                # reads only between its writes, so give it the longest settle.
                both_ways = len(sending) < len(streams)
                time.sleep(tcp.SETTLE_MAX_SECONDS if both_ways else
                           max(tcp.settle_time(s.sock) for s in sending))
                return
            time.sleep(0.002)
    except OSError:
        return
