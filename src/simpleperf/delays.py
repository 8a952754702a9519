"""One-way delays (--trip-times, --isochronous): their distribution and histogram, as pure
values. A receiver adds each datagram's, write's or frame's delay; an interval's account is
merged into the stream's total when the interval closes.

Delays are the receiver's clock at arrival minus the sender's at sending, so they mean
something only when the two clocks agree (one machine, the lab's namespaces, or hosts kept
within microseconds by PTP). Percentiles are read from the histogram, so they are exact to a
bin's width; count, minimum, mean, maximum and standard deviation are exact.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .description.options import (
    DEFAULT_HISTOGRAM_BIN_WIDTH,
    DEFAULT_HISTOGRAM_BINS,
    DEFAULT_HISTOGRAM_LOWER_CI,
    DEFAULT_HISTOGRAM_UPPER_CI,
    MAX_HISTOGRAM_BIN_WIDTH,
    MAX_HISTOGRAM_BINS,
    MIN_HISTOGRAM_BIN_WIDTH,
)
from .description.testspec import TestSpec

REPORTED_PERCENTILES = (50.0, 90.0, 99.0)
OUTLIER_STDEVS = 3.0  # a delay further than this from the mean is an outlier (as iperf2)


@dataclass(frozen=True)
class Binning:
    """How delays are binned: bin k (1-based, as iperf2 numbers them) holds delays in
    [(k - 1) * width, k * width); below 0 and from count * width on are out of bounds."""

    width: float = DEFAULT_HISTOGRAM_BIN_WIDTH  # seconds
    count: int = DEFAULT_HISTOGRAM_BINS
    lower_ci: float = DEFAULT_HISTOGRAM_LOWER_CI  # percent, for the printed line
    upper_ci: float = DEFAULT_HISTOGRAM_UPPER_CI

    def __post_init__(self) -> None:
        if not (MIN_HISTOGRAM_BIN_WIDTH <= self.width <= MAX_HISTOGRAM_BIN_WIDTH
                and 1 <= self.count <= MAX_HISTOGRAM_BINS
                and 0 <= self.lower_ci < self.upper_ci <= 100):
            raise ValueError("histogram binning out of range")


def binning_of(spec: TestSpec) -> Binning:
    """How a test's receivers bin its delays (--histograms' width and count)."""
    return Binning(spec.histogram_bin_width, spec.histogram_bins)


# How a receiver knew when a TCP write's last byte arrived, for its path delay: the name a
# delay account carries ("arrival"), and what the report says of it.
ARRIVALS = {
    "capture": "kernel send to arrival",  # each segment's, as a capture on the receiver sees it
    "stamped reads": "kernel send to arrival (stamped reads)",  # without the right to capture
    "read": "kernel send to read",  # without stamps: waits behind a lost segment included
}


class DelayAccount:
    """Delays of one stream over some time: exact moments and a sparse histogram."""

    __slots__ = ("binning", "count", "total", "squares", "minimum", "maximum", "bins",
                 "below", "above", "given_percentiles", "arrival")

    def __init__(self, binning: Binning | None = None) -> None:
        self.binning = binning or Binning()
        self.count = 0
        self.total = 0.0
        self.squares = 0.0
        self.minimum = math.inf
        self.maximum = -math.inf
        self.bins: dict[int, int] = {}
        self.below = 0  # negative delays: the clocks disagree
        self.above = 0  # beyond the last bin
        # A peer's p50/p90/p99 in seconds, when its bins did not fit in its results.
        self.given_percentiles: dict[float, float] | None = None
        # a TCP write's path delay: how its arrival was known (a key of ARRIVALS)
        self.arrival: str | None = None

    def add(self, delay: float, times: int = 1) -> None:
        """`times` items that each took `delay` seconds."""
        self.count += times
        self.total += delay * times
        self.squares += delay * delay * times
        if delay < self.minimum:
            self.minimum = delay
        if delay > self.maximum:
            self.maximum = delay
        self._bin(delay, times)

    def add_run(self, first: float, step: float, count: int) -> None:
        """`count` delays first, first + step, ..., evenly spaced (a segmentation-offload
        batch: datagrams sent apart, read together): the moments in closed form."""
        if count <= 0:
            return
        if step == 0 or count == 1:
            self.add(first, count)
            return
        last = first + step * (count - 1)
        self.count += count
        self.total += (first + last) * count / 2
        # sum of (first + i step)^2 for i in 0..count-1
        n = count
        self.squares += (n * first * first + first * step * n * (n - 1)
                         + step * step * (n - 1) * n * (2 * n - 1) / 6)
        self.minimum = min(self.minimum, first, last)
        self.maximum = max(self.maximum, first, last)
        bin_one = self._bin
        for i in range(count):  # binned one by one: the same bins as add() gives each
            bin_one(first + i * step, 1)

    def _bin(self, delay: float, times: int) -> None:
        if delay < 0:
            self.below += times
            return
        index = int(delay / self.binning.width) + 1
        if index > self.binning.count:
            self.above += times
        else:
            self.bins[index] = self.bins.get(index, 0) + times

    def merge(self, other: DelayAccount) -> None:
        if other.count == 0:
            return
        self.count += other.count
        self.total += other.total
        self.squares += other.squares
        self.minimum = min(self.minimum, other.minimum)
        self.maximum = max(self.maximum, other.maximum)
        for index, times in other.bins.items():
            self.bins[index] = self.bins.get(index, 0) + times
        self.below += other.below
        self.above += other.above
        self.arrival = self.arrival or other.arrival

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    @property
    def stdev(self) -> float:
        if self.count < 2:
            return 0.0
        variance = (self.squares - self.total * self.total / self.count) / (self.count - 1)
        return math.sqrt(max(0.0, variance))

    def percentile_bin(self, percent: float) -> int:
        """The bin (1-based; 0 below the first, count + 1 beyond the last) that holds the
        given percentile of the delays."""
        if self.count == 0:
            return 0
        wanted = max(1, math.ceil(self.count * percent / 100.0))
        seen = self.below
        if seen >= wanted:
            return 0
        for index in sorted(self.bins):
            seen += self.bins[index]
            if seen >= wanted:
                return index
        return self.binning.count + 1

    def percentile(self, percent: float) -> float:
        """Seconds: interpolated by rank inside the percentile's bin, kept within min and
        max (exact to a bin's width)."""
        if self.given_percentiles is not None and percent in self.given_percentiles:
            return self.given_percentiles[percent]
        index = self.percentile_bin(percent)
        if index == 0:
            return self.minimum
        if index > self.binning.count:
            return self.maximum
        wanted = max(1, math.ceil(self.count * percent / 100.0))
        before = self.below + sum(times for i, times in self.bins.items() if i < index)
        inside = (wanted - before) / self.bins[index]
        value = (index - 1 + inside) * self.binning.width
        return min(self.maximum, max(self.minimum, value))

    def summary(self) -> dict[str, Any]:
        """Milliseconds, for results and JSON."""
        arrival = {} if self.arrival is None else {"arrival": self.arrival}
        if self.count == 0:
            return {"count": 0, **arrival}
        return {"count": self.count, "min_ms": self.minimum * 1e3, "mean_ms": self.mean * 1e3,
                "max_ms": self.maximum * 1e3, "stdev_ms": self.stdev * 1e3,
                **{f"p{p:.0f}_ms": self.percentile(p) * 1e3 for p in REPORTED_PERCENTILES},
                **arrival}

    def histogram(self) -> dict[str, Any]:
        """The bins that hold anything, for results and JSON."""
        return {"bin_width_ms": self.binning.width * 1e3, "bin_count": self.binning.count,
                "bins": [[index, self.bins[index]] for index in sorted(self.bins)],
                "below": self.below, "above": self.above}

    def to_result(self, with_bins: bool = True) -> dict[str, Any]:
        """What a peer is sent: the moments exactly, the percentiles, and the histogram's
        bins when they fit in the message."""
        histogram = self.histogram()
        if not with_bins:
            histogram["bins"] = []
        return {"count": self.count, "total": self.total, "squares": self.squares,
                "min": self.minimum if self.count else 0.0,
                "max": self.maximum if self.count else 0.0,
                "percentiles": [self.percentile(p) for p in REPORTED_PERCENTILES],
                **histogram, **({} if self.arrival is None else {"arrival": self.arrival})}

    @classmethod
    def from_result(cls, entry: object, max_bins: int) -> DelayAccount:
        """A peer's account, checked; ValueError for anything malformed or too large."""
        if not isinstance(entry, dict):
            raise ValueError("a delay account must be an object")
        count, bins = entry.get("count"), entry.get("bins")
        numbers = [entry.get(name) for name in ("total", "squares", "min", "max",
                                                "bin_width_ms")]
        if (not _is_count(count) or not all(_is_finite(v) for v in numbers)
                or not _is_count(entry.get("below")) or not _is_count(entry.get("above"))
                or not _is_count(entry.get("bin_count")) or not isinstance(bins, list)
                or len(bins) > max_bins):
            raise ValueError("malformed delay account")
        total, squares, least, most, width_ms = (float(v) for v in numbers)  # type: ignore[arg-type]
        account = cls(Binning(width_ms / 1e3, int(entry["bin_count"])))
        for pair in bins:
            if not (isinstance(pair, list) and len(pair) == 2 and _is_count(pair[0])
                    and _is_count(pair[1]) and 1 <= pair[0] <= account.binning.count):
                raise ValueError("malformed delay histogram bin")
            account.bins[pair[0]] = account.bins.get(pair[0], 0) + pair[1]
        assert isinstance(count, int)
        account.count, account.total, account.squares = count, total, squares
        if count:
            account.minimum, account.maximum = least, most
        account.below, account.above = int(entry["below"]), int(entry["above"])
        arrival = entry.get("arrival")
        if arrival is not None and arrival not in ARRIVALS:
            raise ValueError("malformed delay account: an unknown way of timing arrivals")
        account.arrival = arrival
        given = entry.get("percentiles")
        if not bins and count:
            if not (isinstance(given, list) and len(given) == len(REPORTED_PERCENTILES)
                    and all(_is_finite(v) for v in given)):
                raise ValueError("malformed delay percentiles")
            account.given_percentiles = dict(zip(REPORTED_PERCENTILES, map(float, given),
                                                 strict=True))
        return account


def pdf_line(account: DelayAccount, kind: str, ci: tuple[float, float] | None = None) -> str:
    """iperf2's histogram line: `T8-PDF: bin(w=100us):cnt(851)=1:850,2:1
    (5.00/95.00/99.7%=1/1/1,Outliers=0,obl/obu=0/0)`; kind names what was timed, `ci` the
    confidence bins' percentiles (else the binning's)."""
    binning = account.binning
    lower, upper = ci if ci is not None else (binning.lower_ci, binning.upper_ci)
    width_us = binning.width * 1e6
    width = f"{width_us:g}us" if width_us < 1000 else f"{width_us / 1000:g}ms"
    cells = ",".join(f"{index}:{account.bins[index]}" for index in sorted(account.bins))
    bins = "/".join(str(account.percentile_bin(p)) for p in (lower, upper, 99.7))
    return (f"{kind}-PDF: bin(w={width}):cnt({account.count})={cells} "
            f"({lower:.2f}/{upper:.2f}/99.7%={bins},"
            f"Outliers={outliers(account)},obl/obu={account.below}/{account.above})")


def outliers(account: DelayAccount) -> int:
    """Delays further than OUTLIER_STDEVS standard deviations from the mean (by bin)."""
    if account.count < 2:
        return 0
    low = account.mean - OUTLIER_STDEVS * account.stdev
    high = account.mean + OUTLIER_STDEVS * account.stdev
    width = account.binning.width
    return sum(times for index, times in account.bins.items()
               if index * width < low or (index - 1) * width > high) + account.below * (
        low > 0) + account.above


def merged(accounts: Iterable[DelayAccount], binning: Binning | None = None) -> DelayAccount:
    total = DelayAccount(binning)
    for account in accounts:
        total.merge(account)
    return total


class DelayLog:
    """A stream's delays: the open interval's account and the total of the closed ones.
    The receiving thread adds to `current`; the interval clock calls close_interval()."""

    __slots__ = ("binning", "current", "closed", "arrival")

    def __init__(self, binning: Binning) -> None:
        self.binning = binning
        self.current = DelayAccount(binning)
        self.closed = DelayAccount(binning)
        self.arrival: str | None = None  # DelayAccount.arrival, for every account given

    def close_interval(self, keep: bool = True) -> DelayAccount:
        """The interval's account; kept in the total unless it was left out (-O)."""
        interval, self.current = self.current, DelayAccount(self.binning)
        interval.arrival = self.arrival
        if keep:
            self.closed.merge(interval)
        return interval

    def total(self) -> DelayAccount:
        account = merged((self.closed, self.current), self.binning)
        account.arrival = self.arrival
        return account


class FrameAccount:
    """Frames of an isochronous stream as a receiver sees them: a frame is whole when all
    its datagrams came (its delay: from its start at the sender to its last datagram), lost
    when any did not. Frames are judged by number: every frame up to the highest seen that
    is not whole counts as lost, so a frame that never arrived at all counts too.

    -O leaves out the first `left_out` frames by number (those due before omitting ends,
    TestSpec.omitted_frames), as the sender leaves them out of its count: both ends agree
    frame by frame, whenever each end's clock closes the omitted seconds.

    A frame number more than JUMP_LIMIT beyond the highest is not believed (counted bad):
    one forged datagram cannot make millions of frames lost. At most OPEN_LIMIT frames are
    followed at once; the oldest beyond that is given up (lost)."""

    JUMP_LIMIT = 1000
    OPEN_LIMIT = 64

    def __init__(self, binning: Binning, left_out: int = 0) -> None:
        self.log = DelayLog(binning)
        self.highest = 0
        self.whole = 0
        self.bad = 0
        self._open: dict[int, list[Any]] = {}  # frame -> [datagrams, arrived, sent]
        self._judged: set[int] = set()  # frames whole recently (late duplicates ignored)
        self.floor = left_out  # frames up to this number are left out (-O): never counted

    def feed(self, frame: int, datagrams: int, index: int, sent: float,
             arrival: float, amount: int = 1) -> None:
        """One datagram of `frame`, which has `datagrams` of them (this the `index`th);
        or, with `amount`, a frame counted in bytes: its size, where this datagram begins
        in it, and how many bytes it carries (iperf2's frames)."""
        if frame == 0 or datagrams == 0 or index >= datagrams or \
                frame > self.highest + self.JUMP_LIMIT:
            self.bad += 1
            return
        if frame in self._judged or frame + self.OPEN_LIMIT < self.highest:
            return  # a duplicate of a whole frame, or one given up already
        self.highest = max(self.highest, frame)
        state = self._open.get(frame)
        if state is None:
            state = self._open[frame] = [datagrams, 0, sent]
            if len(self._open) > self.OPEN_LIMIT:
                del self._open[min(self._open)]
        state[1] += amount
        if state[1] >= state[0]:
            del self._open[frame]
            self._judged.add(frame)
            if frame <= self.floor:
                return  # begun in what -O left out: neither whole nor lost in the rest
            self.whole += 1
            self.log.current.add(arrival - state[2])
            if len(self._judged) > 4 * self.OPEN_LIMIT:
                self._judged = {f for f in self._judged if f + self.OPEN_LIMIT >= self.highest}

    def cut_by_sender(self, frame: int) -> None:
        """The sender ended the test inside `frame` (iperf2's last datagram says so): the
        rest of it was never sent, so it is neither whole nor lost."""
        if frame in self._judged or frame != self.highest:
            return
        self._open.pop(frame, None)
        self.highest = frame - 1

    def counts(self) -> tuple[int, int]:
        """(frames whole, the highest frame number seen) now."""
        return self.whole, self.highest

    @property
    def lost(self) -> int:
        """Frames up to the highest seen that did not arrive whole (those still open at
        the end included: the sender's last frame left before its deadline), after those
        left out."""
        return max(0, self.highest - self.floor) - self.whole


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and \
        math.isfinite(value)
