"""One native test as both ends run it: the control channel, the stream threads, interval
sampling, the end of the test and the exchange of results. The client and the server drive
the same Session; only who opens what differs."""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from .errors import SimpleperfError
from .protocol.classic import ProtocolError
from .protocol.native import (
    MAX_PEER_INTERVALS,
    MessageReader,
    TestSpec,
    encode,
    expect,
    parse_intervals,
    parse_results,
)
from .streams import Stream, run_stream
from .transport import tcp, tcpinfo

UDP_QUIET_MIN = 0.25  # a UDP receiver ends this long after the last datagram ...
UDP_QUIET_MAX = 2.0  # ... once the sender said it finished, scaled by the path's RTT
RESULTS_WAIT_SECONDS = 30.0
TCP_QUIET = 0.02  # a drained TCP receiver: nothing unread, nothing new for this long
DRAIN_LIMIT = 3.0


class ControlChannel:
    """Length-prefixed JSON messages over a TCP connection, with deadlines on reads."""

    def __init__(self, sock: socket.socket, reader: MessageReader | None = None) -> None:
        self.sock = sock
        self.reader = reader or MessageReader()
        self._queued: list[dict] = []
        self._lock = threading.Lock()
        self.closed = False

    def send(self, message: dict) -> None:
        with self._lock:
            self.sock.sendall(encode(message))

    def feed(self, data: bytes) -> None:
        self._queued.extend(self.reader.feed(data))

    def receive(self, timeout: float) -> dict | None:
        """The next message, or None if none arrived within `timeout` seconds. The peer
        closing the connection is a ProtocolError (unless a message is still queued)."""
        deadline = time.monotonic() + timeout
        while not self._queued:
            if self.closed:
                raise PeerGone("the peer closed the control connection")
            remaining = deadline - time.monotonic()
            readable, _, _ = select.select([self.sock], [], [], max(0.0, remaining))
            if not readable:
                return None
            try:
                data = self.sock.recv(65536)
            except BlockingIOError:
                continue
            except OSError as error:
                raise PeerGone(f"the control connection failed: "
                               f"{(error.strerror or str(error)).lower()}") from None
            if not data:
                self.closed = True
                continue
            self.feed(data)
        return self._queued.pop(0)

    def expect(self, timeout: float, *types: str) -> dict:
        message = self.receive(timeout)
        if message is None:
            raise ProtocolError(f"no '{'/'.join(types)}' message within {timeout:g} s")
        return expect(message, *types)


class PeerGone(ProtocolError):
    """The other end closed or reset the control connection."""


@dataclass
class IntervalRecord:
    stream: int
    start: float  # seconds since the measured part began (negative while omitting)
    end: float
    num_bytes: int
    sending: bool
    omitted: bool = False
    packets: int | None = None
    lost: int | None = None
    out_of_order: int | None = None
    jitter_ms: float | None = None
    retransmits: int | None = None
    snd_cwnd: int | None = None
    rtt_us: int | None = None
    rttvar_us: int | None = None


@dataclass
class _Snapshot:
    num_bytes: int = 0
    packets: int = 0
    lost: int = 0
    out_of_order: int = 0
    retransmits: int = 0


class Session:
    """Runs our end of a test over `streams` once they are all connected."""

    def __init__(self, spec: TestSpec, streams: list[Stream], channel: ControlChannel | None,
                 step: float, on_interval: Callable[[list[IntervalRecord]], None] | None = None
                 ) -> None:
        """`channel`: the native control connection; None when another protocol's driver
        (iperf3) runs the exchange and calls tick() and finish() itself."""
        self.spec = spec
        self.streams = streams
        self.channel = channel
        self.step = step
        self.on_interval = on_interval
        self.stop = threading.Event()
        self.stop_sending = threading.Event()  # senders only: the peer said the test ended
        self.intervals: list[IntervalRecord] = []
        self.peer_results: dict[int, dict] | None = None
        self.peer_intervals: list[IntervalRecord] = []
        self.peer_finished = False
        self.start = 0.0
        self.cpu_before = os.times()
        self._threads: list[threading.Thread] = []
        self._previous = {s.number: _Snapshot() for s in streams}
        self._baseline = {s.number: _Snapshot() for s in streams}
        self._tcp_samples: dict[int, list[tcpinfo.TcpInfo]] = {s.number: [] for s in streams}
        self._sent_finished = False
        self._sent_results = False
        self._marks = self._boundaries()
        self._mark_index = 0
        self._udp_quiet = UDP_QUIET_MIN
        self.time_limit: float | None = None  # seconds; default: the test's length + margin
        self._final: list[dict] | None = None

    def _boundaries(self):
        """Interval ends in seconds since start: every step through the omitted part, the
        end of omitting, then every step of the measured part."""
        omit = self.spec.omit
        marks = []
        mark = self.step
        while mark < omit - 1e-9:
            marks.append(mark)
            mark += self.step
        if omit > 0:
            marks.append(omit)
        return marks

    def _mark(self, index: int) -> float:
        if index < len(self._marks):
            return self._marks[index]
        base = self.spec.omit
        return base + (index - len(self._marks) + 1) * self.step

    def begin(self, start: float) -> None:
        """Start every stream thread; senders begin writing at monotonic time `start`."""
        self.start = start
        self.cpu_before = os.times()
        if self.channel is not None:
            rtt = tcpinfo.rtt_seconds(self.channel.sock)
            self._udp_quiet = min(UDP_QUIET_MAX, max(UDP_QUIET_MIN, 4 * rtt))
        for stream in self.streams:
            stop = self.stop_sending if stream.sending else self.stop
            thread = threading.Thread(target=run_stream,
                                      args=(stream, self.spec, start, stop),
                                      name=f"stream {stream.number}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def run(self) -> None:
        """Until both ends have finished and exchanged results (or something failed)."""
        while True:
            now = time.monotonic()
            self._close_intervals(now, final=False)
            self._progress(now)
            if self.peer_results is not None and self._sent_results:
                return
            wait = max(0.002, min(0.05, self.start + self._mark(self._mark_index) - now))
            message = self.channel.receive(wait)
            if message is not None:
                self._handle(message)
            if now - self.start > self._time_limit():
                raise SimpleperfError(f"the test ran past its time limit of "
                                      f"{self._time_limit():g} s")

    def _time_limit(self) -> float:
        if self.time_limit is not None:
            return self.time_limit
        if self.spec.duration is None:
            return 7 * 86400.0
        return self.spec.omit + self.spec.duration + RESULTS_WAIT_SECONDS

    def _handle(self, message: dict) -> None:
        kind = expect(message, "finished", "results")["type"]
        if kind == "finished":
            self.peer_finished = True
        else:
            self.peer_results = parse_results(message)
            self.peer_intervals = [
                IntervalRecord(number, start, end, num_bytes,
                               not any(s.sending for s in self.streams if s.number == number),
                               packets=packets, lost=lost, jitter_ms=jitter)
                for number, start, end, num_bytes, packets, lost, jitter
                in parse_intervals(message)]
            self.peer_finished = True

    def _progress(self, now: float) -> None:
        sending = [s for s in self.streams if s.sending]
        receiving = [s for s in self.streams if not s.sending]
        if not self._sent_finished and all(s.done.is_set() for s in sending):
            self._sent_finished = True
            self.channel.send({"type": "finished"})
        if self.peer_finished:
            for stream in receiving:
                if stream.protocol == "udp" and not stream.done.is_set():
                    quiet_since = stream.last or self.start
                    if now - quiet_since >= self._udp_quiet:
                        stream.done.set()  # the thread sees stop below; counters are final
        if (not self._sent_results and self._sent_finished
                and all(s.done.is_set() for s in receiving)):
            self._close_intervals(now, final=True)
            self._final = self.local_results()
            rows = [[r.stream, round(r.start, 6), round(r.end, 6), r.num_bytes, r.packets,
                     r.lost, r.jitter_ms] for r in self.intervals if not r.omitted]
            message = {"type": "results", "streams": self._final}
            if len(rows) <= MAX_PEER_INTERVALS:
                message["intervals"] = rows
            self.channel.send(message)
            self._sent_results = True

    def drain_receivers(self, limit: float = DRAIN_LIMIT) -> None:
        """After the peer said the test ended (iperf3's TEST_END): what it wrote before
        that belongs to the test. Wait until every receiving stream has nothing unread
        and nothing new for a moment (UDP: for UDP_QUIET_MIN), at most `limit` seconds."""
        receiving = [s for s in self.streams if not s.sending and not s.done.is_set()]
        began = time.monotonic()
        while time.monotonic() - began < limit:
            now = time.monotonic()
            if all(s.done.is_set() or _drained(s, now - (s.last or began)) for s in receiving):
                return
            time.sleep(0.005)

    def cpu_percent(self) -> tuple[float, float]:
        """This process's user and system CPU since begin(), in percent of one core."""
        now = os.times()
        wall = max(1e-9, time.monotonic() - self.start)
        return (100.0 * (now.user - self.cpu_before.user) / wall,
                100.0 * (now.system - self.cpu_before.system) / wall)

    def tick(self, now: float) -> None:
        """Close every interval that has ended by `now`."""
        self._close_intervals(now, final=False)

    def finish(self, now: float) -> list[dict]:
        """Close the last interval and fix our results (for drivers other than run())."""
        if self._final is None:
            self._close_intervals(now, final=True)
            self._final = self.local_results()
        return self._final

    def _close_intervals(self, now: float, final: bool) -> None:
        end = None if self.spec.duration is None else self.spec.omit + self.spec.duration
        while True:
            mark = self._mark(self._mark_index)
            # The test's last interval waits for final: a sender may still be inside its
            # last write when the clock reaches the end.
            if now < self.start + mark or (end is not None and mark >= end - 1e-9):
                break
            self._emit(mark)
            self._mark_index += 1
        if final:
            last = max([s.last or self.start for s in self.streams] + [self.start]) - self.start
            previous = self._mark(self._mark_index - 1) if self._mark_index else 0.0
            if last > previous + 1e-3 or self._counted_since_last_interval():
                self._emit(max(last, previous + 1e-3))

    def _counted_since_last_interval(self) -> bool:
        return any(_snapshot(s).num_bytes != self._previous[s.number].num_bytes
                   for s in self.streams)

    def _emit(self, mark: float) -> None:
        previous_mark = self._mark(self._mark_index - 1) if self._mark_index else 0.0
        omitted = mark <= self.spec.omit + 1e-9 and self.spec.omit > 0
        records = []
        for stream in self.streams:
            now = _snapshot(stream)
            before = self._previous[stream.number]
            # As iperf3: omitted intervals count from the start, measured ones from the end
            # of omitting.
            shift = 0.0 if omitted else self.spec.omit
            record = IntervalRecord(stream.number, previous_mark - shift, mark - shift,
                                    now.num_bytes - before.num_bytes, stream.sending, omitted)
            if stream.protocol == "udp":
                record.packets = now.packets - before.packets
                if not stream.sending and stream.account is not None:
                    record.lost = now.lost - before.lost
                    record.out_of_order = now.out_of_order - before.out_of_order
                    record.jitter_ms = stream.account.jitter * 1000
            else:
                info = tcpinfo.read(stream.sock)
                if info is not None:
                    now.retransmits = info.total_retrans
                    self._tcp_samples[stream.number].append(info)
                    record.retransmits = now.retransmits - before.retransmits
                    record.snd_cwnd = info.snd_cwnd * info.snd_mss
                    record.rtt_us, record.rttvar_us = info.rtt_us, info.rttvar_us
            self._previous[stream.number] = now
            if omitted and abs(mark - self.spec.omit) < 1e-9:
                self._baseline[stream.number] = now
            records.append(record)
        self.intervals.extend(records)
        if self.on_interval is not None:
            self.on_interval(records)

    def local_results(self) -> list[dict]:
        """Our view of every stream over the measured part (after -O); once the results
        were sent, exactly those."""
        if self._final is not None:
            return self._final
        results = []
        for stream in self.streams:
            final = _snapshot(stream)
            base = self._baseline[stream.number]
            begin = self.start + self.spec.omit
            # A sender stopped by the peer may still be inside its last write: now is when.
            end = stream.last if stream.last is not None else time.monotonic()
            if self.spec.omit == 0 and stream.first is not None:
                begin = stream.first  # a receiver's data starts a path's delay later
            entry = {"stream": stream.number, "bytes": final.num_bytes - base.num_bytes,
                     "seconds": round(max(0.0, end - begin), 6),
                     "sender": stream.sending}
            if stream.protocol == "udp":
                entry["packets"] = final.packets - base.packets
                if not stream.sending and stream.account is not None:
                    entry["lost"] = final.lost - base.lost
                    entry["out_of_order"] = final.out_of_order - base.out_of_order
                    entry["jitter_ms"] = stream.account.jitter * 1000
                    growth = stream.account.queue_growth
                    if growth is not None:
                        entry["queue_growth_ms"] = growth * 1000
            else:
                samples = self._tcp_samples[stream.number]
                info = tcpinfo.read(stream.sock)
                if info is not None:
                    samples.append(info)
                    entry["retransmits"] = info.total_retrans - base.retransmits
                if samples:
                    entry["max_snd_cwnd"] = max(s.snd_cwnd * s.snd_mss for s in samples)
                    entry["mean_rtt_us"] = int(sum(s.rtt_us for s in samples) / len(samples))
            if stream.error:
                entry["error"] = stream.error
            results.append(entry)
        return results

    def close(self) -> None:
        self.stop.set()
        self.stop_sending.set()
        for stream in self.streams:
            with contextlib.suppress(OSError):
                stream.sock.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(2)
        for stream in self.streams:
            stream.sock.close()

    def errors(self) -> list[str]:
        return [s.error for s in self.streams if s.error]


def _snapshot(stream: Stream) -> _Snapshot:
    if stream.protocol == "udp":
        if stream.sending:
            return _Snapshot(stream.num_bytes, stream.packets_sent)
        account = stream.account
        if account is None:
            return _Snapshot(stream.num_bytes)
        return _Snapshot(stream.num_bytes, account.packets, account.lost, account.out_of_order)
    return _Snapshot(stream.num_bytes)


def _drained(stream: Stream, quiet: float) -> bool:
    if stream.protocol == "udp":
        return quiet >= UDP_QUIET_MIN
    try:
        return quiet >= TCP_QUIET and tcp.unread_bytes(stream.sock) == 0
    except OSError:
        return True
