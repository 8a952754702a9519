"""The running part of a native test, as both ends drive it: measure, say when our
senders are done, exchange results, each checked against the exchange's order."""

from __future__ import annotations

import time
from typing import Any

from ..description.options import test_deadline
from ..engine.measurement import Measurement
from ..engine.records import IntervalRecord
from ..engine.udp_stream import QUIET_SECONDS as UDP_QUIET_MIN
from ..errors import PeerEnded, ProtocolError, SimpleperfError
from ..policy import TestWatch
from ..protocol.events import Error, Event, Finished, Results
from ..protocol.native import MAX_PEER_INTERVALS
from ..transport import tcpinfo
from .control import ControlChannel

ERROR_GRACE = 0.5  # seconds a failed stream waits for the peer's reason on the control
UDP_QUIET_MAX = 2.0  # a UDP receiver's quiet time, scaled by the path's RTT, at most this
POLL_MIN, POLL_MAX = 0.002, 0.05


class NativeSession:
    def __init__(self, measurement: Measurement, channel: ControlChannel,
                 time_limit: float | None = None, watch: TestWatch | None = None) -> None:
        self.measurement = measurement
        self.channel = channel
        self.watch = watch  # a server's --server-bitrate-limit and --idle-timeout
        spec = measurement.spec
        self.time_limit = test_deadline(spec.duration, spec.omit, time_limit)
        self.peer_finished = False
        self.peer_results: Results | None = None
        self._sent_finished = False
        self._sent_results = False
        self._udp_quiet = UDP_QUIET_MIN

    @property
    def peer_view(self) -> dict[int, dict[str, Any]]:
        return self.peer_results.by_stream if self.peer_results is not None else {}

    @property
    def peer_cpu(self) -> tuple[float, float] | None:
        return self.peer_results.cpu if self.peer_results is not None else None

    @property
    def peer_congestion(self) -> str | None:
        return self.peer_results.congestion if self.peer_results is not None else None

    @property
    def peer_intervals(self) -> list[IntervalRecord]:
        if self.peer_results is None or not self.peer_results.intervals:
            return []
        ours_sending = {s.number for s in self.measurement.sending}
        return [IntervalRecord(number, start, end, num_bytes, number not in ours_sending,
                               packets=packets, lost=lost, jitter_ms=jitter)
                for number, start, end, num_bytes, packets, lost, jitter
                in self.peer_results.intervals]

    def begin(self, start: float) -> None:
        rtt = tcpinfo.rtt_seconds(self.channel.sock)
        self._udp_quiet = min(UDP_QUIET_MAX, max(UDP_QUIET_MIN, 4 * rtt))
        self.measurement.begin(start)

    def run(self) -> None:
        """Until both ends have finished and exchanged results (or something failed)."""
        measurement = self.measurement
        while True:
            now = time.monotonic()
            measurement.tick(now)
            self._progress(now)
            if self.peer_results is not None and self._sent_results:
                return
            wait = max(POLL_MIN, min(POLL_MAX, measurement.next_mark_at() - now))
            event = self.channel.receive(wait)
            if event is not None:
                self._handle(event)
            if errors := measurement.errors():  # a stream that failed ends the test now,
                self._said_why()  # with the server's own reason, when it ended the test
                raise SimpleperfError(errors[0])
            if now - measurement.start > self.time_limit:
                raise SimpleperfError(f"the test ran past its time limit of "
                                      f"{self.time_limit:g} s")
            if self.watch is not None and (
                    broken := self.watch.breach(now, measurement.total_bytes())):
                raise SimpleperfError(str(broken))

    def _said_why(self) -> None:
        """A server that ends a test (its limits) says why on the control connection, then
        closes the streams; a stream can fail a moment before that word is read. Read it
        (PeerEnded) for at most ERROR_GRACE seconds."""
        deadline = time.monotonic() + ERROR_GRACE
        while (left := deadline - time.monotonic()) > 0:
            try:
                event = self.channel.receive(left)
            except ProtocolError:  # the connection is gone too: the stream's error stands
                return
            if event is not None:
                self._handle(event)

    def _handle(self, event: Event) -> None:
        """The exchange has already checked the order: while running, only these come."""
        if isinstance(event, Error):
            raise PeerEnded(event.message)
        if isinstance(event, Results):
            self.peer_results = event
        self.peer_finished = True

    def _progress(self, now: float) -> None:
        measurement = self.measurement
        if not self._sent_finished and all(s.done.is_set() for s in measurement.sending):
            self._sent_finished = True
            self.channel.send(Finished())
        if self.peer_finished:
            measurement.end_quiet_receivers(now, self._udp_quiet)
        if (not self._sent_results and self._sent_finished
                and all(s.done.is_set() for s in measurement.receiving)
                and measurement.senders_acknowledged(now)):
            final = measurement.finish(now)
            rows = tuple((r.stream, round(r.start, 6), round(r.end, 6), r.num_bytes, r.packets,
                          r.lost, r.jitter_ms) for r in measurement.intervals if not r.omitted)
            tcp_socks = [s.sock for s in measurement.streams if not s.transport.datagrams]
            self.channel.send(Results(tuple(final),
                                      rows if len(rows) <= MAX_PEER_INTERVALS else None,
                                      measurement.cpu_percent(),
                                      tcpinfo.congestion(tcp_socks[0]) if tcp_socks else None))
            self._sent_results = True

