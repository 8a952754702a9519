"""draft-ietf-ippm-responsiveness's algorithm (section "Final Algorithm"), sans IO: fed the
bytes each interval moved and the probes that came back, it says how many load-generating
connections to add, when goodput and then responsiveness are stable, and the result with
the draft's confidence. The measuring (sockets, threads) is native/responsiveness.py's."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from ..stats import RPM_TRIM, responsiveness, rpm_rating, trimmed_mean
from .unsent import MIN_UNSENT, UnsentLimit

CONNECT, TLS, FOREIGN, LOADED = "connect", "tls", "foreign", "loaded"  # tcp_f, tls_f,
# http_f, http_l: a foreign probe's round trips, then a self probe's
PROBE_KINDS = (CONNECT, FOREIGN, LOADED)  # over TCP alone (the native protocol, h2c)
TLS_PROBE_KINDS = (CONNECT, TLS, FOREIGN, LOADED)  # over TLS (HTTPS)
FOREIGN_PROBE_BYTES = 5000  # the draft's estimates of what a probe costs the path
SELF_PROBE_BYTES = 1000
LOW, MEDIUM, HIGH = "Low", "Medium", "High"
# What a load connection's sender keeps unsent: the draft asks for TCP_REPLENISH_TIME of
# 5 ms at both ends, or where there is none TCP_NOTSENT_LOWAT set to 5 ms of the
# connection's own measured rate; a bulk record is no longer, so a self probe's answer
# waits behind about 5 ms of data in the sender, not behind its whole socket buffer.
REPLENISH_SECONDS = 0.005
INITIAL_UNSENT = 11 * MIN_UNSENT  # 16.5 kB, until the rate is known
MAX_RECORD = 43 * MIN_UNSENT  # 64.5 kB: a bulk record's largest (protocol/load.py caps above)


class LoadUnsentLimit(UnsentLimit):
    """A load sender's unsent limit and bulk record size, from its own delivered bytes."""

    def __init__(self) -> None:
        super().__init__(REPLENISH_SECONDS, INITIAL_UNSENT)

    @property
    def record(self) -> int:
        """A bulk record's payload: the limit, up to MAX_RECORD."""
        return min(self.limit, MAX_RECORD)


@dataclass(frozen=True)
class RpmParameters:
    """The draft's test parameters, its defaults but for the interval: the draft's table
    says 5 s (a full run then takes 40 s or more); a second keeps a run near 10 to 20 s."""

    interval: float = 1.0  # ID
    mad: int = 4  # moving average distance, in intervals
    trim: float = RPM_TRIM  # TMP
    sdt: float = 0.05  # standard deviation tolerance
    initial: int = 1  # INP
    increment: int = 1  # INC
    max_connections: int = 16  # MNP
    max_probes: float = 100.0  # MPS, probe pairs a second
    capacity_share: float = 0.05  # PTC


IDLE_INTERVALS = 2  # a run both ways ends when a direction moved nothing in as many


@dataclass
class IntervalRecord:
    index: int
    connections: int
    bytes: int
    goodput: float  # bits/s, this interval
    moving_goodput: float  # bits/s over the last MAD intervals
    rpm: float | None  # responsiveness over the last MAD intervals' probes, once measured
    probes: int  # probes of every kind that came back in this interval
    uplink: float | None = None  # bits/s of this interval's goodput each way, when the
    downlink: float | None = None  # load runs both ways at once (--bidir)


@dataclass
class RpmResult:
    goodput: float
    goodput_confidence: str
    connections: int
    rpm: float | None
    foreign_rpm: float | None
    loaded_rpm: float | None
    rating: str | None
    confidence: str
    trimmed_ms: dict[str, float]
    probes: dict[str, int]
    unanswered: int = 0  # foreign probes given up after their time
    intervals: list[IntervalRecord] = field(default_factory=list)
    uplink_goodput: float | None = None  # each way over the last MAD intervals (--bidir)
    downlink_goodput: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class ResponsivenessRun:
    def __init__(self, parameters: RpmParameters,
                 kinds: tuple[str, ...] = PROBE_KINDS) -> None:
        self.parameters = parameters
        self.kinds = kinds  # the probes' kinds: every one is needed for a value
        self.intervals: list[IntervalRecord] = []
        self._probes: list[dict[str, list[float]]] = [self._no_probes()]
        self._goodputs: list[float] = []  # moving averages while goodput is not saturated
        self._rpms: list[float] = []  # responsiveness values once it is
        self.goodput_saturated = False
        self.rpm_saturated = False

    def _no_probes(self) -> dict[str, list[float]]:
        return {kind: [] for kind in self.kinds}

    def add_probe(self, kind: str, milliseconds: float) -> None:
        """A probe that came back in the current interval."""
        self._probes[-1][kind].append(milliseconds)

    @property
    def done(self) -> bool:
        return self.rpm_saturated

    def probe_rate(self) -> float:
        """Probe pairs (a foreign and a self probe) a second: at most MPS, and at most PTC of
        the goodput measured so far (one a second before any is)."""
        p = self.parameters
        if not self.intervals:
            return 1.0
        share = p.capacity_share * self.intervals[-1].moving_goodput / 8
        return max(1.0, min(p.max_probes, share / (FOREIGN_PROBE_BYTES + SELF_PROBE_BYTES)))

    def end_interval(self, moved: int, connections: int,
                     split: tuple[int, int] | None = None) -> int:
        """Close the current interval (`moved` bytes over `connections`; `split`: of them,
        uplink and downlink bytes, when the load runs both ways, whose connections each
        direction has as many of: `connections` counts one direction's); the number of
        load-generating connections to add (each way) before the next one."""
        p = self.parameters
        index = len(self.intervals)
        recent = [record.bytes for record in self.intervals[-(p.mad - 1):]] if p.mad > 1 \
            else []
        window = [*recent, moved]
        moving = sum(window) * 8 / (len(window) * p.interval)
        record = IntervalRecord(index, connections, moved, moved * 8 / p.interval, moving,
                                None, sum(len(v) for v in self._probes[-1].values()))
        if split is not None:
            record.uplink, record.downlink = (part * 8 / p.interval for part in split)
        self.intervals.append(record)
        if not self.goodput_saturated:
            self._goodputs.append(moving)
            self.goodput_saturated = _stable(self._goodputs, p)
        if self.goodput_saturated and not self.rpm_saturated:
            measured = self.window_rpm()
            if measured is not None:
                record.rpm = measured[2]
                self._rpms.append(measured[2])
                self.rpm_saturated = _stable(self._rpms, p)
        self._probes.append(self._no_probes())
        return max(0, min(p.increment, p.max_connections - connections))

    def idle_direction(self) -> str | None:
        """In a run both ways, the direction ("up" or "down") that has moved nothing in any
        of its intervals, once IDLE_INTERVALS have closed (a server that loads one way
        only); else None."""
        split = [record for record in self.intervals if record.uplink is not None]
        if len(split) < IDLE_INTERVALS:
            return None
        if not any(record.uplink for record in split):
            return "up"
        if not any(record.downlink for record in split):
            return "down"
        return None

    def window_samples(self) -> dict[str, list[float]]:
        """Every kind's probes of the last MAD closed intervals."""
        merged = self._no_probes()
        for probes in self._probes[:-1][-self.parameters.mad:]:
            for kind, values in probes.items():
                merged[kind].extend(values)
        return merged

    def window_rpm(self) -> tuple[float, float, float] | None:
        """(foreign, loaded, responsiveness) over the last MAD intervals' probes; None while
        a kind has none."""
        samples = self.window_samples()
        if any(not samples[kind] for kind in self.kinds):
            return None
        trim = self.parameters.trim
        return responsiveness([trimmed_mean(samples[kind], trim) for kind in self.kinds
                               if kind != LOADED], trimmed_mean(samples[LOADED], trim))

    def result(self, unanswered: int = 0) -> RpmResult:
        """Where the run stands: final once done, otherwise the latest values, with the
        draft's confidence (Low: fewer than MAD intervals of the stage ran; Medium: MAD or
        more, never stable; High: stable)."""
        p = self.parameters
        samples = self.window_samples()
        measured = self.window_rpm()
        last = self.intervals[-1] if self.intervals else None
        goodput_confidence = _confidence(len(self._goodputs), self.goodput_saturated, p)
        confidence = _confidence(len(self._rpms), self.rpm_saturated, p) \
            if self.goodput_saturated else LOW
        return RpmResult(
            goodput=last.moving_goodput if last else 0.0,
            goodput_confidence=goodput_confidence,
            connections=last.connections if last else 0,
            rpm=measured[2] if measured else None,
            foreign_rpm=measured[0] if measured else None,
            loaded_rpm=measured[1] if measured else None,
            rating=rpm_rating(measured[2]) if measured else None,
            confidence=confidence,
            trimmed_ms={kind: trimmed_mean(values, p.trim)
                        for kind, values in samples.items() if values},
            probes={kind: len(values) for kind, values in samples.items()},
            unanswered=unanswered, intervals=list(self.intervals),
            uplink_goodput=self._moving("uplink"), downlink_goodput=self._moving("downlink"))

    def _moving(self, direction: str) -> float | None:
        """One direction's goodput over the last MAD intervals (None: not split)."""
        window = [getattr(record, direction) for record in self.intervals[-self.parameters.mad:]]
        if not window or None in window:
            return None
        return sum(window) / len(window)


def _stable(values: list[float], p: RpmParameters) -> bool:
    """The draft's stability: the standard deviation of the last MAD values within SDT of
    the latest."""
    if len(values) < p.mad:
        return False
    return statistics.pstdev(values[-p.mad:]) < p.sdt * values[-1]


def _confidence(count: int, stable: bool, p: RpmParameters) -> str:
    if stable:
        return HIGH
    return MEDIUM if count >= p.mad else LOW
