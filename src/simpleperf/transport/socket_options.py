"""The options a client sets on each of its data sockets, one row each: the ClientOptions
field that asks for it, the transports it applies to and how it is set. Every data socket a
client opens (TCP connections and UDP sockets, whatever protocol its server speaks) takes
them through apply(), so a flag that only sets a socket option is its argument, its
ClientOptions field and a row here."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..description.client_options import ClientOptions

TCP_NOTSENT_LOWAT = getattr(socket, "TCP_NOTSENT_LOWAT", 25)  # <linux/tcp.h>


def set_unsent_limit(sock: socket.socket, limit: int) -> None:
    """TCP_NOTSENT_LOWAT: the socket takes more only while less than `limit` bytes wait
    unsent (nothing happens where the option is missing)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT, limit)


def _window_clamp(sock: socket.socket, size: int) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP, size)


def _user_timeout(sock: socket.socket, seconds: float) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(seconds * 1000))


def _hops(sock: socket.socket, hops: int) -> None:
    if sock.family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, hops)
    else:
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, hops)


def _dont_route(sock: socket.socket, on: bool) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_DONTROUTE, int(on))


@dataclass(frozen=True)
class SocketOption:
    # a field of ClientOptions or of its test; unset (None, 0, False) leaves the kernel's
    field: str
    transports: tuple[str, ...]  # "tcp", "udp"
    set: Callable[[socket.socket, Any], None]


DATA_SOCKET_OPTIONS: tuple[SocketOption, ...] = (
    # --tcp-write-prefetch: bytes that may wait unsent
    SocketOption("write_prefetch", ("tcp",), set_unsent_limit),
    # --tcp-rx-window-clamp: the window it advertises, at most
    SocketOption("window_clamp", ("tcp",), _window_clamp),
    # --snd-timeout: data unacknowledged this long ends the test
    SocketOption("snd_timeout", ("tcp",), _user_timeout),
    # --ttl (-T after --iperf2): every data packet's IPv4 TTL or IPv6 hop limit
    SocketOption("ttl", ("tcp", "udp"), _hops),
    # --local-only: SO_DONTROUTE, to hosts on a directly connected network only
    SocketOption("local_only", ("tcp", "udp"), _dont_route),
)


def apply(sock: socket.socket, options: ClientOptions, transport: str) -> None:
    """Every row that `options` asks for and that applies to `transport`."""
    for option in DATA_SOCKET_OPTIONS:
        value = options.value(option.field)
        if value and transport in option.transports:  # unset: None, 0 or False
            option.set(sock, value)
