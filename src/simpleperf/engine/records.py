"""What the engine measures: one stream's counters at a moment, and one interval's row."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Snapshot:
    """A stream's cumulative counters at one moment."""

    num_bytes: int = 0
    packets: int = 0
    lost: int = 0
    out_of_order: int = 0
    retransmits: int = 0


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
