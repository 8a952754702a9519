"""UDP sockets that move datagrams fast: segmentation offload when sending (UDP_SEGMENT),
receive offload when receiving (UDP_GRO), kernel receive timestamps, and a plain path
where the kernel has neither."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import select
import socket
import struct
import sys
import time
from typing import Any

from ..description.client_options import ClientOptions
from ..errors import SimpleperfError
from . import socket_options, tcp
from .buffers import aligned

SOL_UDP = 17
UDP_SEGMENT = 103  # linux/udp.h: one send() becomes many datagrams of this size
UDP_GRO = 104  # linux/udp.h: one recv() returns many datagrams of one size, coalesced
SO_TIMESTAMPNS = 35
SO_RXQ_OVFL = 40  # asm-generic/socket.h: each read says how many the socket had dropped
PORT_CLOSED = "the receiver's UDP port is closed (ICMP port unreachable)"
MAX_GSO_BYTES = 65000  # a GSO send stays below the 64 KiB IP payload limit
MAX_GSO_SEGMENTS = 64
RECEIVE_BUFFER = 4 * 1024 * 1024
# At 60 Gbit/s on loopback an 8 MB buffer (4 MB asked, doubled by the kernel) lost 0.2-1.7 %
# at unlimited rate, 32 MB nothing in most runs; the kernel's udp_mem still bounds the sum.
FORCED_RECEIVE_BUFFER = 16 * 1024 * 1024
SO_RCVBUFFORCE = 33  # asm-generic/socket.h
_TIMESPEC = struct.Struct("qq")
_INT = struct.Struct("i")
_UINT = struct.Struct("I")
ANCILLARY_SPACE = socket.CMSG_SPACE(_TIMESPEC.size) + 2 * socket.CMSG_SPACE(_INT.size)


def enable_segmentation(sock: socket.socket, datagram_size: int) -> int:
    """How many datagrams one send() may carry: >1 when the kernel segments for us."""
    batch = min(MAX_GSO_SEGMENTS, MAX_GSO_BYTES // datagram_size)
    if batch < 2:
        return 1
    try:
        sock.setsockopt(SOL_UDP, UDP_SEGMENT, datagram_size)
    except OSError:
        return 1
    return batch


def enable_receive_offload(sock: socket.socket) -> None:
    """Coalesced reads where the kernel offers them; kernel timestamps for jitter; a receive
    buffer that absorbs the receiving host's own scheduling hiccups, so that what is counted
    lost is the path's: past net.core.rmem_max where the kernel lets us (root), else as
    much as it allows. A test's -w, set after this, still decides. Every read says how many
    datagrams the socket had dropped when it queued it (SO_RXQ_OVFL): loss is then told
    apart, the receiving host's from the network's."""
    for level, option in ((SOL_UDP, UDP_GRO), (socket.SOL_SOCKET, SO_TIMESTAMPNS),
                          (socket.SOL_SOCKET, SO_RXQ_OVFL)):
        with contextlib.suppress(OSError):
            sock.setsockopt(level, option, 1)
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
    with contextlib.suppress(OSError):  # EPERM without CAP_NET_ADMIN
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, FORCED_RECEIVE_BUFFER)


def read_ancillary(ancillary: list[Any], count: int) -> tuple[int, float, int]:
    """From one read's ancillary data: the size of each datagram in it (UDP_GRO; else the
    read is one datagram), the kernel's arrival time (else now), wall clock, and the
    socket's count of drops when it queued it (SO_RXQ_OVFL; the kernel says nothing
    until the first)."""
    segment = count
    arrival = None
    drops = 0
    for level, kind, data in ancillary:
        if kind == SO_TIMESTAMPNS and level == socket.SOL_SOCKET:
            seconds, nanoseconds = _TIMESPEC.unpack_from(data)
            arrival = seconds + nanoseconds * 1e-9
        elif kind == UDP_GRO and level == SOL_UDP:
            segment = _INT.unpack_from(data)[0] or count
        elif kind == SO_RXQ_OVFL and level == socket.SOL_SOCKET:
            drops = _UINT.unpack_from(data)[0]
    return segment, arrival if arrival is not None else time.time(), drops


def open_connected(family: int, local: tuple | None, remote: tuple[Any, ...],
                   reuse_address: bool = False, device: str | None = None,
                   flowlabel: int = 0) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_DGRAM)
    tcp.bind_device(sock, device)
    try:
        remote = tcp.set_flow_label(sock, remote, flowlabel)
        if reuse_address:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if local is not None:
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind(local)
        sock.connect(remote)
    except BaseException:
        sock.close()
        raise
    return sock


# <linux/in.h>, <linux/in6.h>: path MTU discovery, and the MTU a connected socket found
IP_MTU_DISCOVER, IP_PMTUDISC_DO, IP_MTU = 10, 2, 14
IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO = 23, 2
IP_UDP_HEADERS = 28  # what IPv4 and UDP add to a datagram's payload


def forbid_fragments(sock: socket.socket) -> None:
    """--dont-fragment: a datagram larger than the path's MTU is refused (EMSGSIZE) rather
    than split into IP fragments."""
    sock.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
    if sock.family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO)


def path_mtu(sock: socket.socket) -> int | None:
    try:
        return sock.getsockopt(socket.IPPROTO_IP, IP_MTU)
    except OSError:
        return None


GREETING_WAIT = 0.2  # seconds before a greeting is sent again, doubling up to ...
GREETING_WAIT_MAX = 1.0
GREETING_SECONDS = 3.0  # how long to greet a server that gives no other sign of life
GREETING_SECONDS_ALIVE = 30.0  # ... and one whose control connection stays open


def open_greeted(host: str, port: int, family: int, local: str | None, greeting: bytes,
                 answers: tuple[bytes, ...], receiving: bool, window: int | None,
                 local_port: int = 0, dont_fragment: bool = False,
                 control: socket.socket | None = None, tos: int = 0,
                 device: str | None = None, flowlabel: int = 0,
                 options: ClientOptions | None = None) -> socket.socket:
    """A UDP socket connected to the server's port (from `local_port`, or any), once the
    server answered `greeting` (sent again after GREETING_WAIT, doubling to
    GREETING_WAIT_MAX, for GREETING_SECONDS) with one of `answers`. With the test's
    `control` connection: for as long as it stays open and silent (GREETING_SECONDS_ALIVE
    at most), since a lost answer or a starved server is no reason to give up; and at once
    when it has something to read (the server's next message, or its close, which the
    caller reads: a server that sends it has every stream it needs). `options`: the
    client's, whose data socket options it takes before the first greeting."""
    try:
        infos = socket.getaddrinfo(host, port, family, socket.SOCK_DGRAM)
    except socket.gaierror:
        raise SimpleperfError(f"cannot resolve server name '{host}'") from None
    remote_family, _, _, _, remote = infos[0]
    try:
        sock = open_connected(remote_family, (local or "", local_port)
                              if local or local_port else None, remote, device=device,
                              flowlabel=flowlabel)
    except OSError as error:
        raise SimpleperfError(f"cannot open a UDP socket from port {local_port}: "
                              f"{(error.strerror or str(error)).lower()}") from None
    try:
        if options is not None:
            socket_options.apply(sock, options, "udp")
        if tos:  # the greeting too: a DiffServ class sees the whole flow
            tcp.set_tos(sock, tos)
        if dont_fragment:
            forbid_fragments(sock)
        if receiving:
            enable_receive_offload(sock)
        if window:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, window)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, window)
        began = time.monotonic()
        limit = GREETING_SECONDS_ALIVE if control is not None else GREETING_SECONDS
        wait, sent = GREETING_WAIT, 0
        watched = [sock] if control is None else [sock, control]
        while time.monotonic() - began < limit:
            sock.send(greeting)
            sent += 1
            deadline = min(time.monotonic() + wait, began + limit)
            while (remaining := deadline - time.monotonic()) > 0:
                readable, _, _ = select.select(watched, [], [], remaining)
                if control is not None and control in readable:
                    return sock
                if sock in readable and sock.recv(2048) in answers:
                    return sock
            wait = min(GREETING_WAIT_MAX, 2 * wait)
        raise SimpleperfError(
            f"no answer on UDP port {port} of {host}: {sent} greetings over "
            f"{time.monotonic() - began:.0f} s went unanswered"
            + (" while the server's control connection stayed open" if control is not None
               else "") + " (a firewall dropping UDP?)")
    except ConnectionRefusedError:
        sock.close()
        raise SimpleperfError(f"UDP port {port} of {host} is closed") from None
    except BaseException:
        sock.close()
        raise


def greet_server(options: ClientOptions, number: int, greeting: bytes,
                 answers: tuple[bytes, ...], receiving: bool, control: socket.socket
                 ) -> socket.socket:
    """Stream `number`'s socket to the server of a client's options, once greeted
    (open_greeted, watching the test's control connection)."""
    return open_greeted(options.host, options.port, options.family, options.local, greeting,
                        answers, receiving, options.test.window,
                        local_port=tcp.stream_port(options, number),
                        dont_fragment=options.dont_fragment, control=control, tos=options.test.tos,
                        device=options.bind_dev, flowlabel=options.flowlabel, options=options)


class Pacer:
    """Spreads sending evenly at `rate` bits/s: it says how many units are due now, and
    sleeps until the next one is. A sender that fell behind catches up at most
    CATCH_UP_SECONDS' worth at once, so there is never a burst of a whole interval."""

    TICK_SECONDS = 0.001
    CATCH_UP_SECONDS = 0.01

    def __init__(self, rate: float, unit_bytes: int, start: float) -> None:
        self.per_second = rate / 8 / unit_bytes
        self.start = start
        self.done = 0

    def due(self, now: float) -> int:
        owed = int((now - self.start) * self.per_second) - self.done
        limit = max(1, int(self.per_second * self.CATCH_UP_SECONDS))
        if owed > limit:  # forget what could not be sent in time instead of bursting it
            self.done += owed - limit
            owed = limit
        return owed

    def wait(self, now: float) -> None:
        next_due = self.start + (self.done + 1) / self.per_second
        time.sleep(max(0.0, min(next_due - now, 0.05)))


class _IOVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]


class _MsgHdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32),
                ("iov", ctypes.POINTER(_IOVec)), ("iovlen", ctypes.c_size_t),
                ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]


class _MMsgHdr(ctypes.Structure):
    _fields_ = [("header", _MsgHdr), ("length", ctypes.c_uint)]


MSG_WAITFORONE = 0x10000
_CMSG_HEADER = struct.Struct("Qii")  # cmsg_len, cmsg_level, cmsg_type (64-bit Linux)
_TIMESTAMP_ONLY = struct.Struct("Qiiqq")  # that header, then a struct timespec
_SIZE = struct.Struct("Q")


class BatchReceiver:
    """Many datagrams per system call (Linux recvmmsg, through ctypes from the standard
    library): a sender that does not segment (iperf3 3.12) sends one datagram per packet,
    and one Python call per datagram would cap the receiver near 2 Gbit/s.

    receive() returns how many messages arrived; then `message(i)` gives (offset into
    `buffer`, bytes, size of each datagram in it, arrival time on the wall clock, the
    socket's drops when it queued it)."""

    SLOT = 65536
    CONTROL = 128

    def __init__(self, sock: socket.socket, count: int = 64) -> None:
        self.sock = sock
        self.count = count
        self.buffer = aligned(self.SLOT * count)
        self._data = (ctypes.c_char * len(self.buffer)).from_buffer(self.buffer)
        self._control = (ctypes.c_char * (self.CONTROL * count))()
        self._control_view = memoryview(self._control).cast("B")
        self._iovecs = (_IOVec * count)()
        self._messages = (_MMsgHdr * count)()
        base = ctypes.addressof(self._data)
        control = ctypes.addressof(self._control)
        for i in range(count):
            self._iovecs[i].base = base + i * self.SLOT
            self._iovecs[i].length = self.SLOT
            header = self._messages[i].header
            header.iov = ctypes.pointer(self._iovecs[i])
            header.iovlen = 1
            header.control = control + i * self.CONTROL
            header.controllen = self.CONTROL
        self._pristine = bytes(memoryview(self._messages).cast("B"))
        self._view = memoryview(self._messages).cast("B")
        self._size = ctypes.sizeof(_MMsgHdr)
        self._length_at = _MMsgHdr.length.offset
        self._controllen_at = _MsgHdr.controllen.offset
        self._fd = sock.fileno()

    @staticmethod
    def available() -> bool:
        return _recvmmsg is not None

    def receive(self) -> int:
        """Block until at least one datagram (or the socket's receive timeout: then raise
        BlockingIOError); return how many were read."""
        assert _recvmmsg is not None, "available() said no"
        ctypes.memmove(self._messages, self._pristine, len(self._pristine))
        got = _recvmmsg(self._fd, self._messages, self.count, MSG_WAITFORONE, None)
        if got < 0:
            error = ctypes.get_errno()
            if error in (errno.EAGAIN, errno.EINTR):
                raise BlockingIOError(error, os.strerror(error))
            raise OSError(error, os.strerror(error))
        return got

    def message(self, index: int) -> tuple[int, int, int, float, int]:
        base = index * self._size
        length = _UINT.unpack_from(self._view, base + self._length_at)[0]
        controllen = _SIZE.unpack_from(self._view, base + self._controllen_at)[0]
        control = self._control_view
        offset = index * self.CONTROL
        if controllen == _TIMESTAMP_ONLY.size:  # the usual case: one timestamp, no GRO
            _, level, kind, seconds, nanoseconds = _TIMESTAMP_ONLY.unpack_from(control, offset)
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                return index * self.SLOT, length, length, seconds + nanoseconds * 1e-9, 0
        segment, arrival, drops = length, None, 0
        end = offset + min(controllen, self.CONTROL)
        while offset + _CMSG_HEADER.size <= end:
            cmsg_len, level, kind = _CMSG_HEADER.unpack_from(control, offset)
            data = offset + _CMSG_HEADER.size
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                seconds, nanoseconds = _TIMESPEC.unpack_from(control, data)
                arrival = seconds + nanoseconds * 1e-9
            elif level == SOL_UDP and kind == UDP_GRO:
                segment = _INT.unpack_from(control, data)[0] or length
            elif level == socket.SOL_SOCKET and kind == SO_RXQ_OVFL:
                drops = _UINT.unpack_from(control, data)[0]
            if cmsg_len < _CMSG_HEADER.size:
                break
            offset += (cmsg_len + 7) & ~7
        return (index * self.SLOT, length, segment, arrival if arrival else time.time(),
                drops)


def _load_recvmmsg():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        function = libc.recvmmsg
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_int
    function.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int,
                         ctypes.c_void_p]
    return function


_recvmmsg = _load_recvmmsg() if sys.platform.startswith("linux") else None


def open_shared_listener(family: int, address: tuple[Any, ...],
                         v6_only: bool, device: str | None = None) -> socket.socket | None:
    """UDP on a TCP listener's address and port, for the same address families; None when
    the port is taken (TCP tests still work; UDP tests will be refused)."""
    sock = socket.socket(family, socket.SOCK_DGRAM)
    tcp.bind_device(sock, device)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, int(v6_only))
        sock.bind(address[:2])
    except OSError:
        sock.close()
        return None
    tcp.set_wake_up(sock)
    return sock
