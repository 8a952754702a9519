"""Waiting for a stream's start without missing a stop, and a TCP sender's turns."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

from ..description.testspec import TestSpec
from ..transport import udp

SO_MAX_PACING_RATE = 47


def cap_rate(sock: socket.socket, bits_per_second: float) -> None:
    """The kernel paces what the socket sends to at most this rate (SO_MAX_PACING_RATE:
    TCP paces itself, UDP where the fq qdisc runs); a kernel without it sends unpaced."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE,
                        min(int(bits_per_second / 8), 2**32 - 1))


def wait_until(moment: float, stop: threading.Event) -> None:
    delay = moment - time.monotonic()
    if delay > 0:
        stop.wait(delay)


class WriteTurns:
    """When a TCP sender may write its next block: never past the test's deadline or its
    amount of bytes, and with -b when the pacer says one is due (the kernel also paces the
    socket at that rate, which works without the fq qdisc)."""

    def __init__(self, sock: socket.socket, spec: TestSpec, deadline: float | None,
                 amount: int | None, first: float) -> None:
        self.deadline = deadline
        self.amount = amount
        self.pacer = None
        if spec.rate > 0:
            cap_rate(sock, min(spec.rate, spec.fq_rate or spec.rate))
            self.pacer = udp.Pacer(spec.rate, spec.length, first)

    def take(self, now: float, sent: int) -> bool | None:
        """True: write a block now; False: not yet (it waited a little); None: done."""
        if (self.deadline is not None and now >= self.deadline) or \
                (self.amount is not None and sent >= self.amount):
            return None
        pacer = self.pacer
        if pacer is not None:
            if pacer.due(now) <= 0:
                pacer.wait(now)
                return False
            pacer.done += 1
        return True
