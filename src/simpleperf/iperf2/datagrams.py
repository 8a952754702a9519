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

from ..delays import FrameAccount, binning_of
from ..description.testspec import TestSpec
from ..engine import udp_receive
from ..engine.frames import FrameClock, send_datagram
from ..engine.pacing import wait_until
from ..engine.records import Stream
from ..errors import ProtocolError, SimpleperfError
from ..protocol import iperf2
from ..stats import UdpReceiveAccount
from ..transport import compiled, udp

RETRY_SECONDS = 0.01  # iperf2's own client: the last datagram again every 10 ms ...
REPORT_SECONDS = 2.0  # ... for 2 s
REPORT_TRIES = 10  # the final report, sent again while the sender keeps ending (iperf2's)
QUIET_SECONDS = 0.25  # ... until it has been quiet this long


class ReceiverGone(SimpleperfError):
    """The receiver's port closed after our last datagram: iperf2's client receiving a
    -R test leaves once it has it, without a report."""


def _last_datagram(stream: Stream, length: int = 0) -> tuple[bytearray, int]:
    """Our last datagram (its number to be written negative) and its number; it counts at
    both ends, as iperf2's client counts it. `length`: its size (else our header's)."""
    size = length or (len(stream.payload) + iperf2.DATAGRAM.size if stream.payload else 64)
    datagram = bytearray(size)
    payload = stream.payload[:size - iperf2.DATAGRAM.size]
    datagram[iperf2.DATAGRAM.size:iperf2.DATAGRAM.size + len(payload)] = payload
    number = stream.packets_sent + 1
    stream.packets_sent, stream.num_bytes = number, stream.num_bytes + size
    return datagram, number


def send_last(stream: Stream, length: int) -> None:
    """The last datagram (`length` bytes, as the others), once and no report awaited:
    iperf2's ending without its final exchange (--no-udp-fin, which --full-duplex
    implies)."""
    datagram, number = _last_datagram(stream, length)
    datagram[:iperf2.DATAGRAM.size] = iperf2.datagram_header(-number, time.time())
    if _allowed(stream, len(datagram)):
        with contextlib.suppress(BlockingIOError):
            stream.sock.send(datagram)


def _allowed(stream: Stream, size: int, spent: int = 0) -> bool:
    """Whether `size` more bytes may go to the stream's peer after the stream's own and
    `spent` of its endings (an unproven peer's allowance: engine/unproven.py)."""
    return stream.allowance is None or \
        stream.num_bytes + spent + size <= stream.allowance()


def send_frames(stream: Stream, spec: TestSpec, start: float, deadline: float | None,
                stop: threading.Event) -> None:
    """--isochronous to an iperf2 server, as 2.1.8's client sends it: the header alone in
    the first datagram, then each frame (engine.frames' clock and sizes) as datagrams of
    at most -l bytes back to back (iperf2.frame_parts), each saying its frame and the
    bytes left of it."""
    length = max(spec.length, iperf2.FRAME_DATAGRAM)
    buffer = bytearray(length)
    buffer[iperf2.DATAGRAM.size:iperf2.DATAGRAM.size + len(stream.payload)] = stream.payload
    clock = FrameClock(spec, start)
    wait_until(start, stop)
    stream.first = time.monotonic()
    number, previous = 1, 0
    # frame n is due (n - 1) periods after the first's slot, which iperf2 times it from
    first_frame = start + time.time() - time.monotonic()
    _send(stream.sock, buffer, number, time.time())  # the header, no frame yet
    stream.num_bytes = length
    while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
        if spec.num_bytes is not None and stream.num_bytes >= spec.num_bytes:
            break
        drawn = clock.next_size(time.monotonic(), stop)
        if drawn is None:
            continue
        size, parts = iperf2.frame_parts(drawn, length)
        frame, left = clock.slot, size
        for part in parts:
            iperf2.stamp_frame(buffer, clock.period, first_frame, previous, frame, size, left)
            number += 1
            _send(stream.sock, memoryview(buffer)[:part], number, time.time())
            stream.num_bytes += part
            left -= part
        previous = frame
        stream.packets_sent, stream.frames_sent = number, clock.sent
    stream.frames_slipped = clock.slipped
    stream.payload = bytes(buffer[iperf2.DATAGRAM.size:iperf2.FRAME_DATAGRAM])  # the last's
    stream.last = time.monotonic()


def _send(sock: socket.socket, datagram: Any, number: int, now: float) -> None:
    datagram[:iperf2.DATAGRAM.size] = iperf2.datagram_header(number, now)
    send_datagram(sock, datagram)


def ask_report(stream: Stream, receiver: str = "server") -> iperf2.ServerReport:
    """Send the last datagram (its number negative) until the receiver's report comes
    (`receiver`: which end of iperf2's receives, for the line that says it did not)."""
    sock = stream.sock
    datagram, number = _last_datagram(stream)
    deadline = time.monotonic() + REPORT_SECONDS
    spent = 0  # bytes of endings sent
    while time.monotonic() < deadline:
        datagram[:iperf2.DATAGRAM.size] = iperf2.datagram_header(-number, time.time())
        if _allowed(stream, len(datagram), spent):  # else only listen: an unproven peer's
            spent += len(datagram)
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
            self.frames = stream.frames = FrameAccount(binning_of(spec))
        clock = time.monotonic
        try:
            received = 0
            for data, arrival in self.first:
                received += self._account(account, data, 0, len(data), len(data), arrival)
            udp_receive.progress(stream, received, clock)
            fastpath = compiled.module()
            # (the compiled path reads iperf2's 64-bit numbers: 2.0's 32-bit ones here)
            if fastpath is not None and stream.delays is None and self.frames is None and \
                    self.wide:
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
        """udp_receive's compiled loop, told iperf2's layout; the row with the client's
        last datagram (a negative number, which the loop leaves) in Python."""
        reader = udp_receive.CompiledReader(stream.sock, iperf2.LAYOUT, fastpath)
        buffer, slot, table = reader.buffer, reader.SLOT, reader.table
        clock = time.monotonic
        received = stream.num_bytes
        while not stop.is_set() and self.last is None:
            try:
                got, index, moved = reader.read(account)
            except ConnectionRefusedError:
                continue
            if not got and not moved:
                if self._quiet_too_long(stream, clock()):
                    return
                continue
            received += moved
            if index < got:
                ending = self._first_ending(buffer, slot, table, index, got)
                received += udp_receive.account_read(account, iperf2.LAYOUT, buffer, slot,
                                                     table, ending, fastpath, index)
                if ending < got:
                    length, segment, arrival, _ = udp_receive.ROW.unpack_from(
                        table, ending * udp_receive.ROW.size)
                    received += self._account(account, buffer, ending * slot, length,
                                              segment, arrival)
            udp_receive.progress(stream, received, clock)

    def _first_ending(self, buffer: Any, slot: int, table: bytearray, start: int, got: int
                      ) -> int:
        """The first of rows start..got-1 whose last datagram's number is negative (the
        client's last); got when none is. The last comes after every other, so a row's last
        datagram tells."""
        row = udp_receive.ROW
        for index in range(start, got):
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
