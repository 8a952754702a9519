"""TCP streams: the send and receive loops, and what a TCP stream reports (TCP_INFO)."""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from ..description.testspec import TestSpec
from ..description.transports import Transport
from ..errors import SimpleperfError
from ..transport import buffers, compiled, socket_options, tcp, tcpinfo
from . import timed_writes
from .pacing import WriteTurns, wait_until
from .records import IntervalRecord, Snapshot, Stream
from .unsent import UnsentLimit, bulk_limit

QUIET_SECONDS = 0.02  # a drained receiver: nothing unread, nothing new for this long
ENDS_WHEN_QUIET = False  # a TCP receiver ends at the sender's end of stream
LOSSLESS = True  # every byte written arrives (or the connection breaks)
LOW_WATER = 128 * 1024  # a fast low_water stream's reads wait for this much (SO_RCVLOWAT)
# ... once a read slice (compiled.SLICE_SECONDS) brings this much: 4 Gbit/s, where
# LOW_WATER is a quarter of a millisecond's data
LOW_WATER_FROM = 2 * LOW_WATER
LOW_WATER_WAIT = 0.001  # ... and for no longer than this (a slowing stream's reads)


def send(stream: Stream, spec: TestSpec, start: float, deadline: float | None,
         stop: threading.Event) -> None:
    if spec.timed and stream.file is None:
        timed_writes.send(stream, spec, start, deadline, stop)
        return
    sock = stream.sock
    payload = buffers.aligned(spec.length, spec.repeating_payload)
    sender: buffers.FileSender | buffers.DiskFileSender | None = None
    amount = spec.num_bytes
    if stream.file is not None:  # -F: the file's bytes, and no more than it holds
        sender = buffers.DiskFileSender(stream.file, sock)
        size = os.fstat(stream.file.fileno()).st_size
        amount = size if amount is None else min(amount, size)
    elif spec.zerocopy:
        sender = buffers.FileSender(payload, sock)
    # --tcp-write-prefetch sets the unsent limit once; else 50 ms of the rate (engine/unsent.py)
    unsent = None if spec.write_prefetch else bulk_limit()
    if unsent is not None:
        socket_options.set_unsent_limit(sock, unsent.limit)
    wait_until(start, stop)
    stream.first = time.monotonic()
    fastpath = compiled.module()
    try:
        if fastpath is not None and spec.rate == 0 and stream.file is None:
            source = sender.source if isinstance(sender, buffers.FileSender) else -1
            _send_compiled(stream, payload, source, amount, deadline, stop, fastpath,
                           spec.whole_segments, unsent)
        else:
            _send_turns(stream, spec, payload, sender, amount, deadline, stop, unsent)
    finally:
        stream.last = time.monotonic()
        if sender is not None:
            sender.close()
    if not stop.is_set():
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)  # the receiver's end of stream marks the end


def _send_turns(stream: Stream, spec: TestSpec, payload: memoryview,
                sender: buffers.FileSender | buffers.DiskFileSender | None, amount: int | None,
                deadline: float | None, stop: threading.Event,
                unsent: UnsentLimit | None) -> None:
    """Write by write from Python, each when WriteTurns says (paced with -b)."""
    assert stream.first is not None
    send: Callable[[memoryview], int] = sender.send if sender is not None \
        else stream.sock.send
    turns = WriteTurns(stream.sock, spec, deadline, amount, stream.first)
    clock = time.monotonic
    sent = stream.num_bytes  # what went before the payload counts too (iperf2's header)
    while not stop.is_set():
        now = clock()
        turn = turns.take(now, sent)
        if turn is None:
            break
        if unsent is not None and unsent.due(now) and not follow_unsent(
                stream.sock, unsent, now):
            unsent = None
        if not turn:
            continue
        chunk = payload if amount is None or amount - sent >= len(payload) \
            else payload[:amount - sent]
        try:  # noqa: SIM105 - hot loop: a context manager per write costs throughput
            sent += send(chunk)
        except BlockingIOError:  # the wake-up timer: nothing could be written for a while
            pass
        stream.num_bytes = sent


def _send_compiled(stream: Stream, payload: memoryview, source: int, amount: int | None,
                   deadline: float | None, stop: threading.Event, fastpath,
                   whole_segments: bool, unsent: UnsentLimit | None) -> None:
    """Unpaced: the write loop in C (send, or with -Z sendfile from `source`), each write
    the payload or, without -l, as many whole segments as it holds (looked up again every
    slice: the segment size grows as the peer's window opens), and no more than `unsent`'s
    limit."""
    send = fastpath.tcp_send
    sock = stream.sock
    fd = sock.fileno()
    until = -1.0 if deadline is None else deadline
    sent = stream.num_bytes  # what went before the payload counts too (iperf2's header)
    while not stop.is_set():
        limit = -1 if amount is None else amount - sent
        now = time.monotonic()
        if limit == 0 or (deadline is not None and now >= deadline):
            break
        if unsent is not None and unsent.due(now) and not follow_unsent(sock, unsent, now):
            unsent = None
        # A write no longer than the unsent limit: one longer waits in send() for the path
        # to take the rest (at 2 Mbit/s a 128 KiB write is half a second past -t).
        size = len(payload) if unsent is None else min(len(payload), unsent.limit)
        length = tcp.write_length(sock, size, whole_segments)
        moved, error = send(fd, payload, length, limit, until, compiled.SLICE_SECONDS,
                            source)
        sent += moved
        stream.num_bytes = sent
        if error:
            raise OSError(error, os.strerror(error))


def follow_unsent(sock: socket.socket, unsent: UnsentLimit, now: float) -> bool:
    """A reading of what the peer has acknowledged (TCP_INFO), and the socket's unsent limit
    when that moved it; False where the kernel does not say (a failed connection, whose
    write says how): then stop asking."""
    acked = tcpinfo.bytes_acked(sock)
    if acked is None:
        return False
    if unsent.update(now, acked):
        socket_options.set_unsent_limit(sock, unsent.limit)
    return True


def receive(stream: Stream, spec: TestSpec, stop: threading.Event) -> None:
    buffer = buffers.tcp_read_buffer(spec.length)
    writes = stream.write_times or (
        timed_writes.WriteTimes(stream.write_delays, stream.frames, stream.delays)
        if stream.write_delays is not None and spec.timed else None)
    # --tcp-quickack: a setsockopt before every read, as iperf2's, in _receive's loop
    fastpath = None if spec.quickack else compiled.module()
    if fastpath is not None and stream.file is None and writes is None:
        _receive_compiled(stream, buffer, stop, fastpath)
        return
    timed = writes if isinstance(writes, timed_writes.WriteTimes) else None  # not iperf2's
    if timed is not None and timed.path is not None:
        # the path's delays: when each write's last byte reached this host
        timed.time_arrivals(timed_writes.arrival_source(stream.sock))
    try:
        if fastpath is not None and stream.file is None and writes is not None and not (
                timed is not None and isinstance(timed.source, timed_writes.StampedReads)):
            _receive_reads_compiled(stream, buffer, stop, writes, fastpath)
        else:
            _receive(stream, buffer, stop, writes, spec.quickack)
    finally:
        if timed is not None:
            timed.source.close()


def _receive(stream: Stream, buffer: memoryview, stop: threading.Event, writes: Any,
             quickack: bool = False) -> None:
    """The read loop; `writes`: what follows the timed writes in the stream (WriteTimes, or
    iperf2's bursts), if any; `quickack`: TCP_QUICKACK before every read."""
    recv_into = stream.sock.recv_into
    acknowledge = functools.partial(stream.sock.setsockopt, socket.IPPROTO_TCP,
                                    socket.TCP_QUICKACK, 1) if quickack else None
    clock = time.monotonic
    received = stream.num_bytes  # what a server read to tell the protocol counts too
    keep = stream.file.write if stream.file is not None else None  # -F: what arrives
    wall = time.time
    source = getattr(writes, "source", None)
    stamped = source.reader if isinstance(source, timed_writes.StampedReads) else None
    whole = len(buffer)
    stamp: float | None = None
    while not stop.is_set():
        if acknowledge is not None:
            acknowledge()
        try:
            if stamped is None:
                count = recv_into(buffer)
            else:
                assert writes is not None
                count, stamp = stamped.read(buffer[:writes.wanted(whole)])
        except BlockingIOError:
            continue
        if count == 0:
            return
        if keep is not None:
            keep(buffer[:count])
        if stamped is not None:
            writes.feed(buffer[:count], wall(), stamp)
        elif writes is not None:
            writes.feed(buffer[:count], wall())
        if stream.first is None:
            stream.first = clock()
        received += count
        stream.num_bytes = received
        stream.last = clock()


READS_PER_CALL = 256


def _receive_reads_compiled(stream: Stream, buffer: memoryview, stop: threading.Event,
                            writes: Any, fastpath) -> None:
    """_receive's loop for timed writes (not stamped reads) with the reads in C: each read's
    bytes are followed as _receive follows them, at that read's time, after a slice of
    reads (a GIL handover a slice, not a read)."""
    read = fastpath.tcp_receive_reads
    fd = stream.sock.fileno()
    row_size = compiled.TCP_READ_ROW.size
    table = bytearray(row_size * READS_PER_CALL)
    received = stream.num_bytes  # what a server read to tell the protocol counts too
    feed = writes.feed
    row = compiled.TCP_READ_ROW.unpack_from
    while not stop.is_set():
        reads, ended, error = read(fd, buffer, 0.0 if stream.first is None
                                   else compiled.SLICE_SECONDS, table, READS_PER_CALL)
        start = 0
        for index in range(reads):  # what came before a failure counts
            end, wall, monotonic = row(table, index * row_size)
            feed(buffer[start:end], wall)
            if stream.first is None:
                stream.first = monotonic
            received += end - start
            stream.num_bytes = received
            stream.last = monotonic
            start = end
        if error:
            raise OSError(error, os.strerror(error))
        if ended:
            return


def _receive_compiled(stream: Stream, buffer: memoryview, stop: threading.Event,
                      fastpath) -> None:
    """The read loop in C; the first read alone, so that the stream's start is its time.
    A `low_water` stream past LOW_WATER_FROM bytes a slice (4 Gbit/s) reads LOW_WATER
    bytes a wake-up at least (SO_RCVLOWAT: a quarter of a millisecond's data at most) or
    what came within LOW_WATER_WAIT, and a byte again below that rate."""
    read = fastpath.tcp_receive
    fd = stream.sock.fileno()
    received = stream.num_bytes  # what a server read to tell the protocol counts too
    waiting_for = 1
    while not stop.is_set():
        count, ended, error, _, last = read(
            fd, buffer, 0.0 if stream.first is None else compiled.SLICE_SECONDS)
        if stream.low_water and not ended and (
                wanted := LOW_WATER if count >= LOW_WATER_FROM else 1) != waiting_for:
            stream.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, wanted)
            tcp.set_wake_up(stream.sock, LOW_WATER_WAIT if wanted > 1 else tcp.WAKE_UP_SECONDS)
            waiting_for = wanted
        if count:  # what came before a failure counts
            if stream.first is None:
                stream.first = last
            received += count
            stream.num_bytes = received
            stream.last = last  # when the data came, not when the loop returned
        if error:
            raise OSError(error, os.strerror(error))
        if ended:
            return


def snapshot(stream: Stream) -> Snapshot:
    return Snapshot(stream.num_bytes)


def fill_interval(stream: Stream, record: IntervalRecord, now: Snapshot,
                  before: Snapshot) -> None:
    """The kernel's view for one interval: retransmits, congestion window, RTT."""
    info = tcpinfo.read(stream.sock)
    if info is None:
        return
    now.retransmits = info.total_retrans
    stream.tcp_samples.append(info)
    record.retransmits = now.retransmits - before.retransmits
    record.snd_cwnd = info.snd_cwnd * info.snd_mss
    record.rtt_us, record.rttvar_us = info.rtt_us, info.rttvar_us
    record.snd_wnd, record.pmtu = info.snd_wnd, info.pmtu


def fill_result(stream: Stream, entry: dict[str, Any], final: Snapshot,
                base: Snapshot) -> None:
    samples = stream.tcp_samples
    subflows = tcp.mptcp_subflows(stream.sock)
    if subflows is not None:
        entry["mptcp_subflows"] = subflows
    info = tcpinfo.read(stream.sock)
    if info is not None:
        samples.append(info)
        entry["retransmits"] = info.total_retrans - base.retransmits
        if info.delivered_ce is not None:
            entry["delivered_ce"] = info.delivered_ce
    if samples:
        entry["max_snd_cwnd"] = max(s.snd_cwnd * s.snd_mss for s in samples)
        entry["mean_rtt_us"] = int(sum(s.rtt_us for s in samples) / len(samples))
        entry["min_rtt_us"] = min(s.rtt_us for s in samples)
        entry["max_rtt_us"] = max(s.rtt_us for s in samples)
        windows = [s.snd_wnd for s in samples if s.snd_wnd is not None]
        if windows:
            entry["max_snd_wnd"] = max(windows)


def drained(stream: Stream, quiet: float) -> bool:
    """Nothing unread and nothing new for a moment."""
    try:
        return quiet >= QUIET_SECONDS and tcp.unread_bytes(stream.sock) == 0
    except OSError:
        return True


def acknowledged(stream: Stream) -> bool:
    """The peer has acknowledged every byte written: none can be sent again, so TCP_INFO's
    count of retransmissions is final."""
    try:
        return tcp.unacknowledged_bytes(stream.sock) == 0
    except OSError:
        return True


def apply_options(sock: socket.socket, spec: TestSpec) -> None:
    """MSS, no-delay and the unsent limit on a data connection (window and congestion are set before
    connect or listen, where they must be)."""
    if spec.nodelay:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if spec.write_prefetch:
        socket_options.set_unsent_limit(sock, spec.write_prefetch)
    tcp.set_congestion(sock, spec.congestion)


def attach_file(streams: list[Stream], path: str | None) -> None:
    """-F: the test's one stream sends the file's bytes, or (the server sending) writes
    what arrives into it."""
    if path is None or not streams:
        return
    stream = streams[0]
    try:
        stream.file = open(path, "rb" if stream.sending else "wb")  # noqa: SIM115
    except OSError as error:
        raise SimpleperfError(f"-F/--file {path}: {(error.strerror or str(error)).lower()}"
                              ) from None


# A server's -F file and the test using it: one at a time, or one test's bytes would
# overwrite another's (or be sent while another writes them).
_server_files: dict[str, int] = {}  # path -> id() of the test's open file
_server_files_lock = threading.Lock()


def attach_server_file(path: str | None, transport: Transport, streams: list[Stream]) -> None:
    """A server's -F: a one-stream TCP test's stream sends the file, or fills it (as
    iperf3's server does); tests of more streams, or UDP, run as without it. A test that
    finds another using the file is refused."""
    if path is None or transport.datagrams or len(streams) != 1:
        return
    with _server_files_lock:
        if path in _server_files:
            raise SimpleperfError(f"the server's -F/--file {path} is in use by another test "
                                  "(one at a time)")
        attach_file(streams, path)
        _server_files[path] = id(streams[0].file)


def close_files(streams: list[Stream]) -> None:
    for stream in streams:
        if stream.file is not None:
            with _server_files_lock:
                if _server_files.get(stream.file.name) == id(stream.file):
                    del _server_files[stream.file.name]
            stream.file.close()
