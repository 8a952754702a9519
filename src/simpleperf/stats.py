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
