"""One test as our end measures it, whatever the protocol: the stream threads, the interval
clock, and the accounting of every stream over the measured part. The drivers (native,
iperf3) run their exchange around it; it never touches a control connection."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from ..delays import DelayLog, FrameAccount, binning_of
from ..description.testspec import TestSpec
from .clock import IntervalClock
from .records import IntervalRecord, Snapshot, Stream
from .streams import run_stream, transport_of

DRAIN_LIMIT = 3.0
MIN_LAST_INTERVAL = 1e-3  # seconds: a shorter tail is folded into the interval before it


class Measurement:
    """Our end's view of `streams` once they are all connected."""

    def __init__(self, spec: TestSpec, streams: list[Stream], step: float,
                 on_interval: Callable[[list[IntervalRecord]], None] | None = None,
                 cpu: int | None = None) -> None:
        self.spec = spec
        self.cpu = cpu  # the stream threads run on this CPU (a server's share of -A n,m)
        self.streams = streams
        for stream in streams:
            if not stream.sending and spec.timed:
                stream.delays = DelayLog(binning_of(spec))
                if not spec.transport.datagrams:
                    stream.write_delays = DelayLog(binning_of(spec))
                if spec.isochronous:
                    stream.frames = FrameAccount(binning_of(spec), spec.omitted_frames)
        self.on_interval = on_interval
        self.clock = IntervalClock(step, spec.omit, spec.end)
        self.stop = threading.Event()  # receivers
        self.stop_sending = threading.Event()  # senders: the peer said the test ended
        self.intervals: list[IntervalRecord] = []
        self.start = 0.0
        self.cpu_before = os.times()
        self._threads: dict[int, threading.Thread] = {}  # by id() of its stream
        self._previous = {s.number: Snapshot() for s in streams}
        self._baseline = {s.number: Snapshot() for s in streams}
        self._mark_index = 0
        self._final: list[dict[str, Any]] | None = None

    @property
    def sending(self) -> list[Stream]:
        return [s for s in self.streams if s.sending]

    @property
    def receiving(self) -> list[Stream]:
        return [s for s in self.streams if not s.sending]

    def begin(self, start: float, body: Callable[..., None] = run_stream) -> None:
        """Start every stream thread; senders begin writing at monotonic time `start`.
        `body(stream, spec, start, stop)` moves a stream's bytes (a protocol whose datagrams
        have their own layout brings its own)."""
        self.start = start
        self.cpu_before = os.times()
        for stream in self.streams:
            stop = self.stop_sending if stream.sending else self.stop
            thread = threading.Thread(target=_on_cpu,
                                      args=(self.cpu, body, stream, self.spec, start, stop),
                                      name=f"stream {stream.number}", daemon=True)
            self._threads[id(stream)] = thread
            thread.start()

    def total_bytes(self) -> int:
        """Every stream's bytes so far, both directions."""
        return sum(stream.num_bytes for stream in self.streams)

    def next_mark_at(self) -> float:
        """Monotonic time at which the next interval closes."""
        return self.start + self.clock.mark(self._mark_index)

    def tick(self, now: float) -> None:
        """Close every interval that has ended by `now` (the test's last one waits for
        finish(): a sender may still be inside its last write when the clock reaches it)."""
        while True:
            mark = self.clock.mark(self._mark_index)
            if now < self.start + mark or self.clock.is_final(mark) or self._ended_before(mark):
                return
            self._emit(mark)
            self._mark_index += 1

    def _ended_before(self, mark: float) -> bool:
        """Every stream has ended before `mark` (while a sender waits for its last bytes
        to be acknowledged, say): finish() closes the last interval where they ended."""
        return all(s.done.is_set() for s in self.streams) and all(
            (s.last or self.start) < self.start + mark for s in self.streams)

    def finish(self, now: float) -> list[dict[str, Any]]:
        """Close the last interval and fix our results; later calls return the same."""
        if self._final is None:
            self.tick(now)
            last = max([s.last or self.start for s in self.streams] + [self.start]) - self.start
            previous = self.clock.mark(self._mark_index - 1) if self._mark_index else 0.0
            if last > previous + MIN_LAST_INTERVAL or self._counted_since_last_interval():
                self._emit(max(last, previous + MIN_LAST_INTERVAL))
            self._final = self.local_results()
        return self._final

    def end_quiet_receivers(self, now: float, quiet: float) -> None:
        """Once the peer has finished sending: a receiver that cannot see an end of stream
        (UDP) ends after `quiet` seconds without data."""
        for stream in self.receiving:
            if (transport_of(stream).ENDS_WHEN_QUIET and not stream.done.is_set()
                    and now - (stream.last or self.start) >= quiet):
                stream.done.set()  # the thread sees stop later; counters are final

    def senders_acknowledged(self, now: float, limit: float = DRAIN_LIMIT) -> bool:
        """Whether every sending stream has ended and its peer has acknowledged all it
        wrote (or `limit` seconds have passed since it ended). A TCP sender's last writes
        wait in its buffer when it ends, and each of those the path drops is sent again:
        its retransmissions are counted once they are acknowledged."""
        return all(s.done.is_set() and (
            transport_of(s).acknowledged(s) or now - (s.last or self.start) >= limit)
            for s in self.sending)

    def drain_receivers(self, limit: float = DRAIN_LIMIT,
                        expected: dict[int, int] | None = None) -> None:
        """After the peer said the test ended (iperf3's TEST_END): what it wrote before
        that belongs to the test. Wait until every receiving stream has nothing unread
        and nothing new for a moment, at most `limit` seconds. With `expected` (by stream
        number, the bytes the peer says it wrote over the measured part), a stream that
        loses nothing waits for all of them instead: a quiet moment on a busy host is not
        the end of what is on its way."""
        receiving = [s for s in self.receiving if not s.done.is_set()]
        wanted = expected or {}
        began = time.monotonic()
        while time.monotonic() - began < limit:
            now = time.monotonic()
            if all(s.done.is_set() or _arrived(s, self._baseline[s.number].num_bytes,
                                               wanted.get(s.number), now - (s.last or began))
                   for s in receiving):
                return
            time.sleep(0.005)

    def close_senders(self) -> None:
        """End the sending streams alone (a peer that stopped reading waits for their end);
        the receivers go on taking in what is still on its way."""
        self.stop_sending.set()
        _end(self.sending, self._threads)

    def _counted_since_last_interval(self) -> bool:
        return any(transport_of(s).snapshot(s).num_bytes != self._previous[s.number].num_bytes
                   for s in self.streams)

    def _emit(self, mark: float) -> None:
        previous_mark = self.clock.mark(self._mark_index - 1) if self._mark_index else 0.0
        omitted = self.clock.is_omitted(mark)
        # As iperf3: omitted intervals count from the start, measured ones from the end
        # of omitting.
        shift = 0.0 if omitted else self.spec.omit
        records = []
        for stream in self.streams:
            now = transport_of(stream).snapshot(stream)
            before = self._previous[stream.number]
            record = IntervalRecord(stream.number, previous_mark - shift, mark - shift,
                                    now.num_bytes - before.num_bytes, stream.sending, omitted)
            transport_of(stream).fill_interval(stream, record, now, before)
            # What -O leaves out is left out of the delays and frames too.
            if stream.delays is not None:
                record.delays = stream.delays.close_interval(keep=not omitted)
            if stream.write_delays is not None:
                record.write_delays = stream.write_delays.close_interval(keep=not omitted)
            if stream.frames is not None:  # its left out frames are never logged
                stream.frames.log.close_interval()
            self._previous[stream.number] = now
            if omitted and abs(mark - self.spec.omit) < 1e-9:
                self._baseline[stream.number] = now
            records.append(record)
        self.intervals.extend(records)
        if self.on_interval is not None:
            self.on_interval(records)

    def local_results(self) -> list[dict[str, Any]]:
        """Our view of every stream over the measured part (after -O); once finished,
        exactly what finish() returned."""
        if self._final is not None:
            return self._final
        return [self._result(stream) for stream in self.streams]

    def _result(self, stream: Stream) -> dict[str, Any]:
        final = transport_of(stream).snapshot(stream)
        base = self._baseline[stream.number]
        begin = self.start + self.spec.omit
        # A sender stopped by the peer may still be inside its last write: now is when.
        end = stream.last if stream.last is not None else time.monotonic()
        if self.spec.omit == 0 and stream.first is not None:
            begin = stream.first  # a receiver's data starts a path's delay later
        entry: dict[str, Any] = {"stream": stream.number,
                                 "bytes": final.num_bytes - base.num_bytes,
                                 "seconds": round(max(0.0, end - begin), 6),
                                 "sender": stream.sending}
        transport_of(stream).fill_result(stream, entry, final, base)
        _fill_delays(stream, entry, self.spec)
        if stream.error:
            entry["error"] = stream.error
        return entry

    def cpu_percent(self) -> tuple[float, float]:
        """This process's user and system CPU since begin(), in percent of one core."""
        now = os.times()
        wall = max(1e-9, time.monotonic() - self.start)
        return (100.0 * (now.user - self.cpu_before.user) / wall,
                100.0 * (now.system - self.cpu_before.system) / wall)

    def close(self) -> None:
        self.stop.set()
        self.stop_sending.set()
        _end(self.streams, self._threads)

    def errors(self) -> list[str]:
        return [s.error for s in self.streams if s.error]


def _arrived(stream: Stream, baseline: int, expected: int | None, quiet: float) -> bool:
    """A receiving stream has all its peer wrote: as many bytes as it says it wrote over
    the measured part (`expected`, past the `baseline` count), where nothing is lost on
    the way; else nothing unread and nothing new for a moment (`quiet` seconds so far)."""
    transport = transport_of(stream)
    if expected is not None and transport.LOSSLESS:
        return bool(transport.snapshot(stream).num_bytes - baseline >= expected)
    return bool(transport.drained(stream, quiet))


def _end(streams: list[Stream], threads: dict[int, threading.Thread]) -> None:
    """Each stream's socket shut down (its thread wakes and leaves), its thread waited
    for, the socket closed."""
    for stream in streams:
        with contextlib.suppress(OSError):
            stream.sock.shutdown(socket.SHUT_RDWR)
    for stream in streams:
        if (thread := threads.get(id(stream))) is not None:
            thread.join(2)
    for stream in streams:
        stream.sock.close()


def _fill_delays(stream: Stream, entry: dict[str, Any], spec: TestSpec) -> None:
    """One-way delays (a receiver's, --trip-times) and frames (--isochronous), over the
    measured part: -O leaves out the first frames by number at both ends."""
    if stream.delays is not None:
        entry["delays"] = stream.delays.total()
    if stream.write_delays is not None:
        entry["write_delays"] = stream.write_delays.total()
    if stream.frames is not None:
        entry.update(frames=stream.frames.whole, frames_lost=stream.frames.lost,
                     frame_delays=stream.frames.log.total())
    elif stream.sending and spec.isochronous:
        entry.update(frames=max(0, stream.frames_sent - spec.omitted_frames),
                     frames_slipped=stream.frames_slipped)


def cpus() -> list[int]:
    """The CPUs a test's streams may be put on (whatever CPU the process itself was put on
    with -A: a thread's own affinity may differ)."""
    return list(range(os.cpu_count() or 1))


def _on_cpu(cpu: int | None, body: Callable[..., None], stream: Stream,
            *arguments: Any) -> None:
    """A stream thread's body, run on `cpu` (Linux pins the calling thread alone)."""
    if cpu is not None:
        try:
            os.sched_setaffinity(0, {cpu})
        except OSError as error:  # e.g. a CPU this container's cpuset leaves out
            stream.error = f"cannot run on CPU {cpu}: {(error.strerror or str(error)).lower()}"
            stream.done.set()
            return
    body(stream, *arguments)
