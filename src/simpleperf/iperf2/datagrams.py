"""iperf2's UDP tests at either end of ours: the receiver (UdpReceiver: datagrams
accounted until the sender's last, a negative number; then send_report, iperf2's report
back) and the sender's end (ask_report: the last datagram again until that report comes,
as iperf2's own sender ends). Our server receives for iperf2's clients and sends for their
-R; our client sends to iperf2's servers and receives their -R."""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from typing import Any

from ..delays import FrameAccount
from ..engine import udp_receive
from ..engine.records import Stream
from ..errors import ProtocolError, SimpleperfError
from ..protocol import iperf2
from ..stats import UdpReceiveAccount
from ..testspec import TestSpec
from ..transport import compiled, udp
from ..transport.buffers import aligned

RETRY_SECONDS = 0.01  # iperf2's own client: the last datagram again every 10 ms ...
REPORT_SECONDS = 2.0  # ... for 2 s
REPORT_TRIES = 10  # the final report, sent again while the sender keeps ending (iperf2's)
QUIET_SECONDS = 0.25  # ... until it has been quiet this long


class ReceiverGone(SimpleperfError):
    """The receiver's port closed after our last datagram: iperf2's client receiving a
    -R test leaves once it has it, without a report."""


def ask_report(stream: Stream, receiver: str = "server") -> iperf2.ServerReport:
    """Send the last datagram (its number negative) until the receiver's report comes
    (`receiver`: which end of iperf2's receives, for the line that says it did not)."""
    sock = stream.sock
    size = max(len(stream.payload) + iperf2.DATAGRAM.size, 1) if stream.payload else 64
    datagram = bytearray(size)
    datagram[iperf2.DATAGRAM.size:] = stream.payload[:size - iperf2.DATAGRAM.size]
    number = stream.packets_sent + 1
    deadline = time.monotonic() + REPORT_SECONDS
    # The first of them counts at both ends, as iperf2's client counts it
    stream.packets_sent, stream.num_bytes = number, stream.num_bytes + size
    while time.monotonic() < deadline:
        datagram[:iperf2.DATAGRAM.size] = iperf2.datagram_header(-number, time.time())
        with contextlib.suppress(BlockingIOError):
            sock.send(datagram)
        readable, _, _ = select.select([sock], [], [], RETRY_SECONDS)
        if not readable:
            number += 1  # iperf2 numbers each ending anew
            continue
        try:
            answer = sock.recv(65536)
        except ConnectionRefusedError:
            raise ReceiverGone(f"the iperf2 {receiver}'s port is closed (ICMP port "
                               "unreachable)") from None
        except BlockingIOError:
            continue
        try:
            return iperf2.parse_report(answer)
        except ProtocolError:
            continue  # not the report: another ending's echo, or noise
    hint = " (is it a UDP server: iperf -s -u?)" if receiver == "server" else ""
    raise SimpleperfError(f"the iperf2 {receiver} sent no report within {REPORT_SECONDS:g} "
                          f"s of the test's end{hint}")


class UdpReceiver:
    """The body of an iperf2 UDP stream's thread: datagrams accounted until the client's
    last (a negative number), whose header `last` keeps for the report."""

    def __init__(self, first: list[tuple[bytes, float]], wide: bool, idle: float,
                 isochronous: bool = False) -> None:
        self.first = first  # what the listener read before the socket was connected
        self.wide = wide
        self.idle = idle
        self.isochronous = isochronous  # its datagrams say their frame: frames judged
        self.frames: FrameAccount | None = None
        self.last: bytes | None = None

    def run(self, stream: Stream, spec: TestSpec, start: float, stop: threading.Event
            ) -> None:
        account = stream.account = UdpReceiveAccount(stream.delays)
        if self.isochronous:
            self.frames = stream.frames = FrameAccount(spec.binning)
        clock = time.monotonic
        try:
            received = 0
            for data, arrival in self.first:
                received += self._account(account, data, 0, len(data), len(data), arrival)
            udp_receive.progress(stream, received, clock)
            fastpath = compiled.module()
            if fastpath is not None and stream.delays is None and self.frames is None:
                self._read_compiled(stream, account, stop, fastpath)
            else:
                self._read_batches(stream, account, stop)
        finally:
            stream.done.set()

    def _quiet_too_long(self, stream: Stream, now: float) -> bool:
        if now - (stream.last or now) > self.idle:
            stream.error = f"no datagram for {self.idle:g} s"
            return True
        return False

    def _read_compiled(self, stream: Stream, account: UdpReceiveAccount,
                       stop: threading.Event, fastpath: Any) -> None:
        """recvmmsg in C, the runs in order accounted in C (udp_receive's compiled path,
        told iperf2's layout); the row with the client's last datagram in Python."""
        slot, count = udp.BatchReceiver.SLOT, udp_receive.MESSAGES_PER_READ
        buffer = aligned(slot * count)
        table = bytearray(udp_receive.ROW.size * count)
        read, fd, clock = fastpath.receive, stream.sock.fileno(), time.monotonic
        received = stream.num_bytes
        while not stop.is_set() and self.last is None:
            try:
                got = read(fd, buffer, slot, count, table)
            except ConnectionRefusedError:
                continue
            if not got:
                if self._quiet_too_long(stream, clock()):
                    return
                continue
            ending = self._first_ending(buffer, slot, table, got)
            received += udp_receive.account_read(account, iperf2.LAYOUT, buffer, slot, table,
                                                 ending, fastpath)
            if ending < got:
                length, segment, arrival, _ = udp_receive.ROW.unpack_from(
                    table, ending * udp_receive.ROW.size)
                received += self._account(account, buffer, ending * slot, length, segment,
                                          arrival)
            udp_receive.progress(stream, received, clock)

    def _first_ending(self, buffer: Any, slot: int, table: bytearray, got: int) -> int:
        """The first row whose last datagram's number is negative (the client's last); got
        when none is. The last comes after every other, so a row's last datagram tells."""
        row = udp_receive.ROW
        for index in range(got):
            length, segment = row.unpack_from(table, index * row.size)[:2]
            at = index * slot + (length - 1) // max(segment, 1) * max(segment, 1)
            if length >= iperf2.DATAGRAM.size and buffer[at + (12 if self.wide else 0)] >= 0x80:
                return index
        return got

    def _frame_at_end(self, last: Any) -> None:
        """The client's last datagram repeats the frame fields of the one before it (no
        part of a frame itself): where that one left bytes of its frame unsent, the client
        stopped inside the frame, which is then not counted lost."""
        frame = iperf2.frame_of(last, 0) if self.frames is not None else None
        if frame is not None and self.frames is not None:
            number, size, begins = frame
            if size - begins > len(last):
                self.frames.cut_by_sender(number)

    def _read_batches(self, stream: Stream, account: UdpReceiveAccount,
                      stop: threading.Event) -> None:
        """recvmmsg from Python, every datagram accounted in Python (the delays logged)."""
        receiver = udp.BatchReceiver(stream.sock)
        buffer, message = receiver.buffer, receiver.message
        received, clock = stream.num_bytes, time.monotonic
        while not stop.is_set() and self.last is None:
            try:
                got = receiver.receive()
            except (BlockingIOError, ConnectionRefusedError):
                if self._quiet_too_long(stream, clock()):
                    return
                continue
            for index in range(got):
                base, count, segment, arrival, _ = message(index)
                received += self._account(account, buffer, base, count, segment, arrival)
            udp_receive.progress(stream, received, clock)

    def _account(self, account: UdpReceiveAccount, buffer: Any, base: int, count: int,
                 segment: int, arrival: float) -> int:
        """One read: a datagram, or a run of `segment`-byte ones; the bytes that count."""
        moved = 0
        packets = []
        step = max(1, min(segment, count))
        for offset in range(base, base + count, step):
            size = min(step, base + count - offset)
            if size < iperf2.DATAGRAM.size or self.last is not None:
                continue
            number, sent = iperf2.sequence(buffer, offset, self.wide)
            if number < 0:  # the client's last: it counts, and ends the test
                number = -number
                self.last = bytes(buffer[offset:offset + iperf2.DATAGRAM.size])
                self._frame_at_end(buffer[offset:offset + size])
            elif self.frames is not None:
                frame = iperf2.frame_of(buffer[offset:offset + size], 0)
                if frame is not None:
                    self.frames.feed(*frame, sent, arrival, size)
            packets.append((number, sent, arrival))
            moved += size
        account.feed_packets(packets)
        return moved


def send_report(sock: socket.socket, stream: Stream, last: bytes) -> None:
    """iperf2's answer to the client's last datagram, again while the client keeps ending
    (the answer was lost), until it is quiet."""
    account = stream.account
    assert account is not None
    seconds = (stream.last or 0.0) - (stream.first or 0.0)
    delays = None
    if stream.delays is not None:
        total = stream.delays.total()
        if total.count:
            m2 = max(0.0, total.squares - total.total * total.total / total.count)
            delays = (total.minimum, total.maximum, total.total, total.mean, m2, total.count)
    report = iperf2.ServerReport(stream.num_bytes, max(seconds, 0.0), account.lost,
                                 account.out_of_order, account.highest, account.jitter,
                                 delays)
    answer = iperf2.encode_report(report, last)
    sock.settimeout(QUIET_SECONDS)
    for _ in range(REPORT_TRIES):
        try:
            sock.send(answer)
            sock.recv(65536)  # more endings: the client has not heard us yet
        except OSError:  # quiet (a timeout) or gone
            return
