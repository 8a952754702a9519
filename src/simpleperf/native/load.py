"""The server's side of `simpleperf --rpm`: load-generating connections (protocol/load.py).

A run's connections share its token; to the server the run is one test: its first
connection takes one of --max-clients' places and is refused as a test of that many
streams and seconds would be (--max-parallel, --max-duration), every connection ends at
the run's time limit, and --server-bitrate-limit and --idle-timeout watch the run's bytes
together. The place is given back when the run's last connection ends."""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..description.options import SERVER_OVERRUN_SECONDS
from ..description.transports import TCP
from ..engine.responsiveness import LoadUnsentLimit
from ..engine.tcp_stream import follow_unsent
from ..errors import ProtocolError, SimpleperfError
from ..policy import ServerPolicy, TestWatch
from ..protocol import load
from ..protocol.native import echo_probe_is_authentic
from ..transport import socket_options, tcp

WATCH_SECONDS = 0.1  # how often a connection looks at the run's limits
REQUEST_SECONDS = 10.0  # for a load connection's request to arrive whole


class _Ended(Exception):
    """The server stops, or the run's limits end it, while a send waits."""


@dataclass
class Run:
    asked: load.LoadRequest
    started: float
    watch: TestWatch | None
    connections: int = 0
    opened: int = 0
    moved: int = 0  # bytes of all the run's connections, both ways
    both: bool = False  # its connections load both directions (--rpm --bidir)
    ended: str | None = None  # why the server ended it, once it has
    lock: threading.Lock = field(default_factory=threading.Lock)


class LoadService:
    def __init__(self, policy: ServerPolicy, secret: bytes | None, stopping: threading.Event,
                 say: Callable[..., None]) -> None:
        self.policy = policy
        self.secret = secret
        self.stopping = stopping
        self.say = say
        self._runs: dict[bytes, Run] = {}
        self._lock = threading.Lock()

    def serve(self, conn: socket.socket, initial: bytes, peer: str) -> bool:
        """Serve one load connection; True when it was its run's last (the run ended)."""
        data = initial
        size = load.request_size(self.secret)
        began = time.monotonic()
        while len(data) < size:
            try:
                chunk = conn.recv(size - len(data))
            except BlockingIOError:
                if self.stopping.is_set() or time.monotonic() - began > REQUEST_SECONDS:
                    return False
                continue
            if not chunk:
                return False
            data += chunk
        try:
            asked = load.parse_request(data, self.secret)
        except ProtocolError as error:
            self.say(f"Load connection from {peer} refused: {error}")
            _send_quietly(conn, load.refusal(str(error)))
            return False
        try:
            tcp.set_congestion(conn, asked.congestion)
        except SimpleperfError as error:
            _send_quietly(conn, load.refusal(str(error)))
            return False
        run, refusal, news = self._join(asked)
        if run is None:
            self.say(f"Load connection from {peer} refused: {refusal}")
            _send_quietly(conn, load.refusal(refusal or "refused"))
            return False
        try:
            conn.sendall(load.ACCEPT)
            if news:
                self.say(f"Responsiveness run from {peer}: {news}")
            _Connection(self, conn, run, asked.download, data[size:]).serve()
        except (OSError, ProtocolError, _Ended):
            pass  # the client went, or spoke nonsense: its run goes on without it
        finally:
            ended = self._leave(asked.token)
        return ended

    def _join(self, asked: load.LoadRequest) -> tuple[Run | None, str | None, str | None]:
        """The run this connection joins, else why it is refused; and what the log says of
        the run now that it has joined (its start, its turn to load both ways), if anything."""
        with self._lock:
            run = self._runs.get(asked.token)
            if run is None:
                refusal = self.policy.admit(TCP, asked.connections, float(asked.seconds), 0)
                if refusal is not None:
                    return None, str(refusal), None
                run = Run(asked, time.monotonic(), self.policy.test_watch(asked.seconds))
                self._runs[asked.token] = run
            elif run.opened >= run.asked.connections:
                return None, (f"the run already opened its {run.asked.connections} "
                              "connections"), None
            elif run.ended is not None:
                return None, run.ended, None
            run.connections += 1
            run.opened += 1
            news = None
            if run.opened == 1:
                news = (f"{'download' if asked.download else 'upload'}, up to "
                        f"{asked.seconds} s")
            elif asked.download != run.asked.download and not run.both:
                run.both = True
                news = "upload and download at once"
            return run, None, news

    def _leave(self, token: bytes) -> bool:
        """A connection of the run is gone; True when it was the last."""
        with self._lock:
            run = self._runs[token]
            run.connections -= 1
            if run.connections:
                return False
            del self._runs[token]
            self.policy.release()
            return True

    def limit_reason(self, run: Run, now: float) -> str | None:
        """Why the run must end now (its time, the server's watch), or None."""
        with run.lock:
            if run.ended is None:
                if now - run.started > run.asked.seconds + SERVER_OVERRUN_SECONDS:
                    run.ended = f"the run's {run.asked.seconds} s are over"
                elif run.watch is not None and (broken := run.watch.breach(now, run.moved)):
                    run.ended = str(broken)
            return run.ended


class _Connection:
    """One load connection: bulk and probe answers out (download), or bulk in and answers
    back (upload); until the client closes, the server stops or the run's limits end it."""

    def __init__(self, service: LoadService, conn: socket.socket, run: Run, download: bool,
                 initial: bytes) -> None:
        self.service = service
        self.conn = conn
        self.run = run
        self.download = download  # its own direction: a run may load both (--bidir)
        self.reader = load.RecordReader()
        self.answers = bytearray()
        self._counted = 0
        self._take(initial)
        self.unsent = LoadUnsentLimit()
        # A probe's answer must not wait for an acknowledgement behind a short segment.
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.poller = select.poll()
        self.poller.register(conn, select.POLLIN | select.POLLOUT)
        if download:
            socket_options.set_unsent_limit(conn, self.unsent.limit)

    def serve(self) -> None:
        next_look = 0.0
        while not self.service.stopping.is_set():
            now = time.monotonic()
            if now >= next_look:
                next_look = now + WATCH_SECONDS
                reason = self.service.limit_reason(self.run, now)
                if reason is not None:
                    _send_quietly(self.conn, load.refusal(reason))
                    return
            if self.download:
                if not self._download_turn():
                    return
            elif not self._upload_turn():
                return

    def _download_turn(self) -> bool:
        """One bulk record out, once the socket holds less than its unsent limit (poll
        honours TCP_NOTSENT_LOWAT; a blocking send does not), with the answers to the
        probes that came meanwhile before it."""
        ready = 0
        while not ready & select.POLLOUT:
            ready = self._wait(select.POLLIN | select.POLLOUT)
            if ready & select.POLLIN and not self._read_probes():
                return False
        follow_unsent(self.conn, self.unsent, time.monotonic())
        out = bytes(self.answers) + load.bulk(self.unsent.record)
        self.answers.clear()
        self._send(out)
        self._count(len(out))
        return True

    def _read_probes(self) -> bool:
        """Requests that came (a download's client sends nothing else); False once it has
        closed."""
        try:
            data = self.conn.recv(4096, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return True
        if data:
            self._take(data)
        return data != b""

    def _wait(self, events: int) -> int:
        """Which of `events` the connection is ready for, waiting a wake-up at most; at
        each wake-up, a stop or the run's end (_Ended)."""
        ready = 0
        for _, happened in self.poller.poll(tcp.WAKE_UP_SECONDS * 1000):
            ready |= happened
        if ready & (select.POLLERR | select.POLLHUP):
            ready |= select.POLLIN  # the read says what happened
        if not ready:
            self._look_up()
        return ready & (events | select.POLLIN)

    def _look_up(self) -> None:
        if self.service.stopping.is_set():
            raise _Ended
        reason = self.service.limit_reason(self.run, time.monotonic())
        if reason is not None:
            _send_quietly(self.conn, load.refusal(reason))
            raise _Ended

    def _upload_turn(self) -> bool:
        try:
            data = self.conn.recv(256 * 1024)
        except BlockingIOError:
            return True
        if not data:
            return False
        self._take(data)
        self._count(len(data))
        if self.answers:
            out = bytes(self.answers)
            self.answers.clear()
            self._send(out)
        return True

    def _take(self, data: bytes) -> None:
        """Probes in what the client sent become answers; anything but probes and bulk
        ends the connection (ProtocolError)."""
        for kind, payload in self.reader.feed(data):
            if kind != load.PROBE:
                raise ProtocolError("a client sent a refusal")
            if self.service.secret is not None and not echo_probe_is_authentic(
                    self.service.secret, payload):
                raise ProtocolError("a self probe without the shared secret")
            self.answers += load.record(load.PROBE, payload)

    def _count(self, size: int) -> None:
        with self.run.lock:
            self.run.moved += size

    def _send(self, data: bytes) -> None:
        """All of `data`, looking up at every wake-up for a stop or the run's end."""
        view = memoryview(data)
        while view:
            try:
                sent = self.conn.send(view)
            except BlockingIOError:
                self._look_up()
                continue
            view = view[sent:]


def _send_quietly(conn: socket.socket, data: bytes) -> None:
    """A refusal, if the connection takes it now: never waits for a client that reads
    nothing."""
    with contextlib.suppress(OSError):
        conn.send(data, socket.MSG_DONTWAIT)
