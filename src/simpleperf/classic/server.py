"""A classic connection at the server: count the payload until BYE, acknowledge it.

A trickle must not hold a connection forever, and BYE may arrive glued to data or split
across reads (protocol/classic.py's receiver handles both)."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass

from ..errors import ProtocolError
from ..options import ServerOptions
from ..protocol.classic import ACK, ClassicReceiver
from ..transport import buffers

MIN_PROGRESS_BYTES = 1024  # per idle limit, from a classic client


@dataclass
class ConnectionResult:
    peer: str
    seconds: float
    payload_bytes: int
    problem: str | None  # None when the client finished with BYE


def receive(conn: socket.socket, peer: str, accepted: float, prefix: bytes,
            options: ServerOptions, stopping: threading.Event) -> ConnectionResult:
    """Count a classic client's payload until BYE, then acknowledge it; what arrived, how
    long it took from accept, and what went wrong if it did not end with BYE."""
    receiver = ClassicReceiver()
    if prefix:
        receiver.feed(prefix)
    buffer = buffers.aligned(max(options.length, 65536))
    recv_into = conn.recv_into
    clock = time.monotonic
    # A trickle (a byte every few seconds) must not hold a connection forever: every
    # idle-limit window must bring at least MIN_PROGRESS_BYTES.
    window_start, window_bytes = accepted, 0
    problem: str | None = None
    while not receiver.finished:
        try:
            count = recv_into(buffer)
        except BlockingIOError:  # the wake-up timer
            if stopping.is_set():
                problem = "server stopped"
                break
            count = -1
        except OSError as error:
            problem = "connection reset" if isinstance(error, ConnectionResetError) \
                else (error.strerror or str(error)).lower()
            break
        if count == 0:
            problem = "closed without BYE"
            break
        now = clock()
        if now - window_start > options.idle_limit:
            if window_bytes + max(count, 0) < MIN_PROGRESS_BYTES:
                problem = (f"no data for {options.idle_limit:g} s" if window_bytes == 0
                           and count < 0 else f"less than {MIN_PROGRESS_BYTES} bytes in "
                           f"{options.idle_limit:g} s")
                break
            window_start, window_bytes = now, 0
        if count < 0:
            continue
        window_bytes += count
        try:
            if receiver.feed(buffer[:count]):
                break
        except ProtocolError as error:
            problem = str(error)
            break
    ended = clock()
    if problem is not None and stopping.is_set():
        problem = "server stopped"  # our own shutdown ended the read, not the client
    if problem is None:
        try:
            conn.sendall(ACK)
        except OSError:
            problem = "acknowledgement could not be sent"
    return ConnectionResult(peer, ended - accepted, receiver.payload_bytes, problem)
