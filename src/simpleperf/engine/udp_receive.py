"""Receiving a UDP stream: every datagram numbered, timed and accounted (loss, reordering,
jitter) at tens of Gbit/s. Three paths give the same account: the compiled one (recvmmsg
and the in-order runs in one C loop, Python called a few thousand times a second;
transport/compiled.py), many datagrams per system call from
Python (recvmmsg through ctypes), and one read at a time where neither exists. A test with
a shared secret checks every datagram's key."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable

from ..protocol.native import AUTH_DATAGRAM_HEADER, DATAGRAM_HEADER
from ..stats import UdpReceiveAccount
from ..transport import compiled, stamping, udp
from ..transport.buffers import aligned
from .records import Stream

ROW = compiled.RECEIVE_ROW
DROPS_AT = struct.Struct("24xq")  # a row's drops alone
BLOCK_PAIR = struct.Struct("dd")  # a queue-growth block the compiled loop closed
MAX_BLOCKS_PER_SLICE = 8192  # room for them: the loop hands over to Python when full
MESSAGES_PER_READ = compiled.MESSAGES_PER_RECEIVE
# A receiver faster than its sender empties the socket and sleeps on it, so the sender's
# next datagram must wake it: the sender's CPU runs that wake-up and is often given the
# woken thread too (at 40 Gbit/s on loopback, 41,000 a second, the sender preempted about
# 700 times a second; on a virtual machine each is an interrupt between processors). After
# a read that emptied a busy socket the receiver rests instead, and the sender finds it
# reading. Busy: at the rate the last read's messages came, REST_MESSAGES or more would
# arrive during the rest; a trickle (a paced test) waits on the socket as before. The rest
# is never longer than the socket needs to fill a REST_BUFFER_SHARE of its buffer at that
# rate. Arrival times are the kernel's, so nothing measured moves.
REST_SECONDS = 0.0003
REST_MESSAGES = 8
REST_BUFFER_SHARE = 4


def receive(stream: Stream, stop: threading.Event) -> None:
    account = stream.account = UdpReceiveAccount(stream.delays)
    fastpath = compiled.module()
    if stream.key is not None:
        _receive_keyed(stream, account, stream.key, stop)
    elif fastpath is not None and stream.delays is None:
        _receive_compiled(stream, account, stop, fastpath)
    elif udp.BatchReceiver.available():
        _receive_udp_batches(stream, account, stop)
    else:
        _receive_one_read_at_a_time(stream, account, stop)


class CompiledReader:
    """recvmmsg and the runs of datagrams in order accounted in one compiled loop: Python is
    called once a slice (compiled.SLICE_SECONDS), or for a message the loop leaves to it
    (rows index..got-1 of the last read, in `table` and `buffer`)."""

    SLOT = udp.BatchReceiver.SLOT

    def __init__(self, sock: socket.socket, header: struct.Struct, fastpath,
                 blocks: int = MAX_BLOCKS_PER_SLICE) -> None:
        self.buffer = aligned(self.SLOT * MESSAGES_PER_READ)
        self.table = bytearray(ROW.size * MESSAGES_PER_READ)
        self._blocks = bytearray(BLOCK_PAIR.size * blocks)
        self._loop, self._read = fastpath.receive_runs, fastpath.receive
        self._fd = sock.fileno()
        self._header_size = header.size
        self._number_bytes = stamping.number_bytes(header)
        self._rest_budget = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) \
            / REST_BUFFER_SHARE

    def read(self, account: UdpReceiveAccount) -> tuple[int, int, int]:
        """One slice: (messages of the last read, the first of them left to the caller,
        bytes accounted). A read that timed out gives got 0."""
        if not account.runs_compilable():  # a far jump waits for its judgement
            return self._read(self._fd, self.buffer, self.SLOT, MESSAGES_PER_READ,
                              self.table), 0, 0
        state, got, index, moved, closed = self._loop(
            self._fd, self.buffer, self.SLOT, MESSAGES_PER_READ, self.table,
            account.run_state(), self._header_size, self._number_bytes, account.BLOCK,
            account.JUMP_LIMIT, account.socket_drops, self._blocks, account.growth.prune_after(),
            compiled.SLICE_SECONDS, REST_SECONDS, self._rest_budget, REST_MESSAGES)
        account.set_run_state(state, list(BLOCK_PAIR.iter_unpack(
            memoryview(self._blocks)[:closed * BLOCK_PAIR.size])))
        return got, index, moved


def _receive_compiled(stream: Stream, account: UdpReceiveAccount, stop: threading.Event,
                      fastpath) -> None:
    header = stream.header
    reader = CompiledReader(stream.sock, header, fastpath)
    clock = time.monotonic
    received = 0
    while not stop.is_set():
        try:
            got, index, moved = reader.read(account)
        except ConnectionRefusedError:
            continue
        if index < got:
            moved += account_read(account, header, reader.buffer, reader.SLOT, reader.table,
                                  got, fastpath, index)
        if moved:
            received += moved
            progress(stream, received, clock)


def account_read(account: UdpReceiveAccount, header: struct.Struct, buffer: memoryview,
                 slot: int, table: bytearray, got: int, fastpath, start: int = 0) -> int:
    """Account messages start..got-1 of one compiled read (rows of `table`, bytes at
    i * slot of `buffer`); returns their bytes. Python sees only a message the C runs
    leave to it: out of order, far ahead, after the socket dropped some, or when the
    account logs delays (the account's rarer paths)."""
    index = start
    received = 0
    for dropped_before in _drops_rose(account, table, start, got):  # usually none
        received += _account_rows(account, header, buffer, slot, table, index,
                                  dropped_before, fastpath)
        length, segment, arrival, drops = ROW.unpack_from(table, dropped_before * ROW.size)
        lost_before = account.host_gap_begins(drops)
        if length >= header.size:
            account_message(account, buffer, dropped_before * slot, length, segment,
                            header.unpack_from, header.size, arrival)
            received += length
        account.host_gap_ends(lost_before)
        index = dropped_before + 1
    return received + _account_rows(account, header, buffer, slot, table, index, got,
                                    fastpath)


def _drops_rose(account: UdpReceiveAccount, table: bytearray, start: int, got: int
                ) -> list[int]:
    """The rows start..got-1 of a read whose message the socket queued after dropping some:
    the last row says whether there are any (the count only grows)."""
    seen = account.socket_drops
    if got <= start or DROPS_AT.unpack_from(table, (got - 1) * ROW.size)[0] <= seen:
        return []
    rose = []
    for index in range(start, got):
        drops = DROPS_AT.unpack_from(table, index * ROW.size)[0]
        if drops > seen:
            rose.append(index)
            seen = drops
    return rose


def _account_rows(account: UdpReceiveAccount, header: struct.Struct, buffer: memoryview,
                  slot: int, table: bytearray, index: int, end: int, fastpath) -> int:
    """Rows index..end-1 of a compiled read: runs in C, the rest in Python."""
    header_size = header.size
    account_runs = fastpath.account_runs
    received = 0
    while index < end:
        if account.runs_compilable():
            state, index, moved, closed = account_runs(
                account.run_state(), buffer, slot, table, index, end, header_size,
                stamping.number_bytes(header), account.BLOCK, account.JUMP_LIMIT,
                account.growth.prune_after())
            account.set_run_state(state, closed)
            received += moved
        if index < end:
            length, segment, arrival, _ = ROW.unpack_from(table, index * ROW.size)
            if length >= header_size:
                account_message(account, buffer, index * slot, length, segment,
                                 header.unpack_from, header_size, arrival)
                received += length
            index += 1
    return received


def _receive_udp_batches(stream: Stream, account: UdpReceiveAccount,
                         stop: threading.Event) -> None:
    """Many datagrams per system call (recvmmsg through ctypes)."""
    receiver = udp.BatchReceiver(stream.sock)
    buffer = receiver.buffer
    header_size = stream.header.size
    unpack_from = stream.header.unpack_from
    message = receiver.message
    clock = time.monotonic
    received = 0
    while not stop.is_set():
        try:
            got = receiver.receive()
        except (BlockingIOError, ConnectionRefusedError):
            continue
        packets: list[tuple[int, float, float]] = []
        for index in range(got):
            base, count, segment, arrival, drops = message(index)
            if count < header_size:
                continue
            if drops > account.socket_drops:  # the socket dropped some before this one
                account.feed_packets(packets)
                packets = []
                lost_before = account.host_gap_begins(drops)
                account_message(account, buffer, base, count, segment, unpack_from,
                                header_size, arrival)
                account.host_gap_ends(lost_before)
            elif segment >= count:
                seconds, micros, number = unpack_from(buffer, base)
                packets.append((number, seconds + micros * 1e-6, arrival))
            else:  # a coalesced read: account what came before it first, in order
                account.feed_packets(packets)
                packets = []
                _account_batch(account, buffer, base, count, segment, unpack_from,
                               header_size, arrival)
            received += count
        account.feed_packets(packets)
        progress(stream, received, clock)


def _receive_one_read_at_a_time(stream: Stream, account: UdpReceiveAccount,
                                stop: threading.Event) -> None:
    buffer = aligned(udp.MAX_GSO_BYTES + 65536)
    buffers = [buffer]
    header = stream.header
    recvmsg_into = stream.sock.recvmsg_into
    clock = time.monotonic
    received = 0
    while not stop.is_set():
        try:
            count, ancillary, _, _ = recvmsg_into(buffers, udp.ANCILLARY_SPACE)
        except (BlockingIOError, ConnectionRefusedError):
            continue
        if count < header.size:
            continue
        segment, arrival, drops = udp.read_ancillary(ancillary, count)
        lost_before = account.host_gap_begins(drops)
        account_message(account, buffer, 0, count, segment, header.unpack_from, header.size,
                         arrival)
        account.host_gap_ends(lost_before)
        received += count
        progress(stream, received, clock)


def _receive_keyed(stream: Stream, account: UdpReceiveAccount, key: bytes,
                   stop: threading.Event) -> None:
    """With a shared secret: every datagram, coalesced or not, must carry the test's key;
    one that does not is counted as bad and nothing else."""
    buffer = aligned(udp.MAX_GSO_BYTES + 65536)
    buffers = [buffer]
    unpack_from = DATAGRAM_HEADER.unpack_from
    key_at, key_end = DATAGRAM_HEADER.size, AUTH_DATAGRAM_HEADER.size
    clock = time.monotonic
    received = 0
    while not stop.is_set():
        try:
            count, ancillary, _, _ = stream.sock.recvmsg_into(buffers, udp.ANCILLARY_SPACE)
        except (BlockingIOError, ConnectionRefusedError):
            continue
        segment, arrival, drops = udp.read_ancillary(ancillary, count)
        step = max(1, min(segment, count))
        lost_before = account.host_gap_begins(drops)
        if _all_keyed(buffer, count, step, key, key_at):  # the usual case, checked in C
            _account_batch(account, buffer, 0, count, step, unpack_from, key_end, arrival)
            moved = count
        else:
            packets, moved = datagrams_of(account, buffer, count, step, DATAGRAM_HEADER,
                                          key, arrival)
            account.feed_packets(packets)
        account.host_gap_ends(lost_before)
        received += moved
        if moved:
            progress(stream, received, clock)


def datagrams_of(account: UdpReceiveAccount, buffer: memoryview, count: int, step: int,
                 header: struct.Struct, key: bytes | None, arrival: float
                 ) -> tuple[list[tuple[int, float, float]], int]:
    """The datagrams of one read of `count` bytes, `step` bytes each (a coalesced run, or
    one): (number, send time, arrival) of each, and their bytes. One too short for the
    header, or without the test's key when it has one, is counted as bad and nothing else."""
    key_at = header.size
    key_end = key_at + (len(key) if key is not None else 0)
    packets = []
    moved = 0
    for offset in range(0, count, step):
        length = min(step, count - offset)
        if length < key_end or (key is not None
                                and buffer[offset + key_at:offset + key_end] != key):
            account.bad += 1
            continue
        seconds, micros, number = header.unpack_from(buffer, offset)
        packets.append((number, seconds + micros * 1e-6, arrival))
        moved += length
    return packets, moved


def _all_keyed(buffer: memoryview, count: int, step: int, key: bytes, key_at: int) -> bool:
    """Whether every datagram of a read (one, or a coalesced run of `step`-byte ones)
    carries `key`: byte by byte of the key, one strided slice each, without a Python loop
    per datagram."""
    datagrams = -(-count // step)
    last = count - (datagrams - 1) * step
    if last < key_at + len(key):
        return False
    return all(buffer[key_at + index:count:step] == bytes((byte,)) * datagrams
               for index, byte in enumerate(key))


def progress(stream: Stream, received: int, clock: Callable[[], float]) -> None:
    if stream.first is None:
        stream.first = clock()
    stream.num_bytes = received
    now = stream.last = clock()
    if stream.teller is not None and stream.account is not None:
        stream.teller.tell_if_due(now, received, stream.account.socket_drops)


def account_message(account: UdpReceiveAccount, buffer: memoryview, base: int, count: int,
                     segment: int, unpack_from, header_size: int, arrival: float) -> None:
    """One read of `count` bytes at `base`: a datagram, or a coalesced run of `segment`-byte
    ones (UDP_GRO)."""
    if segment >= count:
        seconds, micros, number = unpack_from(buffer, base)
        account.feed(number, seconds + micros * 1e-6, arrival)
    else:
        _account_batch(account, buffer, base, count, segment, unpack_from, header_size,
                       arrival)


def _account_batch(account: UdpReceiveAccount, buffer: memoryview, base: int, count: int,
                   segment: int, unpack_from, header_size: int, arrival: float) -> None:
    """A coalesced read (UDP_GRO) of datagrams of `segment` bytes from `base`."""
    last_offset = base + (count - header_size) // segment * segment
    seconds, micros, number = unpack_from(buffer, base)
    last_seconds, last_micros, last_number = unpack_from(buffer, last_offset)
    run = (last_offset - base) // segment + 1
    if last_number == number + run - 1:  # one send: its datagrams in order, stamped in order
        account.feed_run(number, run, seconds + micros * 1e-6, arrival,
                         last_seconds + last_micros * 1e-6)
        return
    for offset in range(base, last_offset + 1, segment):
        seconds, micros, number = unpack_from(buffer, offset)
        account.feed(number, seconds + micros * 1e-6, arrival)
