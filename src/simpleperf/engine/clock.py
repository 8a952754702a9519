"""When report intervals end: one clock for every driver (classic, native, iperf3)."""

from __future__ import annotations

EPSILON = 1e-9


class IntervalClock:
    """Interval ends in seconds since a test's start: every `step` through the omitted
    part (-O), the end of omitting, then every `step` of the measured part. With a known
    `end` (a timed test) the last interval stops there, not at the next step."""

    def __init__(self, step: float, omit: float = 0.0, end: float | None = None) -> None:
        if step <= 0:
            raise ValueError("an interval must be longer than 0 s")
        self.step = step
        self.omit = omit
        self.end = end
        omitted = []
        index = 1
        while (mark := round(index * step, 9)) < omit - EPSILON:
            omitted.append(mark)
            index += 1
        if omit > 0:
            omitted.append(omit)
        self._omitted = omitted

    def mark(self, index: int) -> float:
        """The end of interval `index` (from 0), ignoring `end`."""
        if index < len(self._omitted):
            return self._omitted[index]
        return round(self.omit + (index - len(self._omitted) + 1) * self.step, 9)

    def is_final(self, mark: float) -> bool:
        """Whether `mark` is at or past the end of a timed test."""
        return self.end is not None and mark >= self.end - EPSILON

    def is_omitted(self, mark: float) -> bool:
        return self.omit > 0 and mark <= self.omit + EPSILON

    def closed_by(self, elapsed: float) -> list[float]:
        """The ends of every interval closed by `elapsed` seconds, `end` included once
        reached."""
        marks = []
        index = 0
        while True:
            mark = self.mark(index)
            if self.is_final(mark):
                if self.end is not None and elapsed >= self.end:
                    marks.append(self.end)
                return marks
            if mark > elapsed:
                return marks
            marks.append(mark)
            index += 1
