"""The delay line of the own shaper: holds queued packets' verdicts, never their bytes.

Packets stay in the kernel (NFQUEUE, metadata-only copies); this process learns their ids
and kernel arrival times and, when their time has come, accepts them. Ids are sequential
per queue, so in-order release is one verdict for everything that arrived before a moment:
Python does work per read of a socket, not per packet. With jitter that may reorder, each
packet gets its own release time and verdict.

Timing: arrival is the kernel's receive timestamp (enabled by holding one socket with
SO_TIMESTAMP), not when this process got round to reading; wake-ups are scheduled early by
the lateness the timer has shown so far (about 0.1-0.2 ms on a VM).

A direction whose queue the lab's own discipline runs (bottleneck.py) is read with each
packet's first bytes, one packet at a time; the delay line then owns its rate, queue and
discipline as well as its delay, gives each packet its own verdict (drop, or accept,
perhaps marked for the wire's rule to set CE) and is woken for the wire's departures.

Run as: python3 -m simpleperf.lab.net.shaping.delayline PLAN.json (the lab starts and stops it)
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import heapq
import json
import os
import random
import select
import signal
import socket
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ....transport import compiled
from ....transport.udp import SO_RCVBUFFORCE
from ...model import traces
from ..system import namespace_inode
from . import aqm, nfqueue
from .bottleneck import Bottleneck, TraceWire, Wire, packet_of

queue_reader = compiled.built("simpleperf.lab.net.shaping._queue_reader")

CLONE_NEWNET = 0x40000000
PR_SET_TIMERSLACK = 29
SO_TIMESTAMP = 29
SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5
MAX_QUEUED_PACKETS = 200_000
RECEIVE_BUFFER = 32 << 20
REALTIME_PRIORITY = 10
MAX_LATENESS = 0.002  # seconds; beyond this a wake-up was not the timer's doing
SEND_CHUNK = 1 << 16  # bytes of verdicts per send
# Packets that fall due within this of the next release wait for it: one wake-up for them
# all. A wake-up costs tens of microseconds of system calls and Python, and at 1 Gbit/s a
# packet falls due every 12 us: 0.86 x 1 Gbit/s through the own fq_codel without it, 0.90
# with it (bench/queues.py). Packets further apart than this never wait for each other.
RELEASE_GRAIN = 300e-6  # seconds
LATE_SECONDS = 0.02  # a release this late is no timer's: the process could not keep up
REPORT_SECONDS = 0.1  # how often, at most, it says how many releases were late
QUEUES_SECONDS = 0.5  # how often it says what its own disciplines hold and dropped
LATE_SUFFIX, QUEUES_SUFFIX = ".late", ".queues"  # the files it says them in, beside its plan


@dataclass
class DirectionQueue:
    """One direction of one link: its kernel queue, socket and release schedule."""

    number: int
    delay: float
    jitter: float
    reorder: bool
    sock: socket.socket | None = None  # bound by serve()
    bottleneck: Bottleneck | None = None  # the own discipline's queue, rate and delay
    discipline: tuple[str, str] | None = None  # discipline_key of its plan entry

    @property
    def netlink(self) -> socket.socket:
        assert self.sock is not None, "the queue's socket is opened by serve()"
        return self.sock
    in_order: deque = field(default_factory=deque)  # (release time, highest id)
    by_time: list[Any] = field(default_factory=list)  # heap of (release time, id)
    last_release: float = 0.0
    last_read: float = 0.0  # when the kernel queue was last read to its end
    stamped: bool = True  # the kernel gives arrival times (else arrival is when read)
    verdicts: nfqueue.Verdicts = field(init=False)  # the own discipline's, by id
    late: int = 0  # releases LATE_SECONDS or more after their time: this process fell behind

    def __post_init__(self) -> None:
        self.verdicts = nfqueue.Verdicts(self.number)

    @property
    def unread_wait(self) -> float:
        """How long a packet that is not read yet must wait at least: without jitter every
        packet waits the delay, so this queue need not be read more often than that, as long
        as the kernel stamps arrivals."""
        return self.delay if self.jitter == 0 and self.stamped else 0.0

    def admit(self, arrivals: list[tuple[int, float, int, bytes]], rng: random.Random
              ) -> None:
        """arrivals: (packet id, monotonic arrival time, length, first bytes), in id order.
        Each packet leaves its own delay after its own arrival (a read may hold many packets,
        which arrived apart), or goes to the bottleneck's discipline."""
        if self.bottleneck is not None:
            self.verdicts.arrived([arrival[0] for arrival in arrivals])
            self.bottleneck.arrive([packet_of(*arrival) for arrival in arrivals])
            return
        if self.reorder and self.jitter > 0:
            for packet_id, arrived, _, _ in arrivals:
                wait = max(0.0, rng.gauss(self.delay, self.jitter))
                heapq.heappush(self.by_time, (arrived + wait, packet_id))
            return
        in_order, last_release = self.in_order, self.last_release
        for packet_id, arrived, _, _ in arrivals:
            wait = (self.delay if self.jitter == 0
                    else max(0.0, rng.gauss(self.delay, self.jitter)))
            # A packet never leaves before one that entered the link earlier.
            release = max(arrived + wait, last_release)
            last_release = release
            if in_order and in_order[-1][0] == release:
                in_order[-1] = (release, packet_id)
            else:
                in_order.append((release, packet_id))
        self.last_release = last_release

    def due(self, now: float) -> list[bytes]:
        if self.bottleneck is not None:
            return self._bottleneck_due(now)
        messages = []
        highest = None
        behind = now - LATE_SECONDS
        while self.in_order and self.in_order[0][0] <= now:
            release, highest = self.in_order.popleft()
            self.late += release <= behind
        if highest is not None:
            messages.append(nfqueue.verdict_up_to(self.number, highest))
        while self.by_time and self.by_time[0][0] <= now:
            release, number = heapq.heappop(self.by_time)
            self.late += release <= behind
            messages.append(nfqueue.verdict(self.number, number))
        return messages

    def _bottleneck_due(self, now: float) -> list[bytes]:
        assert self.bottleneck is not None
        released = [(packet.id, nfqueue.CE_MARK if packet.marked else None)
                    for packet in self.bottleneck.due(now)]
        return self.verdicts.messages(
            released, [packet.id for packet in self.bottleneck.take_dropped()])

    def release_all(self) -> list[bytes]:
        """Every packet held, accepted now (the queue leaves the lab's own discipline)."""
        messages = self.due(float("inf"))
        self.in_order.clear()
        self.by_time.clear()
        return messages

    def wake_time(self, grain: float) -> float | None:
        """When to wake for this queue's releases: at its next one, or, where more fall due
        within `grain` of it, at the last of those, one wake-up for them all (at 1 Gbit/s a
        packet falls due every 12 us, and a wake-up costs tens of microseconds). A packet
        never leaves early, and at most `grain` late beside those due with it."""
        first = self.next_release()
        if first is None or grain <= 0 or self.by_time:
            return first
        last = first
        for release, _ in self.bottleneck.sent if self.bottleneck is not None else self.in_order:
            if release > first + grain:
                break
            last = release
        return last

    def next_release(self) -> float | None:
        if self.bottleneck is not None:
            return self.bottleneck.next_event()
        if self.in_order:
            first = self.in_order[0][0]
            return min(first, self.by_time[0][0]) if self.by_time else first
        return self.by_time[0][0] if self.by_time else None


def open_queue_socket(namespace: str | None, number: int, headers: bool = False
                      ) -> socket.socket:
    """A netlink socket created inside `namespace` (it stays bound there), bound to a queue
    (`headers`: each packet's first bytes copied, see nfqueue.mode)."""
    libc = ctypes.CDLL(None, use_errno=True)
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    try:
        if namespace:
            target = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
            try:
                if libc.setns(target, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"cannot enter namespace {namespace}")
            finally:
                os.close(target)
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, nfqueue.NETLINK_NETFILTER)
    finally:
        if namespace:
            libc.setns(home, CLONE_NEWNET)
        os.close(home)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RECEIVE_BUFFER)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
    sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
    sock.bind((0, 0))
    for message in nfqueue.bind(number, MAX_QUEUED_PACKETS, headers):
        sock.send(message)
        failures = [code for code in nfqueue.errors(sock.recv(65536)) if code]
        if failures:
            raise OSError(failures[0], f"cannot bind queue {number} in {namespace}: "
                                       f"{os.strerror(failures[0])}")
    sock.setblocking(False)
    return sock


def bottleneck_of(entry: dict[str, Any], rng: random.Random) -> Bottleneck | None:
    """The own discipline's bottleneck a plan entry asks for: a "qdisc" with a "rate" (bits/s)
    or a "trace" (a file's path), and the discipline's settings (stages.delay_line_entry
    writes them)."""
    if entry.get("qdisc") is None:
        return None
    settings = aqm.Settings(**entry["settings"])
    wire = None
    if entry.get("trace"):  # it began at "epoch" (wall clock), else now
        began = time.monotonic() - (time.time() - entry.get("epoch", time.time()))
        wire = TraceWire(traces.load(entry["trace"]), began)
    return Bottleneck(entry["rate"], aqm.make(entry["qdisc"], settings), entry["delay"],
                      entry["jitter"], rng, wire)


def serve(plan: list[dict[str, Any]],
          reread: Callable[[], list[dict[str, Any]]] | None = None,
          report: Callable[[dict[int, int]], None] | None = None,
          report_queues: Callable[[dict[int, dict[str, int]]], None] | None = None
          ) -> None:
    """plan: [{"namespace", "queue", "delay", "jitter", "reorder", and for the own
    discipline "qdisc", "rate", "settings"}, ...] (seconds, bits/s). `reread`: returns the
    plan again after a SIGHUP (`lab link set` changed the link); a queue's new delay applies
    to the packets that arrive from then on. `report`: given each queue's late releases
    (DirectionQueue.late) when they change, at most every REPORT_SECONDS. `report_queues`:
    given each own discipline's queue (packets, bytes) and its drops and marks so far,
    every QUEUES_SECONDS."""
    _run_ahead()
    # Holding a socket that asks for receive timestamps makes the kernel stamp every packet
    # on arrival; the queue messages then carry the true arrival time.
    stamper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    stamper.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMP, 1)
    reader = QueueReader()
    queues = [DirectionQueue(e["queue"], e["delay"], e["jitter"], e["reorder"],
                             bottleneck=bottleneck_of(e, reader.rng),
                             discipline=discipline_key(e)) for e in plan]
    for queue, entry in zip(queues, plan, strict=True):
        queue.sock = open_queue_socket(entry["namespace"], entry["queue"],
                                       queue.bottleneck is not None)
    watchdog = NamespaceWatch([e["namespace"] for e in plan if e["namespace"]])
    clock = time.monotonic
    lateness = Lateness(timer_lateness(clock))
    signal.signal(signal.SIGTERM, _stop)  # raising, so that a waiting select() ends at once
    signal.signal(signal.SIGINT, _stop)
    reloads = ReloadSignal()
    reported_at, last_late = 0.0, {queue.number: 0 for queue in queues}
    queues_at = 0.0
    print("ready", flush=True)
    with stamper:
        while True:
            listened, target = _wake_plan(queues)
            timeout = 0.5 if target is None else max(0.0, target - lateness.value - clock())
            try:
                ready, _, _ = select.select([*(s.fileno() for s in listened), reloads.fd],
                                            [], [], timeout)
            except InterruptedError:
                continue
            if reloads.fd in ready and reloads.take() and reread is not None:
                _apply(queues, reread(), reader.rng)
            now = clock()
            if watchdog.gone(now):
                return
            timed = target if not ready and target is not None and timeout > 0 else None
            reader.read(queues, now)
            now = clock()
            if timed is not None:
                lateness.learn(now - timed)
            for queue in queues:
                _send(queue.netlink, queue.due(now))
            if report is not None and now >= reported_at + REPORT_SECONDS:
                late = {queue.number: queue.late for queue in queues}
                if late != last_late:
                    report(late)
                    last_late = late
                reported_at = now
            if report_queues is not None and now >= queues_at + QUEUES_SECONDS:
                report_queues(queue_stats(queues))
                queues_at = now


def _send(sock: socket.socket, messages: list[bytes]) -> None:
    """Verdicts, many to a send (the kernel reads every message of one)."""
    if len(messages) == 1:
        sock.send(messages[0])
        return
    batch: list[bytes] = []
    size = 0
    for message in messages:
        if size + len(message) > SEND_CHUNK:
            sock.send(b"".join(batch))
            batch, size = [], 0
        batch.append(message)
        size += len(message)
    if batch:
        sock.send(b"".join(batch))


def _run_ahead() -> None:
    """A late release sends a whole batch at once into the next link's queue, a burst no
    wire would make: run ahead of ordinary processes, as netem does in softirq. The process
    sleeps in select() between releases, and the kernel's real-time throttling still holds."""
    libc = ctypes.CDLL(None)
    libc.prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(REALTIME_PRIORITY))
    except (OSError, AttributeError):
        with contextlib.suppress(OSError):
            os.nice(-10)


def _wake_plan(queues: list[DirectionQueue]) -> tuple[list[socket.socket], float | None]:
    """The sockets to listen on and when to wake: for the next release, and to read a busy
    queue before anything unread in it can fall due; not for every arrival (the kernel
    stamped it), which at 1 Gbit/s would be a wake-up per acknowledgement. An idle queue
    wakes us when a packet comes."""
    wakes, listened = [], []
    for queue in queues:
        release = queue.wake_time(RELEASE_GRAIN)
        if release is None or queue.unread_wait == 0:
            listened.append(queue.netlink)
        else:
            wakes.append(queue.last_read + queue.unread_wait)
        if release is not None:
            wakes.append(release)
    return listened, (min(wakes) if wakes else None)


class NamespaceWatch:
    """The delay line lives as long as its namespaces: if they are removed (even by someone
    who never knew this process existed) it leaves too."""

    PERIOD = 0.5

    def __init__(self, namespaces: list[str]) -> None:
        self.inodes = {name: namespace_inode(name) for name in namespaces}
        self.next_check = 0.0

    def gone(self, now: float) -> bool:
        if now < self.next_check:
            return False
        self.next_check = now + self.PERIOD
        return any(namespace_inode(name) != inode for name, inode in self.inodes.items())


class Lateness:
    """How late, after a timed wait, the release point is reached: the timer's lateness and
    the work since the wake-up (slow on a VM whose CPU was idle), smoothed."""

    def __init__(self, start: float) -> None:
        self.value = start

    def learn(self, past_target: float) -> None:
        """`past_target`: how long after its target a timed wait's work got here; the wait
        was cut short by the current value, so the lateness seen is their sum."""
        seen = past_target + self.value
        self.value += 0.1 * (seen - self.value)
        self.value = min(max(self.value, 0.0), MAX_LATENESS)


class QueueReader:
    """Reads every queue's arrivals (ids and kernel stamps, never packet bytes): many
    messages per system call with the compiled reader, else one (a netlink read returns
    one message, and the kernel sends one per packet)."""

    SLOT = 1024  # bytes for one message; a metadata-only packet message is about 100

    def __init__(self) -> None:
        self.compiled = compiled.used(queue_reader)
        self.buffer = bytearray(self.compiled.MAX_MESSAGES * self.SLOT if self.compiled
                                else 4 << 20)
        self.view = memoryview(self.buffer)
        self.rng = random.Random()

    def read(self, queues: list[DirectionQueue], now: float) -> None:
        """Every queue's new arrivals, admitted at their kernel stamps. A stamp is never
        taken past the moment its batch was read (a packet cannot arrive later than that),
        and never clamped to `now`, the wake-up's time: packets keep arriving while the
        queues are drained, and one stamped after `now` would leave early by the
        difference (seen: 0.3-1.4 ms early on a busy 2-core machine)."""
        offset = wall_minus_monotonic()  # kernel stamps are wall-clock; ours is monotonic
        clock = time.monotonic
        for queue in queues:
            queue.last_read = now
            for packets in self.batches(queue.netlink):
                read_at = clock()
                arrivals = []
                for packet_id, stamp, length, header in packets:
                    if stamp is None:
                        queue.stamped = False
                    arrivals.append((packet_id, read_at if stamp is None
                                     else min(read_at, stamp - offset), length, header))
                if arrivals:
                    queue.admit(arrivals, self.rng)

    def batches(self, sock: socket.socket) -> Iterator[list[nfqueue.Queued]]:
        """The queued packets waiting in `sock`, a batch at a time, until it is empty."""
        if self.compiled is not None:
            drained = False
            while not drained:
                packets, drained = self.compiled.drain(sock.fileno(), self.buffer, self.SLOT)
                yield packets
            return
        while True:
            try:
                count = sock.recv_into(self.buffer)
            except BlockingIOError:
                return
            except OSError as error:
                if error.errno == errno.ENOBUFS:
                    continue
                raise
            yield nfqueue.packets(self.view[:count])


def wall_minus_monotonic(samples: int = 3) -> float:
    """The wall clock's lead over the monotonic one, from readings taken back to back (the
    pair least apart): a VM stalled between two readings taken further apart would move
    every arrival early by the stall, and release its packets that much too soon."""
    best_span, best = float("inf"), 0.0
    for _ in range(samples):
        before = time.monotonic()
        wall = time.time()
        after = time.monotonic()
        if after - before < best_span:
            best_span, best = after - before, wall - (before + after) / 2
    return best


def timer_lateness(clock, samples: int = 15, sleep: float = 0.003) -> float:
    """How late a timed wait ends on this machine (the median of a few): the first releases
    are then as punctual as later ones, instead of late until the smoothing has learnt it."""
    late = []
    for _ in range(samples):
        began = clock()
        select.select([], [], [], sleep)
        late.append(clock() - began - sleep)
    late.sort()
    return min(max(late[len(late) // 2], 0.0), MAX_LATENESS)


class Stopped(Exception):
    pass



def _apply(queues: list[DirectionQueue], plan: list[dict[str, Any]],
           rng: random.Random) -> None:
    """A link set anew: delays and rates apply to what arrives from now on. A queue that
    changes discipline hands on what waited in the old one (in arrival order); one that
    joins or leaves the own discipline accepts what it held at once."""
    by_number = {entry["queue"]: entry for entry in plan}
    for queue in queues:
        entry = by_number.get(queue.number)
        if entry is None:
            continue
        queue.delay, queue.jitter = entry["delay"], entry["jitter"]
        queue.reorder = entry["reorder"]
        old, key = queue.bottleneck, discipline_key(entry)
        if key == queue.discipline:
            if old is not None:
                if not entry.get("trace"):
                    old.wire = Wire(entry["rate"])
                old.delay, old.jitter = entry["delay"], entry["jitter"]
            continue
        if old is None or key is None:
            _send(queue.netlink, nfqueue.mode(queue.number, key is not None))
            _send(queue.netlink, queue.release_all())
            queue.bottleneck = bottleneck_of(entry, rng)
            queue.verdicts = nfqueue.Verdicts(queue.number)
        else:
            new = bottleneck_of(entry, rng)
            assert new is not None
            new.free_at, new.last_release, new.sent = old.free_at, old.last_release, old.sent
            new.arrive(old.discipline.drain())
            queue.bottleneck = new
        queue.discipline = key


def discipline_key(entry: dict[str, Any]) -> tuple[str, str] | None:
    """What makes two plan entries the same discipline (a rate or delay changes in place)."""
    if entry.get("qdisc") is None:
        return None
    return entry["qdisc"], json.dumps(entry["settings"], sort_keys=True)


def _stop(signum, frame):
    raise Stopped


class ReloadSignal:
    """SIGHUP wakes the loop through a pipe: the handler never interrupts a release."""

    def __init__(self) -> None:
        self.fd, self._write = os.pipe()
        os.set_blocking(self.fd, False)
        os.set_blocking(self._write, False)
        signal.signal(signal.SIGHUP, self._signalled)

    def _signalled(self, signum, frame) -> None:
        with contextlib.suppress(BlockingIOError):
            os.write(self._write, b"!")

    def take(self) -> bool:
        """Was a SIGHUP received since the last call?"""
        try:
            return bool(os.read(self.fd, 4096))
        except BlockingIOError:
            return False


def queue_stats(queues: list[DirectionQueue]) -> dict[int, dict[str, int]]:
    """Each own discipline's queue now and its drops and marks so far, by kernel queue."""
    return {queue.number: {"packets": queue.bottleneck.discipline.packets,
                           "bytes": queue.bottleneck.discipline.bytes,
                           "drops": queue.bottleneck.discipline.drops,
                           "marks": queue.bottleneck.discipline.marks}
            for queue in queues if queue.bottleneck is not None}


def beside(plan: str, suffix: str) -> str:
    """A file the delay line of plan file PLAN.json writes beside it: PLAN`suffix` (how
    late it fell: LATE_SUFFIX; what its queues hold: QUEUES_SUFFIX)."""
    return (plan[:-len(".json")] if plan.endswith(".json") else plan) + suffix


def write_counts(path: str, late: dict[int, Any]) -> None:
    """Each queue's late releases (or its statistics) so far, as JSON, replaced whole."""
    with contextlib.suppress(OSError):
        with open(path + ".new", "w") as out:
            json.dump({str(number): count for number, count in late.items()}, out)
        os.replace(path + ".new", path)


def read_late(path: str) -> dict[int, int]:
    """What write_counts wrote of late releases; empty when there is nothing (yet), or
    nothing readable."""
    try:
        with open(path) as given:
            raw = json.load(given)
        return {int(number): int(count) for number, count in raw.items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def main(argv: list[str]) -> int:
    def reread() -> list[dict[str, Any]]:
        with open(argv[0]) as config:
            return list(json.load(config))

    def report(late: dict[int, int]) -> None:
        write_counts(beside(argv[0], LATE_SUFFIX), late)

    def report_queues(stats: dict[int, dict[str, int]]) -> None:
        write_counts(beside(argv[0], QUEUES_SUFFIX), stats)

    try:
        serve(reread(), reread, report, report_queues)
    except Stopped:
        pass
    except OSError as error:
        print(f"delay line: {error}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
