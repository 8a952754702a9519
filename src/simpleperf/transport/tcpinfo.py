"""The kernel's view of a TCP connection (Linux TCP_INFO): RTT, window, retransmits."""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import Any

TCP_INFO = getattr(socket, "TCP_INFO", 11)
# Offsets in struct tcp_info (linux/tcp.h); fields only ever get appended, so a shorter
# answer from an older kernel simply lacks the later ones.
_FIELDS = {"rtt_us": 68, "rttvar_us": 72, "snd_cwnd": 80, "snd_mss": 16, "pmtu": 60,
           "total_retrans": 100, "delivered_ce": 196, "snd_wnd": 228}


@dataclass(frozen=True)
class TcpInfo:
    rtt_us: int
    rttvar_us: int
    snd_cwnd: int  # in segments
    snd_mss: int
    total_retrans: int
    delivered_ce: int | None  # segments the peer echoed as CE-marked (ECE); Linux 4.18+
    snd_wnd: int | None  # the peer's advertised window; None before Linux 5.4
    pmtu: int  # the path MTU TCP uses


def read(sock: socket.socket) -> TcpInfo | None:
    """TCP_INFO of a connected socket, or None where the platform does not have it."""
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, 256)
    except OSError:
        return None
    if _FIELDS["total_retrans"] + 4 > len(raw):
        return None  # a kernel too old to report retransmits: no TCP_INFO worth reading
    values: dict[str, Any] = {name: struct.unpack_from("I", raw, offset)[0]
                              if offset + 4 <= len(raw) else None
                              for name, offset in _FIELDS.items()}
    return TcpInfo(**values)


_BYTES_ACKED = struct.Struct("Q")
_BYTES_ACKED_OFFSET = 120  # tcpi_bytes_acked, Linux 4.1+


def bytes_acked(sock: socket.socket) -> int | None:
    """Bytes the peer has acknowledged on a connection we send on (what arrived, not what
    was written); None where the kernel does not say."""
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, 256)
    except OSError:
        return None
    if len(raw) < _BYTES_ACKED_OFFSET + _BYTES_ACKED.size:
        return None
    return _BYTES_ACKED.unpack_from(raw, _BYTES_ACKED_OFFSET)[0]


def rtt_seconds(sock: socket.socket) -> float:
    """The kernel's smoothed RTT of a connection in seconds; 0.0 where it is unknown."""
    info = read(sock)
    return info.rtt_us / 1e6 if info else 0.0


def congestion(sock: socket.socket) -> str | None:
    """The congestion control a TCP connection runs (TCP_CONGESTION), or None."""
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
    except (OSError, AttributeError):
        return None
    return raw.split(b"\0", 1)[0].decode(errors="replace") or None
