"""What the engine measures: a stream and its counters, their values at a moment, and one
interval's row."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO

from ..delays import DelayAccount, DelayLog, FrameAccount
from ..description.transports import Transport, transport_of
from ..protocol.native import DATAGRAM_HEADER
from ..stats import UdpReceiveAccount
from ..transport import tcpinfo

if TYPE_CHECKING:
    from .udp_pace import Teller


@dataclass
class Snapshot:
    """A stream's cumulative counters at one moment."""

    num_bytes: int = 0
    packets: int = 0
    lost: int = 0
    out_of_order: int = 0
    retransmits: int = 0
    dropped: int = 0  # UDP receivers: of `lost`, those the receiving socket dropped


@dataclass
class IntervalRecord:
    stream: int
    start: float  # seconds since the measured part began (negative while omitting)
    end: float
    num_bytes: int
    sending: bool
    omitted: bool = False
    packets: int | None = None
    lost: int | None = None
    out_of_order: int | None = None
    jitter_ms: float | None = None
    retransmits: int | None = None
    snd_cwnd: int | None = None
    rtt_us: int | None = None
    rttvar_us: int | None = None
    snd_wnd: int | None = None  # the receiver's advertised window, bytes
    pmtu: int | None = None
    delays: DelayAccount | None = None  # a receiver's one-way (path) delays (--trip-times)
    write_delays: DelayAccount | None = None  # TCP: write-to-read delays (the application's)


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
    file: BinaryIO | None = None  # -F: a sender sends its bytes, a receiver writes into it
    header: struct.Struct = DATAGRAM_HEADER  # UDP: iperf3 and iperf2 peers use their own
    payload: bytes = b""  # UDP: what every datagram carries after its header (iperf2's test)
    tcp_samples: list[tcpinfo.TcpInfo] = field(default_factory=list)
    key: bytes | None = None  # UDP with a shared secret: the test's key in every datagram
    # a receiver's one-way delays of the path (--trip-times): each datagram's from its
    # send(), each TCP write's from the kernel's send of its last byte; and over TCP each
    # write's from its write() (the application's delay: the sender's buffer included)
    delays: DelayLog | None = None
    write_delays: DelayLog | None = None
    frames: FrameAccount | None = None  # an isochronous receiver's frames
    # a TCP receiver's reader of its peer's write times (anything with feed(data, wall));
    # None: ours (timed_writes.WriteTimes) when the test is timed
    write_times: Any = None
    frames_sent: int = 0  # an isochronous sender's
    frames_slipped: int = 0
    ce_marked: int | None = None  # an --l4s receiver's datagrams that arrived CE-marked
    native: bool = False  # the peer speaks the native protocol (UDP: it reads pace feedback)
    teller: Teller | None = None  # a UDP receiver's feedback to an unlimited sender
    paced: int = 0  # an unlimited UDP sender: times it slowed to what its receiver read
    # a TCP receiver whose peer ends it with its close (iperf2's): fast, its reads wait for
    # LOW_WATER bytes (tcp_stream), so it wakes less and leaves the sender more CPU
    low_water: bool = False
    # a UDP sender to a peer whose address is unproven (engine/unproven.py): the bytes it
    # may have sent by now; None: proven
    allowance: Callable[[], int] | None = None

    @property
    def role(self) -> str:
        return "sender" if self.sending else "receiver"

    @property
    def transport(self) -> Transport:
        return transport_of(self.protocol)
