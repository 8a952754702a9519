"""A command-line value read and checked, or one line saying what the flag takes: the parsers
cli.py and the flag groups (iperf2_flags, iperf3_flags, latency_flags) share."""

from __future__ import annotations

from ..description.options import MAX_RATE
from ..errors import UsageError
from ..units import parse_rate, parse_size


def integer(flag: str, text: str, low: int, high: int, says: str | None = None) -> int:
    """A whole number from `low` to `high`; else `says` (by default: an integer from low to
    high) and what was given."""
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise UsageError(f"{says or f'{flag} must be an integer from {low} to {high}'}, "
                         f"not '{text}'")
    return value


def number(flag: str, text: str, high: float, unit: str) -> float:
    """A number of `unit` from 0 to `high` (fractions allowed)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= high:  # NaN fails too
        raise UsageError(f"{flag} must be {unit} from 0 to {high:g}, not '{text}'")
    return value


def size(flag: str, text: str, low: int, high: int, bounds: str) -> int:
    """A size (128K, 64MB) from `low` to `high`; else one line naming the flag and
    `bounds` ('from 1B to 64MB (e.g. 128K)')."""
    try:
        value = parse_size(text)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise UsageError(f"{flag} must be a size {bounds}, not '{text}'")
    return value


def rate(flag: str, text: str, zero: str | None = None) -> float:
    """A rate in bits/s (100M), up to MAX_RATE; 0 only where `zero` says what it means."""
    try:
        value = parse_rate(text)
    except ValueError:
        value = -1.0
    if not (value >= 0 if zero else value > 0) or value > MAX_RATE:
        raise UsageError(f"{flag} must be a rate in bits/s with an optional K, M or G "
                         f"(e.g. 100M{f'; 0 = {zero}' if zero else ''}), not '{text}'")
    return value
