"""Data streams of a native test: one thread each, moving bytes as fast as allowed and
keeping counters the interval sampler reads. Used by the client and the server alike."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

from .errors import SimpleperfError
from .protocol.native import DATAGRAM_HEADER, TestSpec
from .stats import UdpReceiveAccount
from .transport import tcp, udp

SO_MAX_PACING_RATE = 47


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

    @property
    def role(self) -> str:
        return "sender" if self.sending else "receiver"


def run_stream(stream: Stream, spec: TestSpec, start: float, stop: threading.Event) -> None:
    """Thread body: send or receive until the test's end, the peer's end, or `stop`."""
    try:
        if stream.sending:
            deadline = None if spec.duration is None else start + spec.omit + spec.duration
            if stream.protocol == "tcp":
                _send_tcp(stream, spec, start, deadline, stop)
            else:
                _send_udp(stream, spec, start, deadline, stop)
        elif stream.protocol == "tcp":
            _receive_tcp(stream, spec, stop)
        else:
            _receive_udp(stream, spec, stop)
    except SimpleperfError as error:
        stream.error = str(error)
    except OSError as error:
        if not stop.is_set():
            stream.error = f"stream {stream.label}: " + (error.strerror or str(error)).lower()
    finally:
        stream.done.set()


def _wait_until(moment: float, stop: threading.Event) -> None:
    delay = moment - time.monotonic()
    if delay > 0:
        stop.wait(delay)


def _send_tcp(stream: Stream, spec: TestSpec, start: float, deadline: float | None,
              stop: threading.Event) -> None:
    sock = stream.sock
    payload = memoryview(bytes(spec.length))
    amount = spec.num_bytes
    pacer = None
    _wait_until(start, stop)
    stream.first = time.monotonic()
    if spec.rate > 0:
        with contextlib.suppress(OSError):  # TCP paces itself at this rate, without fq too
            sock.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE,
                            min(int(spec.rate / 8), 2**32 - 1))
        pacer = udp.Pacer(spec.rate, spec.length, stream.first)
    send = sock.send
    clock = time.monotonic
    sent = 0
    while not stop.is_set():
        now = clock()
        if deadline is not None and now >= deadline:
            break
        if amount is not None and sent >= amount:
            break
        if pacer is not None:
            if pacer.due(now) <= 0:
                pacer.wait(now)
                continue
            pacer.done += 1
        chunk = payload if amount is None or amount - sent >= len(payload) \
            else payload[:amount - sent]
        try:  # noqa: SIM105 - hot loop: a context manager per write costs throughput
            sent += send(chunk)
        except BlockingIOError:  # the wake-up timer: nothing could be written for a while
            pass
        stream.num_bytes = sent
    stream.last = clock()
    if not stop.is_set():
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)  # the receiver's end of stream marks the end


def _receive_tcp(stream: Stream, spec: TestSpec, stop: threading.Event) -> None:
    buffer = memoryview(bytearray(max(spec.length, 256 * 1024)))
    recv_into = stream.sock.recv_into
    clock = time.monotonic
    received = 0
    while not stop.is_set():
        try:
            count = recv_into(buffer)
        except BlockingIOError:
            continue
        if count == 0:
            return
        if stream.first is None:
            stream.first = clock()
        received += count
        stream.num_bytes = received
        stream.last = clock()


def _send_udp(stream: Stream, spec: TestSpec, start: float, deadline: float | None,
              stop: threading.Event) -> None:
    sock = stream.sock
    size = spec.length
    batch = udp.enable_segmentation(sock, size) if spec.rate == 0 or spec.rate > 50e6 else 1
    buffer = bytearray(size * batch)
    view = memoryview(buffer)
    pack_into = stream.header.pack_into
    offsets = range(0, size * batch, size)
    amount = spec.num_bytes
    _wait_until(start, stop)
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
        stamp = wall()
        seconds = int(stamp)
        micros = int((stamp - seconds) * 1e6)
        for offset in offsets[:count]:
            number += 1
            pack_into(buffer, offset, seconds, micros, number)
        try:
            send(view[:count * size])
        except BlockingIOError:
            number -= count
            continue
        except ConnectionRefusedError:
            raise SimpleperfError("the receiver's UDP port is closed (ICMP port "
                                  "unreachable)") from None
        if pacer is not None:
            pacer.done += count
        stream.packets_sent = number
        stream.num_bytes = number * size
    stream.last = clock()


def _receive_udp(stream: Stream, spec: TestSpec, stop: threading.Event) -> None:
    sock = stream.sock
    account = stream.account = UdpReceiveAccount()
    buffer = bytearray(udp.MAX_GSO_BYTES + 65536)
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


def _account_batch(account: UdpReceiveAccount, buffer: bytearray, base: int, count: int,
                   segment: int, unpack_from, header_size: int, arrival: float) -> None:
    """A coalesced read (UDP_GRO) of datagrams of `segment` bytes from `base`."""
    last_offset = base + (count - header_size) // segment * segment
    seconds, micros, number = unpack_from(buffer, base)
    last_seconds, last_micros, last_number = unpack_from(buffer, last_offset)
    run = (last_offset - base) // segment + 1
    if last_number == number + run - 1 and (last_seconds, last_micros) == (seconds, micros):
        account.feed_run(number, run, seconds + micros * 1e-6, arrival)  # one send, at once
        return
    for offset in range(base, last_offset + 1, segment):
        seconds, micros, number = unpack_from(buffer, offset)
        account.feed(number, seconds + micros * 1e-6, arrival)


def apply_tcp_options(sock: socket.socket, spec: TestSpec) -> None:
    """MSS and no-delay on a data connection (window and congestion are set before
    connect or listen, where they must be)."""
    if spec.nodelay:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    tcp.set_congestion(sock, spec.congestion)
