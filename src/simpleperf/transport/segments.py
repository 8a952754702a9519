"""When each TCP segment of one connection reached this host, as a capture on it would say:
a packet socket (AF_PACKET) with a filter for the connection's own packets, each stamped on
arrival (SO_TIMESTAMPING's software stamp), kept to its headers and the first bytes of its
data. A packet the kernel did not stamp (one that came before it turned its stamping on) has
no arrival: SO_TIMESTAMPNS would give it the time of the read, taken for the arrival.

A read of the TCP socket cannot say this: the kernel merges segments that wait in its queues
(behind a lost one, or for a slow reader) and stamps the merged buffer with its newest
segment's arrival. Taking a packet socket needs CAP_NET_RAW (root, as the lab runs); without
it `open` gives None and the caller falls back on stamped reads (tcp.Arrivals).

Sequence numbers here are the peer's, as on the wire; `Segments` keeps the first arrival of
each segment by its end, and says when one came after data beyond it (a resent segment: the
first copy was lost), so that its delay is not taken for the path's.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import socket
import struct
from collections import deque

from . import compiled
from .tcp import (
    SO_TIMESTAMPING,
    SOF_TIMESTAMPING_RX_SOFTWARE,
    SOF_TIMESTAMPING_SOFTWARE,
    TIMESTAMPING_CONTROL,
    software_stamp,
)

AF_PACKET = getattr(socket, "AF_PACKET", 17)
ETH_P_IP = 0x0800
ETH_P_IPV6 = 0x86DD
SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23  # Linux 4.20: a packet this host sends is not seen again on lo
SO_ATTACH_FILTER = 26
SO_RCVBUFFORCE = 33
RECEIVE_BUFFER = 16 * 1024 * 1024
_IPV4 = struct.Struct("!BxH")  # version and header length, total length
_IPV6 = struct.Struct("!4xH")  # payload length
_TCP = struct.Struct("!4xI4xB")  # sequence number, data offset
HEAD_BYTES = 64  # the first data bytes kept: a write's header (protocol.native.WRITE_HEADER)
SNAP = 60 + 60 + HEAD_BYTES  # the largest IPv4 and TCP headers, then HEAD_BYTES of data
KEPT = 65536  # segments remembered by their end
_MASK = 0xFFFFFFFF

# classic BPF (linux/filter.h): opcodes used here
_LD_W_ABS, _LD_H_ABS, _LD_B_ABS = 0x20, 0x28, 0x30
_LDX_B_MSH = 0xB1
_LD_H_IND = 0x48
_JEQ_K, _JSET_K = 0x15, 0x45
_RET_K = 0x06
_INSTRUCTION = struct.Struct("HBBI")


class _Program:
    """A filter that accepts (keeping SNAP bytes) only when every test holds."""

    def __init__(self) -> None:
        self.code: list[tuple[int, int, int, int]] = []
        self.refusals: list[int] = []  # tests whose false branch jumps to the refusal

    def load(self, opcode: int, k: int) -> None:
        self.code.append((opcode, 0, 0, k))

    def require(self, opcode: int, k: int) -> None:
        """Go on if the test holds (jeq: equal; jset: no bit of k set), else refuse."""
        self.refusals.append(len(self.code))
        self.code.append((opcode, 0, 0, k))

    def bytes(self) -> bytes:
        accept = len(self.code)
        refuse = accept + 1
        code = list(self.code)
        for at in self.refusals:
            opcode, _, _, k = code[at]
            away = refuse - at - 1
            code[at] = (opcode, away, 0, k) if opcode == _JSET_K else (opcode, 0, away, k)
        code += [(_RET_K, 0, 0, SNAP), (_RET_K, 0, 0, 0)]
        return b"".join(_INSTRUCTION.pack(*instruction) for instruction in code)


def program(family: int, peer: tuple, local: tuple) -> bytes:
    """The filter for TCP segments from `peer` to `local` (address, port), offsets from the
    network header (a cooked packet socket's view)."""
    filter_ = _Program()
    if family == socket.AF_INET:
        filter_.load(_LD_B_ABS, 9)
        filter_.require(_JEQ_K, socket.IPPROTO_TCP)
        filter_.load(_LD_H_ABS, 6)
        filter_.require(_JSET_K, 0x1FFF)  # no fragment but the first
        for offset, address in ((12, peer[0]), (16, local[0])):
            filter_.load(_LD_W_ABS, offset)
            filter_.require(_JEQ_K, int(ipaddress.IPv4Address(address)))
        filter_.code.append((_LDX_B_MSH, 0, 0, 0))  # x = the IPv4 header's length
        ports = 0
    else:
        filter_.load(_LD_B_ABS, 6)
        filter_.require(_JEQ_K, socket.IPPROTO_TCP)  # no extension header
        for offset, address in ((8, peer[0]), (24, local[0])):
            packed = ipaddress.IPv6Address(address.split("%")[0]).packed
            for word in range(4):
                filter_.load(_LD_W_ABS, offset + 4 * word)
                filter_.require(_JEQ_K, int.from_bytes(packed[4 * word:4 * word + 4], "big"))
        filter_.code.append((0x01, 0, 0, 40))  # ldx #40: the fixed IPv6 header
        ports = 0
    filter_.load(_LD_H_IND, ports)
    filter_.require(_JEQ_K, peer[1])
    filter_.load(_LD_H_IND, ports + 2)
    filter_.require(_JEQ_K, local[1])
    return filter_.bytes()


_REFUSE_ALL = _INSTRUCTION.pack(_RET_K, 0, 0, 0)


def _attach(tap: socket.socket, code: bytes) -> None:
    count = len(code) // _INSTRUCTION.size
    holder = ctypes.create_string_buffer(code, len(code))  # the kernel copies it
    tap.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER,
                   struct.pack("HL", count, ctypes.addressof(holder)))


def _discard(tap: socket.socket) -> None:
    """Empty a non-blocking socket's queue."""
    while True:
        try:
            tap.recv(1)
        except OSError:
            return


def _wire_view(sock: socket.socket) -> tuple[int, tuple, tuple]:
    """The family and (address, port) pairs the packets carry: IPv4 for an IPv6 socket
    whose peer is an IPv4-mapped address."""
    peer, local = sock.getpeername(), sock.getsockname()
    if sock.family == socket.AF_INET6:
        mapped = ipaddress.IPv6Address(peer[0].split("%")[0]).ipv4_mapped
        if mapped is not None:
            local_mapped = ipaddress.IPv6Address(local[0]).ipv4_mapped
            return socket.AF_INET, (str(mapped), peer[1]), (str(local_mapped), local[1])
    return sock.family, peer, local


class Segments:
    """The peer's data segments on this connection, read as they come (`drain`)."""

    def __init__(self, sock: socket.socket) -> None:
        family, peer, local = _wire_view(sock)
        protocol = ETH_P_IP if family == socket.AF_INET else ETH_P_IPV6
        tap = socket.socket(AF_PACKET, socket.SOCK_DGRAM, socket.htons(protocol))
        try:
            # the socket takes in every packet until its filter is attached: refuse all,
            # throw away what came before, then take the connection's own (as libpcap does)
            _attach(tap, _REFUSE_ALL)
            tap.setblocking(False)
            _discard(tap)
            _attach(tap, program(family, peer, local))
            with contextlib.suppress(OSError):
                tap.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            with contextlib.suppress(OSError):
                tap.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RECEIVE_BUFFER)
            tap.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING,
                           SOF_TIMESTAMPING_RX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE)
        except BaseException:
            tap.close()
            raise
        self.tap = tap
        self.family = family
        self.view = memoryview(bytearray(SNAP))
        # the compiled path reads up to MESSAGES_PER_RECEIVE packets a system call into
        # `batch`, their lengths and stamps into `table`
        self.fast = compiled.module()
        self.batch = bytearray(SNAP * compiled.MESSAGES_PER_RECEIVE) if self.fast else None
        self.table = (bytearray(compiled.RECEIVE_ROW.size * compiled.MESSAGES_PER_RECEIVE)
                      if self.fast else None)
        # end -> first arrival (None: the kernel did not stamp it), resent
        self.ends: dict[int, tuple[float | None, bool]] = {}
        self.order: deque[int] = deque()
        self.highest: int | None = None  # the highest end seen
        # a write (its header's first two fields: send time and number; any segment's first
        # bytes are read as a header, and two fields of payload matching a write's are not
        # met by chance) -> the sequence number of its first byte
        self.starts: dict[tuple[int, ...], int] = {}
        self.start_order: deque[tuple[int, ...]] = deque()

    @classmethod
    def open(cls, sock: socket.socket) -> Segments | None:
        """Segments of `sock`'s peer, or None without the right to capture (or a packet
        socket, or an address)."""
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return None
        try:
            return cls(sock)
        except (OSError, ValueError):
            return None

    def close(self) -> None:
        self.tap.close()

    def drain(self, header: struct.Struct | None = None) -> None:
        """Take in every segment captured so far; with `header`, note which write begins a
        segment (a write's header at its first byte)."""
        if self.fast is not None and self.batch is not None:
            self._drain_batches(header)
            return
        receive = self.tap.recvmsg_into
        view = self.view
        while True:
            try:
                count, ancillary, _, _ = receive([view], TIMESTAMPING_CONTROL)
            except OSError:  # nothing waiting (BlockingIOError), or the socket is gone
                return
            self._segment(view[:count], software_stamp(ancillary), header)

    def _drain_batches(self, header: struct.Struct | None) -> None:
        """drain() through the compiled path: a system call per MESSAGES_PER_RECEIVE
        packets, not one per packet and one more to find the queue empty."""
        assert self.fast is not None and self.batch is not None and self.table is not None
        read, fd, batch, table = self.fast.receive, self.tap.fileno(), self.batch, self.table
        view = memoryview(batch)
        row = compiled.RECEIVE_ROW
        most = compiled.MESSAGES_PER_RECEIVE
        while True:
            try:
                got = read(fd, batch, SNAP, most, table, False)  # unstamped: NaN
            except OSError:  # the socket is gone
                return
            for index in range(got):
                length, _, stamp, _ = row.unpack_from(table, index * row.size)
                self._segment(view[index * SNAP:index * SNAP + length],
                              stamp if stamp == stamp else None, header)
            if got < most:
                return

    def _segment(self, packet: memoryview, stamp: float | None,
                 header: struct.Struct | None) -> None:
        size = len(packet)
        if self.family == socket.AF_INET:
            if size < 40:
                return
            first, total = _IPV4.unpack_from(packet)
            network = (first & 0x0F) * 4
        else:
            if size < 60:
                return
            network = 40
            total = 40 + _IPV6.unpack_from(packet)[0]
        if size < network + 20 or total == 0:
            return  # a header cut short, or a packet past 64 KiB (BIG TCP) that says no length
        sequence, offset = _TCP.unpack_from(packet, network)
        data = network + (offset >> 4) * 4
        length = total - data
        if length <= 0:
            return
        end = (sequence + length) & _MASK
        if header is not None and size >= data + header.size:
            self._note_start(header.unpack_from(packet, data)[:2], sequence)
        ends = self.ends
        if end in ends:
            return  # a copy of what came before: the first arrival stands
        highest = self.highest
        resent = highest is not None and not 0 < (end - highest) & _MASK < 0x80000000
        if not resent:
            self.highest = end
        ends[end] = (stamp, resent)
        order = self.order
        order.append(end)
        if len(order) > KEPT:
            ends.pop(order.popleft(), None)

    def _note_start(self, write: tuple[int, ...], sequence: int) -> None:
        if write not in self.starts:
            self.starts[write] = sequence
            self.start_order.append(write)
            if len(self.start_order) > KEPT:
                self.starts.pop(self.start_order.popleft(), None)

    def start_of(self, write: tuple[int, ...]) -> int | None:
        """The sequence number of the first byte of `write` (its header's first two fields),
        if a segment began with it."""
        return self.starts.get(write)

    def arrival(self, end: int) -> tuple[float | None, bool] | None:
        """(first arrival, whether it was resent) of the segment ending before sequence
        number `end`, if it was seen; its arrival is None if the kernel did not stamp it."""
        return self.ends.get(end & _MASK)

