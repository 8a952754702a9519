"""A classic connection at the server: count the payload until BYE, acknowledge it.

A trickle must not hold a connection forever, and BYE may arrive glued to data or split
across reads (protocol/classic.py's receiver handles both)."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..description.options import ServerOptions
from ..description.transports import TCP
from ..errors import ProtocolError
from ..policy import ServerPolicy
from ..protocol.classic import ACK, FINISH, ClassicReceiver
from ..report import classic as table
from ..report import server_json
from ..transport import buffers, compiled, tcp

MIN_PROGRESS_BYTES = 1024  # per idle limit, from a classic client
REFUSED_RSA = ("a classic client, and this server requires iperf3's RSA authentication, "
               "which the classic protocol cannot carry")
REFUSED_SECRET = ("a classic client, and this server has a shared secret the classic "
                  "protocol cannot prove (--allow-classic serves them)")


class ClassicService:
    """Classic clients on the shared port. Each connection is a test of its own (the
    protocol cannot say which belong together), and has no words for a refusal: one the
    server refuses is closed."""

    def __init__(self, options: ServerOptions, policy: ServerPolicy,
                 say: Callable[..., None], stopping: threading.Event) -> None:
        self.options, self.policy, self.say, self.stopping = options, policy, say, stopping
        self.document: Callable[[dict[str, Any]], None] = lambda value: None

    def admit(self) -> str | None:
        """Take a place for one more classic test, or say why not."""
        if self.options.rsa_auth is not None:
            return REFUSED_RSA
        if self.options.secret is not None and not self.options.allow_classic:
            return REFUSED_SECRET
        refusal = self.policy.admit(TCP, 1, None, 0.0, memory=self.options.length)
        return None if refusal is None else f"a classic client: {refusal}"

    def serve(self, conn: socket.socket, peer: str, prefix: bytes, accepted: float) -> None:
        """The admitted test: its payload counted until BYE, its row said and documented."""
        here = tcp.endpoint(conn.getsockname())
        self.say(table.server_connected(peer, here))
        try:
            result = receive(conn, peer, accepted, prefix, self.options, self.stopping)
        finally:
            self.policy.release(self.options.length)
        self.say(table.header("Received"),
                 table.row(result.peer, 0.0, result.seconds, result.payload_bytes,
                           self.options.unit,
                           f"incomplete: {result.problem}" if result.problem else ""))
        self.document(server_json.classic_document(peer, here, result.seconds,
                                                   result.payload_bytes, result.problem))


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
    read = _reader(conn, receiver, buffers.tcp_read_buffer(options.length))
    clock = time.monotonic
    # A trickle (a byte every few seconds) must not hold a connection forever: every
    # idle-limit window must bring at least MIN_PROGRESS_BYTES.
    window_start, window_bytes = accepted, 0
    problem: str | None = None
    while not receiver.finished:
        try:
            count = read()
        except BlockingIOError:  # the wake-up timer
            if stopping.is_set():
                problem = "server stopped"
                break
            count = -1
        except ProtocolError as error:
            problem = str(error)
            break
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
        if count > 0:
            window_bytes += count
    ended = clock()
    if problem is not None and stopping.is_set():
        problem = "server stopped"  # our own shutdown ended the read, not the client
    if problem is None:
        try:
            conn.sendall(ACK)
        except OSError:
            problem = "acknowledgement could not be sent"
    return ConnectionResult(peer, ended - accepted, receiver.payload_bytes, problem)


def _reader(conn: socket.socket, receiver: ClassicReceiver,
            buffer: memoryview) -> Callable[[], int]:
    """A function that reads what has arrived into `receiver` and returns how many bytes (0
    at the end of the stream; BlockingIOError at the wake-up timer). Compiled: reads for
    up to a slice of a millisecond at a time, stopping at BYE."""
    fastpath = compiled.module()
    if fastpath is None:
        recv_into = conn.recv_into

        def read_in_python() -> int:
            count = recv_into(buffer)
            if count:
                receiver.feed(buffer[:count])
            return count
        return read_in_python
    tcp_receive, fd = fastpath.tcp_receive, conn.fileno()

    def read_compiled() -> int:
        count, ended, error, tail, _ = tcp_receive(fd, buffer, compiled.SLICE_SECONDS,
                                                   FINISH, receiver.tail)
        if count:  # what came before a failure counts
            receiver.account(count, tail)
        if error:
            raise OSError(error, os.strerror(error))
        if not count and not ended:
            raise BlockingIOError
        return count
    return read_compiled
