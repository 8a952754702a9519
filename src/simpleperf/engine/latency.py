"""Round-trip probes to a simpleperf server's echo service, over TCP or UDP: no privileges
needed (unlike ICMP ping), and on a connection of its own, so that during a test it
measures the queues the bulk data builds rather than waiting behind that data."""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time

from ..description.options import CONNECT_TIMEOUT_SECONDS
from ..description.transports import TCP, Transport
from ..errors import SimpleperfError
from ..protocol.native import ECHO, ECHO_PROBE, PREFACE_SIZE, UDP_ECHO, echo_probe, preface
from ..transport import tcp

CLOSED = "the server closed the echo connection"
UDP_REPLY_TIMEOUT = 1.0
TCP_REPLY_TIMEOUT = 5.0
SECRET_HINT = (" (a server that requires authentication answers only probes made with the "
               "shared secret: --auth-secret-file FILE or $SIMPLEPERF_SECRET)")


class EchoProber:
    def __init__(self, host: str, port: int, transport: Transport = TCP,
                 family: int = socket.AF_UNSPEC, secret: bytes | None = None,
                 connect_timeout: float = CONNECT_TIMEOUT_SECONDS, tos: int = 0,
                 local: str | None = None, flowlabel: int = 0) -> None:
        self.transport = transport
        self.secret = secret
        self.sent = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.samples_ms: list[float] = []
        if not transport.datagrams:
            self.sock = tcp.connect(host, port, connect_timeout, family=family, local=local,
                                    tos=tos, flowlabel=flowlabel)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock.sendall(preface(ECHO))
            self._prefix = b""
        else:
            self.sock = _udp_connect(host, port, family)
            self._prefix = preface(UDP_ECHO)

    def probe(self) -> float | None:
        """One round trip in milliseconds; None if the answer did not come in time."""
        self.sent += 1
        number = self.sent
        began = time.monotonic_ns()
        message = self._prefix + echo_probe(number, began, self.secret)
        try:
            return self._round_trip(message, number, began)
        except ConnectionRefusedError:  # UDP: ICMP port unreachable
            if not self.transport.datagrams:
                raise SimpleperfError(CLOSED + ("" if self.secret else SECRET_HINT)) from None
            return None
        except (ConnectionResetError, BrokenPipeError):
            raise SimpleperfError(CLOSED + ("" if self.secret else SECRET_HINT)) from None

    def _round_trip(self, message: bytes, number: int, began: int) -> float | None:
        self.sock.send(message)
        timeout = UDP_REPLY_TIMEOUT if self.transport.datagrams else TCP_REPLY_TIMEOUT
        deadline = time.monotonic() + timeout
        received = b""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if not self.transport.datagrams:
                    raise SimpleperfError(f"no echo from the server within {timeout:g} s"
                                          + ("" if self.secret else SECRET_HINT))
                return None
            readable, _, _ = select.select([self.sock], [], [], remaining)
            if not readable:
                continue
            chunk = self.sock.recv(65536)
            if not chunk:
                raise SimpleperfError(CLOSED + ("" if self.secret else SECRET_HINT))
            if self.transport.datagrams:
                if len(chunk) == len(message) and ECHO_PROBE.unpack_from(
                        chunk, PREFACE_SIZE)[0] == number:
                    break
                continue  # a late answer to an earlier probe
            received += chunk
            if len(received) >= len(message):
                break
        rtt = (time.monotonic_ns() - began) / 1e6
        self.samples_ms.append(rtt)
        return rtt

    def run(self, count: int | None, interval: float,
            on_probe=None, stop: threading.Event | None = None) -> None:
        """Probe every `interval` seconds, `count` times or until stopped."""
        stop = stop or self._stop
        next_at = time.monotonic()
        done = 0
        while not stop.is_set() and (count is None or done < count):
            rtt = self.probe()
            done += 1
            if on_probe is not None:
                on_probe(self.sent, rtt)
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                stop.wait(delay)
            else:
                next_at = time.monotonic()

    def start_background(self, interval: float) -> None:
        self._stop.clear()
        self.samples_ms = []

        def body() -> None:
            with contextlib.suppress(SimpleperfError, OSError):
                self.run(None, interval)
        self._thread = threading.Thread(target=body, name="rtt probes", daemon=True)
        self._thread.start()

    def stop_background(self) -> list[float]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(TCP_REPLY_TIMEOUT + 1)
        return list(self.samples_ms)

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


def _udp_connect(host: str, port: int, family: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, family, socket.SOCK_DGRAM)
    except socket.gaierror:
        raise SimpleperfError(f"cannot resolve server name '{host}'") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.connect(address)
    except OSError as error:
        sock.close()
        raise SimpleperfError(f"cannot reach {host} port {port} over UDP: "
                              f"{error.strerror}") from None
    return sock
