"""UDP streams: paced sending with GSO, receiving (udp_receive.py), and what a UDP stream
reports (datagrams, loss, jitter, reordering)."""

from __future__ import annotations

import errno
import os
import threading
import time
from typing import Any

from ..description.testspec import TestSpec
from ..errors import SimpleperfError
from ..transport import compiled, stamping, udp
from ..transport.buffers import aligned
from . import frames, l4s, udp_pace, udp_receive
from .pacing import wait_until
from .records import IntervalRecord, Snapshot, Stream

QUIET_SECONDS = 0.25  # a drained receiver: nothing new for this long
ENDS_WHEN_QUIET = True  # UDP has no end of stream: a receiver ends after a quiet time
LOSSLESS = False  # a datagram lost on the way never arrives


def send(stream: Stream, spec: TestSpec, start: float, deadline: float | None,
         stop: threading.Event) -> None:
    if spec.isochronous and stream.allowance is None:
        frames.send(stream, spec, start, deadline, stop)
        return
    if spec.l4s:
        l4s.send(stream, spec, start, deadline, stop)
        return
    size = spec.length
    batch = udp.enable_segmentation(stream.sock, size) \
        if spec.rate == 0 or spec.rate > 50e6 else 1
    buffer = aligned(size * batch, spec.repeating_payload)
    if stream.payload:  # what every datagram carries after its header (iperf2's test)
        at = stream.header.size
        for offset in range(0, size * batch, size):
            buffer[offset + at:offset + at + len(stream.payload)] = stream.payload
    wait_until(start, stop)
    stream.first = time.monotonic()
    fastpath = compiled.module()
    try:
        if spec.rate == 0 and fastpath is not None and stamping.compiled_layout(stream.header) \
                and stream.allowance is None:
            _send_compiled(stream, spec, buffer, batch, deadline, stop, fastpath)
        else:
            _send_paced(stream, spec, buffer, batch, deadline, stop)
    except ConnectionRefusedError:
        raise SimpleperfError(udp.PORT_CLOSED) from None
    except OSError as error:
        if error.errno not in (errno.EMSGSIZE, errno.EINVAL) or \
                (mtu := udp.path_mtu(stream.sock)) is None or size + udp.IP_UDP_HEADERS <= mtu:
            raise
        raise SimpleperfError(f"a {size}-byte datagram does not fit the path's MTU of "
                              f"{mtu} bytes, and --dont-fragment forbids splitting it: "
                              f"-l {mtu - udp.IP_UDP_HEADERS} or less fits") from None
    finally:
        stream.last = time.monotonic()


def _send_paced(stream: Stream, spec: TestSpec, buffer: memoryview, batch: int,
                deadline: float | None, stop: threading.Event) -> None:
    """Batch by batch from Python, each batch as many datagrams as are due at the rate."""
    size = spec.length
    stamp = stamping.stamper(stream.header, size, stream.key)
    amount = spec.num_bytes
    clock = time.monotonic
    wall = time.time
    pacer = udp.Pacer(spec.rate, size, clock()) if spec.rate > 0 else None
    pace = udp_pace.ReceiverPace(size) if stream.native and pacer is None else None
    number = 0
    send = stream.sock.send
    while not stop.is_set():
        now = clock()
        if deadline is not None and now >= deadline:
            break
        count = batch
        if amount is not None:
            count = min(count, -(-(amount - stream.num_bytes) // size))
            if count <= 0:
                break
        if stream.allowance is not None:
            count = min(count, (stream.allowance() - stream.num_bytes) // size)
            if count <= 0:  # an unproven peer: nothing more until it sends more
                time.sleep(udp_pace.WAIT_SECONDS)
                continue
        if pace is not None:
            count = _paced_limit(stream, pace, count, batch)
            if not count:
                continue
            pace.sent(count, now)
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
        number += count
        if pacer is not None:
            pacer.done += count
        stream.packets_sent = number
        stream.num_bytes = number * size


def _paced_limit(stream: Stream, pace: udp_pace.ReceiverPace, limit: int, batch: int) -> int:
    """How many datagrams an unlimited sender may send now, as the receiver's feedback
    allows: whole batches, or 0 after waiting for the next (the caller looks again)."""
    udp_pace.hear(stream.sock, pace, stream.key)
    stream.paced = pace.cuts
    whole = min(batch, limit)
    due = pace.due(time.monotonic(), limit if pace.rate is None
                   else min(limit, udp_pace.PACED_BATCHES * batch))
    if due < whole:
        pace.wait(whole)
        return 0
    return due - due % whole


BATCHES_PER_CALL = 64  # how often (in batches) the compiled sender returns to see a stop


def _send_compiled(stream: Stream, spec: TestSpec, buffer: memoryview, batch: int,
                   deadline: float | None, stop: threading.Event, fastpath) -> None:
    """At unlimited rate: the send loop in C (headers, clock, send), returning to Python every
    BATCHES_PER_CALL batches to count and to see a stop."""
    size = spec.length
    send_batches = fastpath.send_batches
    fd = stream.sock.fileno()
    width = stamping.number_bytes(stream.header)
    until = -1.0 if deadline is None else deadline
    pace = udp_pace.ReceiverPace(size) if stream.native else None
    number = 0
    while not stop.is_set():
        limit = batch * BATCHES_PER_CALL
        if spec.num_bytes is not None:
            limit = min(limit, -(-(spec.num_bytes - stream.num_bytes) // size))
            if limit <= 0:
                break
        if pace is not None:
            limit = _paced_limit(stream, pace, limit, batch)
            if not limit:
                if deadline is not None and time.monotonic() >= deadline:
                    break
                continue
        sent, error = send_batches(fd, buffer, size, batch, limit, number + 1, width,
                                   stream.key, until)
        if pace is not None:
            pace.sent(sent, time.monotonic())
        number += sent
        stream.packets_sent = number
        stream.num_bytes = number * size
        if error and error != errno.EAGAIN:
            raise OSError(error, os.strerror(error))
        if deadline is not None and time.monotonic() >= deadline:
            break


def receive(stream: Stream, spec: TestSpec, stop: threading.Event) -> None:
    if spec.isochronous:
        frames.receive(stream, spec, stop)
        return
    if spec.l4s:
        l4s.receive(stream, stop)
        return
    if stream.native and spec.rate == 0:
        stream.teller = udp_pace.Teller(stream.sock, stream.key)
    udp_receive.receive(stream, stop)


def snapshot(stream: Stream) -> Snapshot:
    if stream.sending:
        return Snapshot(stream.num_bytes, stream.packets_sent)
    account = stream.account
    if account is None:
        return Snapshot(stream.num_bytes)
    return Snapshot(stream.num_bytes, account.packets, account.settled_lost,
                    account.out_of_order, dropped=account.host_dropped)


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
    if stream.sending and stream.native:
        entry["paced"] = stream.paced
    if not stream.sending and stream.account is not None:
        entry["lost"] = final.lost - base.lost
        entry["out_of_order"] = final.out_of_order - base.out_of_order
        entry["forged"] = stream.account.bad
        entry["dropped"] = final.dropped - base.dropped
        entry["jitter_ms"] = stream.account.jitter * 1000
        growth = stream.account.queue_growth
        if growth is not None:
            entry["queue_growth_ms"] = growth * 1000
        if stream.ce_marked is not None:
            entry["ce_marked"] = stream.ce_marked


def drained(stream: Stream, quiet: float) -> bool:
    return quiet >= QUIET_SECONDS


def acknowledged(stream: Stream) -> bool:
    return True  # nothing is acknowledged, and nothing sent again
