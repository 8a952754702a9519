"""The server: accept connections, serve each in its own thread, report each when it ends.

Each connection is independent: one that sends nothing, trickles or dies never delays the
others, and its thread and socket are gone when it ends.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from .cli import ServerOptions
from .protocol.classic import ACK, ClassicReceiver, ProtocolError
from .report import classic as table
from .transport import tcp

IDLE_LIMIT_SECONDS = 60.0


@dataclass
class ConnectionResult:
    peer: str
    seconds: float
    payload_bytes: int
    problem: str | None  # None when the client finished with BYE


class Server:
    def __init__(self, options: ServerOptions, out: Callable[[str], None],
                 idle_limit: float = IDLE_LIMIT_SECONDS) -> None:
        self.options = options
        self._out = out
        self._print_lock = threading.Lock()
        self._stopping = threading.Event()
        self._active: dict[threading.Thread, socket.socket] = {}
        self._active_lock = threading.Lock()
        self._idle_limit = idle_limit
        self.listener = tcp.open_listener(options.bind, options.port, window=options.window,
                                          congestion=options.congestion)

    def say(self, *lines: str) -> None:
        with self._print_lock:
            for line in lines:
                self._out(line)

    def serve_forever(self) -> None:
        """Accept until stop() or Ctrl-C; then end every connection and close."""
        self.say(table.server_banner(self.options.port))
        tcp.set_wake_up(self.listener)
        try:
            while not self._stopping.is_set():
                try:
                    conn, address = self.listener.accept()
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    if self._stopping.is_set():
                        break
                    time.sleep(0.05)  # e.g. out of file descriptors: back off, keep serving
                    continue
                self._start(conn, address)
        finally:
            self._shut_down()

    def stop(self) -> None:
        self._stopping.set()

    def _start(self, conn: socket.socket, address: tuple) -> None:
        worker = threading.Thread(target=self._serve_connection, args=(conn, address),
                                  name=f"serve {address[0]}:{address[1]}", daemon=True)
        with self._active_lock:
            self._active[worker] = conn
        worker.start()

    def _shut_down(self) -> None:
        self._stopping.set()
        self.listener.close()
        with self._active_lock:
            connections = list(self._active.items())
        for _, conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for worker, _ in connections:
            worker.join(2)

    def _serve_connection(self, conn: socket.socket, address: tuple) -> None:
        accepted = time.monotonic()
        try:
            peer = tcp.endpoint(address)
            self.say(table.server_connected(peer, tcp.endpoint(conn.getsockname())))
            tcp.set_wake_up(conn)
            result = self._receive_classic(conn, peer, accepted)
            self.say(table.header("Received"),
                     table.row(result.peer, 0.0, result.seconds, result.payload_bytes,
                               self.options.unit,
                               f"incomplete: {result.problem}" if result.problem else ""))
        except OSError:
            pass  # the peer vanished before it could even be greeted: nothing to report
        finally:
            conn.close()
            with self._active_lock:
                self._active.pop(threading.current_thread(), None)

    def _receive_classic(self, conn: socket.socket, peer: str,
                         accepted: float) -> ConnectionResult:
        receiver = ClassicReceiver()
        buffer = memoryview(bytearray(max(self.options.length, 65536)))
        recv_into = conn.recv_into
        clock = time.monotonic
        last_data = accepted
        problem: str | None = None
        while True:
            try:
                count = recv_into(buffer)
            except BlockingIOError:  # the wake-up timer
                if self._stopping.is_set():
                    problem = "server stopped"
                    break
                if clock() - last_data > self._idle_limit:
                    problem = f"no data for {self._idle_limit:g} s"
                    break
                continue
            except OSError as error:
                problem = "connection reset" if isinstance(error, ConnectionResetError) \
                    else (error.strerror or str(error)).lower()
                break
            if count == 0:
                problem = "closed without BYE"
                break
            last_data = clock()
            try:
                if receiver.feed(buffer[:count]):
                    break
            except ProtocolError as error:
                problem = str(error)
                break
        ended = clock()
        if problem is not None and self._stopping.is_set():
            problem = "server stopped"  # our own shutdown ended the read, not the client
        if problem is None:
            try:
                conn.sendall(ACK)
            except OSError:
                problem = "acknowledgement could not be sent"
        return ConnectionResult(peer, ended - accepted, receiver.payload_bytes, problem)
