"""UDP streams: paced sending with GSO, receiving with GRO and recvmmsg, and what a UDP
stream reports (datagrams, loss, jitter, reordering)."""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import SimpleperfError
from ..protocol.native import AUTH_DATAGRAM_HEADER, DATAGRAM_HEADER, TestSpec
from ..stats import UdpReceiveAccount
from ..transport import stamping, udp
from ..transport.buffers import aligned
from . import frames
from .pacing import wait_until
from .records import IntervalRecord, Snapshot, Stream

QUIET_SECONDS = 0.25  # a drained receiver: nothing new for this long
ENDS_WHEN_QUIET = True  # UDP has no end of stream: a receiver ends after a quiet time


def send(stream: Stream, spec: TestSpec, start: float, deadline: float | None,
              stop: threading.Event) -> None:
    if spec.isochronous:
        frames.send(stream, spec, start, deadline, stop)
        return
    sock = stream.sock
    size = spec.length
    batch = udp.enable_segmentation(sock, size) if spec.rate == 0 or spec.rate > 50e6 else 1
    buffer = aligned(size * batch, spec.repeating_payload)
    stamp = stamping.stamper(stream.header, size, stream.key)
    amount = spec.num_bytes
    wait_until(start, stop)
    clock = time.monotonic
    wall = time.time
    stream.first = clock()
    pacer = udp.Pacer(spec.rate, size, stream.first) if spec.rate > 0 else None
    number = 0
    send = sock.send
    while not stop.is_set():
        now = clock()
        if deadline is not None and now >= deadline:
            break
        count = batch
        if amount is not None:
            count = min(count, -(-(amount - stream.num_bytes) // size))
            if count <= 0:
                break
        if pacer is not None:
            due = pacer.due(now)
            if due <= 0:
                pacer.wait(now)
                continue
            count = min(count, due)
        now_wall = wall()
        seconds = int(now_wall)
        stamp(buffer, count, seconds, int((now_wall - seconds) * 1e6), number + 1)
        try:
            send(buffer[:count * size])
        except BlockingIOError:
            continue
        except ConnectionRefusedError:
            raise SimpleperfError(udp.PORT_CLOSED) from None
        except OSError as error:
            if error.errno not in (errno.EMSGSIZE, errno.EINVAL) or \
                    (mtu := udp.path_mtu(sock)) is None or size + udp.IP_UDP_HEADERS <= mtu:
                raise
            raise SimpleperfError(f"a {size}-byte datagram does not fit the path's MTU of "
                                  f"{mtu} bytes, and --dont-fragment forbids splitting it: "
                                  f"-l {mtu - udp.IP_UDP_HEADERS} or less fits") from None
        number += count
        if pacer is not None:
            pacer.done += count
        stream.packets_sent = number
        stream.num_bytes = number * size
    stream.last = clock()


def receive(stream: Stream, spec: TestSpec, stop: threading.Event) -> None:
    if spec.isochronous:
        frames.receive(stream, spec, stop)
        return
    sock = stream.sock
    account = stream.account = UdpReceiveAccount(stream.delays)
    if stream.key is not None:
        _receive_keyed(stream, account, stream.key, stop)
        return
    buffer = aligned(udp.MAX_GSO_BYTES + 65536)
    buffers = [buffer]
    header = stream.header
    unpack_from = header.unpack_from
    recvmsg_into = sock.recvmsg_into
    read_ancillary = udp.read_ancillary
    feed = account.feed
    clock = time.monotonic
    received = 0
    if udp.BatchReceiver.available():
        _receive_udp_batches(stream, account, stop)
        return
    # Hot loop: one read may be one datagram (iperf3 peers at a few hundred thousand a
    # second) or a coalesced batch (UDP_GRO), so the single datagram takes the short path.
    while not stop.is_set():
        try:
            count, ancillary, _, _ = recvmsg_into(buffers, udp.ANCILLARY_SPACE)
        except (BlockingIOError, ConnectionRefusedError):
            continue
        if count < header.size:
            continue
        segment, arrival = read_ancillary(ancillary, count)
        if segment >= count:
            seconds, micros, number = unpack_from(buffer, 0)
            feed(number, seconds + micros * 1e-6, arrival)
        else:
            _account_batch(account, buffer, 0, count, segment, unpack_from, header.size,
                           arrival)
        if stream.first is None:
            stream.first = clock()
        received += count
        stream.num_bytes = received
        stream.last = clock()


def _receive_udp_batches(stream: Stream, account: UdpReceiveAccount,
                         stop: threading.Event) -> None:
    """The same as the loop above, many datagrams per system call (recvmmsg)."""
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
        packets = []
        for index in range(got):
            base, count, segment, arrival = message(index)
            if count < header_size:
                continue
            if segment >= count:
                seconds, micros, number = unpack_from(buffer, base)
                packets.append((number, seconds + micros * 1e-6, arrival))
            else:  # a coalesced read: account what came before it first, in order
                account.feed_packets(packets)
                packets = []
                _account_batch(account, buffer, base, count, segment, unpack_from,
                               header_size, arrival)
            received += count
        account.feed_packets(packets)
        if stream.first is None:
            stream.first = clock()
        stream.num_bytes = received
        stream.last = clock()


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
        segment, arrival = udp.read_ancillary(ancillary, count)
        step = max(1, min(segment, count))
        if _all_keyed(buffer, count, step, key, key_at):  # the usual case, checked in C
            _account_batch(account, buffer, 0, count, step, unpack_from, key_end, arrival)
            received += count
            _progress(stream, received, clock)
            continue
        packets = []
        for offset in range(0, count, step):
            length = min(step, count - offset)
            if length < key_end or buffer[offset + key_at:offset + key_end] != key:
                account.bad += 1
                continue
            seconds, micros, number = unpack_from(buffer, offset)
            packets.append((number, seconds + micros * 1e-6, arrival))
            received += length
        account.feed_packets(packets)
        if packets:
            _progress(stream, received, clock)


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


def _progress(stream: Stream, received: int, clock: Callable[[], float]) -> None:
    if stream.first is None:
        stream.first = clock()
    stream.num_bytes = received
    stream.last = clock()


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


def snapshot(stream: Stream) -> Snapshot:
    if stream.sending:
        return Snapshot(stream.num_bytes, stream.packets_sent)
    account = stream.account
    if account is None:
        return Snapshot(stream.num_bytes)
    return Snapshot(stream.num_bytes, account.packets, account.settled_lost,
                    account.out_of_order)


def fill_interval(stream: Stream, record: IntervalRecord, now: Snapshot,
                  before: Snapshot) -> None:
    record.packets = now.packets - before.packets
    if not stream.sending and stream.account is not None:
        record.lost = now.lost - before.lost
        record.out_of_order = now.out_of_order - before.out_of_order
        record.jitter_ms = stream.account.jitter * 1000


def fill_result(stream: Stream, entry: dict[str, Any], final: Snapshot,
                base: Snapshot) -> None:
    entry["packets"] = final.packets - base.packets
    if not stream.sending and stream.account is not None:
        entry["lost"] = final.lost - base.lost
        entry["out_of_order"] = final.out_of_order - base.out_of_order
        entry["jitter_ms"] = stream.account.jitter * 1000
        growth = stream.account.queue_growth
        if growth is not None:
            entry["queue_growth_ms"] = growth * 1000


def drained(stream: Stream, quiet: float) -> bool:
    return quiet >= QUIET_SECONDS
