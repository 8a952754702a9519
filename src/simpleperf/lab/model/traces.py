"""Trace-driven links: Mahimahi's trace format, read as is, and the generator of the shipped
traces.

A trace is a text file with one whole number per line: a millisecond at which the link may
deliver PACKET_BYTES (1500) bytes. Lines are non-decreasing; a millisecond given k times
is k opportunities; the schedule repeats every `period` (the last line's value) for as long
as the link runs, as Mahimahi's mm-link loops it. A packet larger than what is left of an
opportunity takes the rest of it and carries on with the next; an opportunity nobody uses
is lost (`bottleneck.TraceWire` follows Mahimahi's LinkQueue).

Shipped traces (data/traces, a name without a path picks one) were made by `generate`
below: `python3 -m simpleperf.lab.model.traces DIRECTORY` writes them again, byte for byte.
"""

from __future__ import annotations

import bisect
import functools
import random
import sys
from dataclasses import dataclass
from pathlib import Path

from . import datafiles
from .errors import TopologyError

PACKET_BYTES = 1500  # what one opportunity delivers (Mahimahi's PACKET_SIZE)
MAX_TRACE_BYTES = 8 << 20  # about a million opportunities; beyond, not a trace we take
MAX_PERIOD_MS = 24 * 3600 * 1000
DATA_DIR = Path(__file__).parents[1] / "data" / "traces"
SUFFIX = ".trace"


@dataclass(frozen=True)
class Trace:
    path: str
    opportunities: tuple[int, ...]  # milliseconds, non-decreasing; the last is the period

    @property
    def period_ms(self) -> int:
        return self.opportunities[-1]

    @property
    def mean_rate(self) -> float:
        """Bits per second the schedule offers on average over its period."""
        return len(self.opportunities) * PACKET_BYTES * 8 / (self.period_ms / 1000)

    def offered(self, start: float, end: float) -> float:
        """Bits/s the looped schedule offers from `start` to `end` seconds after it began."""
        if end <= start:
            return 0.0
        count = self._before(end) - self._before(start)
        return count * PACKET_BYTES * 8 / (end - start)

    def _before(self, moment: float) -> int:
        """Opportunities before `moment` seconds (at or before, in milliseconds)."""
        ms = moment * 1000
        loops, rest = divmod(ms, self.period_ms)
        return int(loops) * len(self.opportunities) + bisect.bisect_right(self.opportunities,
                                                                           rest)

    def capacity(self, bin_ms: int = 100) -> list[tuple[float, float]]:
        """(start s, bits/s) per bin over one period: what the link could carry."""
        bins = [0] * -(-self.period_ms // bin_ms)
        for moment in self.opportunities:
            bins[min(moment // bin_ms, len(bins) - 1)] += 1
        return [(i * bin_ms / 1000, n * PACKET_BYTES * 8 / (bin_ms / 1000))
                for i, n in enumerate(bins)]


def locate(name_or_path: str, where: str) -> Path:
    """A shipped trace by name ('lte-walk'), or a file by path."""
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise TopologyError(f"{where} must name a trace file (a shipped one: "
                            f"{', '.join(shipped())})")
    path = Path(name_or_path)
    if not path.suffix and not path.exists() and "/" not in name_or_path:
        path = DATA_DIR / f"{name_or_path}{SUFFIX}"
        if not path.exists():
            raise TopologyError(f"{where}: no shipped trace named '{name_or_path}' (shipped: "
                                f"{', '.join(shipped())}; or give a path to a Mahimahi "
                                "trace file)")
    return path.resolve()


def shipped() -> list[str]:
    return sorted(path.stem for path in DATA_DIR.glob(f"*{SUFFIX}"))


def load(name_or_path: str, where: str = "trace") -> Trace:
    """The trace, checked: TopologyError with one line for anything that is not one. A file
    is read and parsed once while it stays the same (a topology, each of its directions,
    and every step's results ask for it)."""
    path = locate(name_or_path, where)
    try:
        status = path.stat()
        return Trace(str(path), _opportunities(path, status.st_mtime_ns, status.st_size))
    except OSError as failure:
        raise TopologyError(f"{where}: cannot read {path}: {failure.strerror}") from None
    except TopologyError as error:
        raise TopologyError(f"{where}: {error}") from None


@functools.lru_cache(maxsize=16)
def _opportunities(path: Path, mtime_ns: int, size: int) -> tuple[int, ...]:
    """The file's schedule; the file's time and size are part of the cache's key."""
    data = datafiles.read_bounded(path, MAX_TRACE_BYTES, TopologyError)
    if len(data) > MAX_TRACE_BYTES:
        raise TopologyError(f"{path} is larger than {MAX_TRACE_BYTES >> 20} MB: not a trace "
                            "this lab takes")
    return parse(data, str(path))


def parse(data: bytes, where: str) -> tuple[int, ...]:
    opportunities: list[int] = []
    last = 0
    for number, line in enumerate(data.split(b"\n"), start=1):
        text = line.strip()
        if not text:
            continue
        if not text.isdigit() or len(text) > 9:
            shown = text[:20].decode("ascii", "replace")
            raise TopologyError(f"{where} line {number}: {shown!r} is not a whole number of "
                                "milliseconds")
        moment = int(text)
        if moment < last:
            raise TopologyError(f"{where} line {number}: {moment} ms comes before the line "
                                f"above ({last} ms): a trace's times never decrease")
        last = moment
        opportunities.append(moment)
    if not opportunities:
        raise TopologyError(f"{where} has no delivery opportunities (a line per 1500 bytes "
                            "the link may send, in milliseconds)")
    if last <= 0 or last > MAX_PERIOD_MS:
        raise TopologyError(f"{where}: its last time, {last} ms, must be from 1 ms to a day "
                            "(the trace repeats after it)")
    return tuple(opportunities)


# ------------------------------------------------------------------- the shipped traces

def constant(rate: float, seconds: float) -> list[int]:
    """Opportunities evenly spread for `rate` bits/s."""
    per_ms = rate / (PACKET_BYTES * 8) / 1000
    count = round(per_ms * seconds * 1000)
    return [int(i / per_ms) + 1 for i in range(count)]


def outages(rate: float, seconds: float, every: float, lasting: float) -> list[int]:
    """`rate` bits/s with no delivery at all for `lasting` s every `every` s (a tunnel, a
    handover)."""
    return [moment for moment in constant(rate, seconds)
            if (moment / 1000) % every < every - lasting or moment == int(seconds * 1000)]


def random_walk(low: float, high: float, seconds: float, step: float, seed: int) -> list[int]:
    """A rate wandering between `low` and `high` bits/s, a multiplicative step each 100 ms
    (cellular links' rates move like this, if not this smoothly)."""
    chooser = random.Random(seed)
    rate, moments, carried = (low * high) ** 0.5, [], 0.0
    for tick in range(int(seconds * 10)):
        rate = min(high, max(low, rate * chooser.choice((1 / step, 1.0, step))))
        per_ms = rate / (PACKET_BYTES * 8) / 1000
        for ms in range(tick * 100 + 1, tick * 100 + 101):
            carried += per_ms
            while carried >= 1:
                moments.append(ms)
                carried -= 1
    if not moments or moments[-1] != int(seconds * 1000):
        moments.append(int(seconds * 1000))
    return moments


def generate(directory: Path) -> list[Path]:
    """The shipped traces, written to `directory`."""
    made = {"constant-12M": constant(12e6, 1.0),
            "outages-24M": outages(24e6, 10.0, every=5.0, lasting=1.0),
            "lte-walk": random_walk(2e6, 40e6, 30.0, step=1.25, seed=2026)}
    written = []
    for name, moments in made.items():
        path = directory / f"{name}{SUFFIX}"
        path.write_text("".join(f"{moment}\n" for moment in moments))
        written.append(path)
    return written


if __name__ == "__main__":
    for made in generate(Path(sys.argv[1] if len(sys.argv) > 1 else DATA_DIR)):
        print(made)
