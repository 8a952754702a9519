"""Data streams of a test: one thread each, moving bytes as fast as allowed and keeping
counters the interval sampler reads. Used by every driver, client and server alike; what
differs between TCP and UDP lives in tcp_stream.py and udp_stream.py, chosen once per
stream by its protocol."""

from __future__ import annotations

import socket
import struct
import threading
from dataclasses import dataclass, field
from types import ModuleType

from ..errors import SimpleperfError
from ..protocol.native import DATAGRAM_HEADER, TestSpec
from ..stats import UdpReceiveAccount
from ..transport import tcpinfo
from . import tcp_stream, udp_stream

TRANSPORTS: dict[str, ModuleType] = {"tcp": tcp_stream, "udp": udp_stream}


@dataclass
class Stream:
    """One direction of one connection (TCP) or socket pair (UDP)."""

    number: int
    sending: bool
    protocol: str
    sock: socket.socket
    label: str  # our end, ip:port
    num_bytes: int = 0
    packets_sent: int = 0
    account: UdpReceiveAccount | None = None
    first: float | None = None  # monotonic: first byte written or read
    last: float | None = None  # monotonic: last byte written or read
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event)
    header: struct.Struct = DATAGRAM_HEADER  # UDP: iperf3 peers use their own layout
    tcp_samples: list[tcpinfo.TcpInfo] = field(default_factory=list)
    transport: ModuleType = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.transport = TRANSPORTS[self.protocol]

    @property
    def role(self) -> str:
        return "sender" if self.sending else "receiver"


def run_stream(stream: Stream, spec: TestSpec, start: float, stop: threading.Event) -> None:
    """Thread body: send or receive until the test's end, the peer's end, or `stop`."""
    try:
        if stream.sending:
            deadline = None if spec.end is None else start + spec.end
            stream.transport.send(stream, spec, start, deadline, stop)
        else:
            stream.transport.receive(stream, spec, stop)
    except SimpleperfError as error:
        stream.error = str(error)
    except OSError as error:
        if not stop.is_set():
            stream.error = f"stream {stream.label}: " + (error.strerror or str(error)).lower()
    finally:
        stream.done.set()
