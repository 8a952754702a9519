"""Pure functions over measurements: intervals, rates, fairness."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .delays import DelayLog


def jain_index(throughputs: Sequence[float]) -> float:
    """Jain's fairness index: (sum x)^2 / (n * sum x^2); 1.0 is perfectly fair."""
    if not throughputs:
        raise ValueError("fairness of no flows is undefined")
    # in units of the largest: squares of tiny rates (1e-160) would fall into the floats'
    # subnormal range, where they keep a few digits, and the index leave [1/n, 1]
    largest = max(throughputs)
    if largest == 0:
        return 1.0
    scaled = [x / largest for x in throughputs]
    total = math.fsum(scaled)
    return total * total / (len(scaled) * math.fsum(x * x for x in scaled))


def rates_while_all_ran(flows: Sequence[Sequence[tuple[float, float, int]]]
                        ) -> list[float | None]:
    """Each flow's rate (bits/s) over the time every flow was running. flows: per flow,
    (start, end, bytes) intervals on one shared clock; an interval cut by that time counts
    in proportion (its bytes taken as spread evenly over it). At the edges a flow that began
    a little early or ended a little late has the path to itself, which says nothing about
    how the flows shared it. All None when the flows never all ran at once."""
    if not flows or any(not intervals for intervals in flows):
        raise ValueError("every flow needs at least one interval")
    common_start = max(intervals[0][0] for intervals in flows)
    common_end = min(intervals[-1][1] for intervals in flows)
    if common_end <= common_start:
        return [None] * len(flows)
    rates: list[float | None] = []
    for intervals in flows:
        carried = 0.0
        for start, end, size in intervals:
            inside = min(end, common_end) - max(start, common_start)
            if inside > 0 and end > start:
                carried += size * inside / (end - start)
        rates.append(carried * 8 / (common_end - common_start))
    return rates


# Student's t, two-sided 95 %, by degrees of freedom (1..30); beyond that the normal's 1.96.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def mean_confidence(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95 % confidence interval (t distribution); the
    half-width is 0 for a single value."""
    if not values:
        raise ValueError("no values")
    count = len(values)
    mean = sum(values) / count
    if count == 1:
        return mean, 0.0
    variance = sum((v - mean) ** 2 for v in values) / (count - 1)
    t = _T95[count - 2] if count - 1 <= len(_T95) else 1.96
    return mean, t * (variance / count) ** 0.5


class QueueGrowth:
    """How much a path's standing queue grew, from the least one-way delay of blocks of
    packets: the least over the first GROWTH_WINDOW of blocks against the least over the
    latest (the clock offset between the hosts cancels out)."""

    # A queue is standing when even the least delay over this long has grown (CoDel's
    # interval): a sender's burst after a stall fills the queue for a few blocks, then drains.
    GROWTH_WINDOW = 0.1  # seconds

    __slots__ = ("first_window_min", "first_window_end", "recent")

    def __init__(self) -> None:
        self.first_window_min: float | None = None
        self.first_window_end = 0.0
        # (arrival, least delay) of the latest window's blocks that can still be its least
        self.recent: deque[tuple[float, float]] = deque()

    def close(self, least: float, arrival: float) -> None:
        """A block closed: its least delay and its last packet's arrival."""
        if self.first_window_min is None:
            self.first_window_min, self.first_window_end = least, arrival + self.GROWTH_WINDOW
        elif arrival <= self.first_window_end:
            self.first_window_min = min(self.first_window_min, least)
        # A block followed by one at or below it that arrived no earlier can never be the
        # window's least again (the later one stays in the window at least as long): with
        # arrival times in order, the blocks kept rise in least from the oldest.
        recent = self.recent
        while recent and recent[-1][1] >= least and recent[-1][0] <= arrival:
            recent.pop()
        recent.append((arrival, least))
        while recent[0][0] < arrival - self.GROWTH_WINDOW:
            recent.popleft()

    def prune_after(self) -> float:
        """Blocks that arrive after this may be left out when a later one, arriving no
        earlier, is at or below them (the compiled loop does, close() would): those of the
        first window may not."""
        return self.first_window_end if self.first_window_min is not None else math.inf

    @property
    def last_window_min(self) -> float | None:
        return min(least for _, least in self.recent) if self.recent else None

    @property
    def queue_growth(self) -> float | None:
        """Seconds the one-way delay grew from the first to the latest GROWTH_WINDOW of
        packets: a sender faster than the path fills its queue long before it loses
        anything, while a burst that drains again leaves the least delay where it was."""
        last = self.last_window_min
        if self.first_window_min is None or last is None:
            return None
        return last - self.first_window_min


class UdpReceiveAccount:
    """Loss, reordering and jitter of one UDP stream, as iperf3 and RFC 1889 define them.

    Packet numbers start at 1. A gap counts the missing numbers as lost; a number below
    the highest seen is out of order and takes one back from lost. `packets` is the
    highest number seen (what the sender sent, as far as the receiver can tell). Jitter
    smooths |transit - previous transit| with gain 1/16; the first packet only sets the
    transit, so a clock offset between the hosts never enters it.

    One datagram cannot move the account far: a number more than JUMP_LIMIT beyond the
    highest is counted provisionally and confirmed by the next datagram following on from
    it (a real gap, however long). If the next one carries on from before instead, the far
    one was stray or forged: it is undone and counted as one `bad` datagram, not as
    millions lost. An unconfirmed jump never enters `packets` or `settled_lost`.
    """

    BLOCK = 32  # packets per block of the queue-growth estimate
    JUMP_LIMIT = 1000

    __slots__ = ("highest", "lost", "out_of_order", "jitter", "received", "bad", "_transit",
                 "socket_drops", "host_dropped", "growth", "_block_min", "_block_count",
                 "_undo", "delays")

    def __init__(self, delays: DelayLog | None = None) -> None:
        self.delays = delays  # --trip-times: every datagram's one-way delay
        self.highest = 0
        self.lost = 0
        self.out_of_order = 0
        self.jitter = 0.0  # seconds
        self.received = 0
        self.bad = 0
        # The socket's drops by its latest message (SO_RXQ_OVFL); of `lost`, the host's.
        self.socket_drops = self.host_dropped = 0
        # A far jump not yet confirmed: the highest and lost before it, and its number.
        self._undo: tuple[int, int, int] | None = None
        self._transit: float | None = None
        self.growth = QueueGrowth()  # the least delay of each block of BLOCK packets
        self._block_min = float("inf")
        self._block_count = 0

    def host_gap_begins(self, drops: int) -> int | None:
        """Before a message the socket queued when it had dropped `drops`: if that rose, what
        it adds to `lost` is the host's (give host_gap_ends() the `lost` this returns)."""
        if drops <= self.socket_drops:
            return None
        self.socket_drops = drops
        return self.lost

    def host_gap_ends(self, lost_before: int | None) -> None:
        self.host_dropped += 0 if lost_before is None else max(0, self.lost - lost_before)

    def feed(self, number: int, sent: float, arrival: float) -> None:  # seconds, both
        self.feed_packets(((number, sent, arrival),))

    def feed_many(self, packets: Iterable[tuple[int, float]], arrival: float) -> None:
        """`packets`: (packet number, send time) pairs that arrived together."""
        self.feed_packets((number, sent, arrival) for number, sent in packets)

    def feed_packets(self, packets: Iterable[tuple[int, float, float]]) -> None:
        """`packets`: (packet number, send time, arrival time) in arrival order."""
        highest, lost, ooo, jitter, transit = (self.highest, self.lost, self.out_of_order,
                                               self.jitter, self._transit)
        block_min, block_count, block = self._block_min, self._block_count, self.BLOCK
        jump_limit, undo, bad = self.JUMP_LIMIT, self._undo, self.bad
        delays = self.delays
        count = 0
        for number, sent, arrival in packets:
            count += 1
            if undo is not None:  # rare: the datagram after a far jump judges it
                before, lost_before, jumped = undo
                undo = None
                if not 0 < number - jumped <= jump_limit and number <= before + jump_limit:
                    highest, lost, bad = before, lost_before, bad + 1
            if number > highest:
                if number - highest > jump_limit:
                    undo = (highest, lost, number)  # no jitter from it until believed
                    lost += number - highest - 1
                    highest = number
                    continue
                lost += number - highest - 1
                highest = number
            else:
                ooo += 1
                if lost > 0:
                    lost -= 1
            now_transit = arrival - sent
            if delays is not None:
                delays.current.add(now_transit)
            if transit is not None:
                jitter += (abs(now_transit - transit) - jitter) / 16.0
            transit = now_transit
            if now_transit < block_min:
                block_min = now_transit
            block_count += 1
            if block_count == block:
                self.growth.close(block_min, arrival)
                block_min, block_count = float("inf"), 0
        self.highest, self.lost, self.out_of_order, self.jitter, self._transit = (
            highest, lost, ooo, jitter, transit)
        self._undo, self.bad = undo, bad
        self._block_min, self._block_count = block_min, block_count
        self.received += count

    def feed_run(self, first: int, count: int, sent: float, arrival: float,
                 last_sent: float | None = None) -> None:
        """`count` packets numbered first, first+1, ..., sent from `sent` to `last_sent`
        (the same instant when None) at even spacing and arriving together (one
        segmentation-offload batch): the same result as feeding each, in O(count / BLOCK)
        instead of O(count)."""
        step = 0.0 if last_sent is None or count < 2 else (last_sent - sent) / (count - 1)
        if (first <= self.highest or count < 1 or self._undo is not None
                or first - self.highest > self.JUMP_LIMIT or step < 0):
            self.feed_many(((first + i, sent + i * step) for i in range(count)), arrival)
            return
        self.lost += first - self.highest - 1
        self.highest = first + count - 1
        now_transit = arrival - sent
        if self.delays is not None:
            self.delays.current.add_run(now_transit, -step, count)
        if self._transit is not None:
            self.jitter += (abs(now_transit - self._transit) - self.jitter) / 16.0
        # Each of the other count - 1 packets differs from the one before by `step` in
        # transit: D = step every time, and the RFC 3550 update has a closed form.
        self.jitter = step + (self.jitter - step) * (15.0 / 16.0) ** (count - 1)
        self._transit = arrival - (sent + (count - 1) * step)
        remaining, done = count, 0
        while remaining:
            take = min(remaining, self.BLOCK - self._block_count)
            # the latest sent of these has the least transit
            self._block_min = min(self._block_min, now_transit - (done + take - 1) * step)
            self._block_count += take
            remaining -= take
            done += take
            if self._block_count == self.BLOCK:
                self.growth.close(self._block_min, arrival)
                self._block_min, self._block_count = float("inf"), 0
        self.received += count

    # The compiled fast path's view of the account (transport/compiled.py): the part of the
    # state feed_run changes, handed out and taken back whole.
    RunState = tuple[int, int, float, "float | None", float, int, int]
    MAX_COMPILED_NUMBER = 1 << 62  # C's integers; beyond, Python's

    def runs_compilable(self) -> bool:
        """Whether the next packets may be accounted by the compiled feed_run: no far jump
        waits for its judgement, no one-way delays are logged, and the numbers fit C's."""
        return (self._undo is None and self.delays is None
                and self.highest < self.MAX_COMPILED_NUMBER)

    def run_state(self) -> RunState:
        return (self.highest, self.lost, self.jitter, self._transit, self._block_min,
                self._block_count, self.received)

    def set_run_state(self, state: RunState, closed: list[tuple[float, float]]) -> None:
        """Take back the state, and the blocks closed meanwhile as (least transit, arrival)."""
        (self.highest, self.lost, self.jitter, self._transit, self._block_min,
         self._block_count, self.received) = state
        for least, arrival in closed:
            self.growth.close(least, arrival)

    @property
    def queue_growth(self) -> float | None:
        return self.growth.queue_growth

    @property
    def packets(self) -> int:
        """What the sender sent, as far as the receiver can tell."""
        return self._undo[0] if self._undo is not None else self.highest

    @property
    def settled_lost(self) -> int:
        return self._undo[1] if self._undo is not None else self.lost


def lost_percent(lost: int, packets: int) -> float:
    return 100.0 * lost / packets if packets > 0 else 0.0


def percentile(values: Sequence[float], fraction: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); fraction in 0..1."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class RttSummary:
    """Round-trip times in milliseconds, summarised as ping does, plus percentiles."""

    count: int
    minimum: float
    average: float
    maximum: float
    mdev: float
    p50: float
    p90: float
    p99: float

    trimmed: float  # the draft's single-sided trimmed mean (RPM_TRIM kept)
    samples: tuple[float, ...] = ()  # each round trip, in the order they came

    @property
    def rpm(self) -> float:
        """Round trips per minute over these probes' trimmed mean (see rpm())."""
        return rpm(self.trimmed)


def summarise_rtt(samples_ms: Sequence[float]) -> RttSummary | None:
    if not samples_ms:
        return None
    count = len(samples_ms)
    average = sum(samples_ms) / count
    square_mean = sum(x * x for x in samples_ms) / count
    return RttSummary(count, min(samples_ms), average, max(samples_ms),
                      max(0.0, square_mean - average * average) ** 0.5,
                      percentile(samples_ms, 0.5), percentile(samples_ms, 0.9),
                      percentile(samples_ms, 0.99), trimmed_mean(samples_ms),
                      tuple(samples_ms))


# Responsiveness, as draft-ietf-ippm-responsiveness defines it: round trips per minute,
# 60000 over a round trip in milliseconds, the round trip a single-sided trimmed mean that
# keeps the lowest 95 % of the samples. `--rpm` runs the draft's whole method (ramped load,
# probes on new and on loaded connections); a test's `latency` block applies the same
# arithmetic to the probes it has (on one separate connection, already open).
RPM_TRIM = 0.95


def trimmed_mean(values: Sequence[float], keep: float = RPM_TRIM) -> float:
    """The mean of the lowest `keep` of the values (at least one of them)."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    kept = ordered[:max(1, int(len(ordered) * keep))]
    return sum(kept) / len(kept)


def rpm(round_trip_ms: float) -> float:
    """Round trips per minute; 0 for a round trip that is not positive."""
    return 60000.0 / round_trip_ms if round_trip_ms > 0 else 0.0


def responsiveness(foreign_ms: Sequence[float], loaded_ms: float
                   ) -> tuple[float, float, float]:
    """The draft's weighted mean over trimmed means: (foreign, loaded, responsiveness) RPM.
    A foreign probe's round trips (the TCP handshake, the TLS handshake where there is one,
    the request on the new connection) are averaged into one; the responsiveness is 60000
    over the mean of that and the loaded request: with TLS, 60000 / (1/6 (TM(tcp_f) +
    TM(tls_f) + TM(http_f)) + 1/2 TM(http_l)), the draft's formula."""
    foreign = sum(foreign_ms) / len(foreign_ms)
    return rpm(foreign), rpm(loaded_ms), rpm((foreign + loaded_ms) / 2)


RPM_RATINGS = ((6000.0, "Excellent"), (1000.0, "Good"), (300.0, "Fair"), (0.0, "Poor"))


def rpm_rating(value: float) -> str:
    """The draft's four classes: 300, 1000 and 6000 RPM (200, 60 and 10 ms) between them."""
    return next(name for floor, name in RPM_RATINGS if value >= floor)
