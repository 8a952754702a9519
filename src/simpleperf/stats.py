"""Pure functions over measurements: intervals, rates, fairness."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Interval:
    """Bytes moved by one stream between two moments (seconds since the stream's start)."""

    start: float
    end: float
    num_bytes: int

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def bits_per_second(self) -> float:
        return self.num_bytes * 8 / self.seconds if self.seconds > 0 else 0.0


def interval_boundaries(step: float, end: float | None, elapsed: float) -> list[float]:
    """Boundaries of the report intervals that have closed by `elapsed` seconds.

    With a known end (a timed test) the last interval stops at the end, not at the next
    multiple of the step.
    """
    marks = []
    index = 1
    while True:
        mark = round(index * step, 9)
        if end is not None and mark >= end:
            if elapsed >= end:
                marks.append(end)
            break
        if mark > elapsed:
            break
        marks.append(mark)
        index += 1
    return marks


def jain_index(throughputs: Sequence[float]) -> float:
    """Jain's fairness index: (sum x)^2 / (n * sum x^2); 1.0 is perfectly fair."""
    if not throughputs:
        raise ValueError("fairness of no flows is undefined")
    total = sum(throughputs)
    squares = sum(x * x for x in throughputs)
    if squares == 0:
        return 1.0
    return total * total / (len(throughputs) * squares)


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
