"""Sizes, rates and durations: parsing user input and formatting results.

Units are decimal throughout (1 KB = 1000 B), as classic Simpleperf defines them.
"""

from __future__ import annotations

import re

SIZE_UNITS = {"": 1, "B": 1, "K": 10**3, "KB": 10**3, "M": 10**6, "MB": 10**6,
              "G": 10**9, "GB": 10**9}
RATE_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9}
DURATION_UNITS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6}
DISPLAY_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6}
CLASSIC_DEFAULT_UNIT = "MB"
# iperf3's -f: k m g t are bits (x 1000), K M G T bytes (x 1024, as iperf3 counts them), and
# a / A scale by themselves. AUTO: no -f given (classic tables in MB, others scale like 'a').
IPERF3_UNITS = "kmgtKMGTaA"
AUTO_UNIT = ""
_BIT_NAMES = ("bits", "Kbits", "Mbits", "Gbits", "Tbits")
_BYTE_NAMES = ("Bytes", "KBytes", "MBytes", "GBytes", "TBytes")

_NUMBER_WITH_SUFFIX = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*$")


def _split(text: str) -> tuple[float, str]:
    match = _NUMBER_WITH_SUFFIX.match(text)
    if not match:
        raise ValueError(f"'{text}' is not a number with an optional unit")
    return float(match.group(1)), match.group(2)


def parse_size(text: str) -> int:
    """'10MB' -> 10_000_000 bytes. Accepts B, K/KB, M/MB, G/GB in any case."""
    value, suffix = _split(text)
    factor = SIZE_UNITS.get(suffix.upper())
    if factor is None:
        raise ValueError(f"'{text}' has an unknown size unit (use B, KB, MB or GB)")
    return int(round(value * factor))


def parse_rate(text: str) -> float:
    """'100M' -> 100e6 bits per second. A trailing 'bps', 'bit' or 'b' is allowed."""
    value, suffix = _split(text)
    unit = re.sub(r"(?i)(bps|bit/s|bits|bit|b)$", "", suffix).upper()
    factor = RATE_UNITS.get(unit)
    if factor is None:
        raise ValueError(f"'{text}' has an unknown rate unit (use K, M or G)")
    return value * factor


def parse_duration(text: str) -> float:
    """'20ms' -> 0.02 seconds; a bare number is seconds."""
    value, suffix = _split(text)
    factor = DURATION_UNITS.get(suffix.lower())
    if factor is None:
        raise ValueError(f"'{text}' has an unknown time unit (use s, ms or us)")
    return value * factor


def format_amount(num_bytes: int, unit: str) -> str:
    """Classic Transfer/Received column: an integer and the unit, e.g. '90 MB'."""
    return f"{round(num_bytes / DISPLAY_UNITS[unit])} {unit}"


def megabits_per_second(num_bytes: int, seconds: float) -> float:
    return num_bytes * 8 / seconds / 1e6 if seconds > 0 else 0.0


def format_mbps(num_bytes: int, seconds: float) -> str:
    return f"{megabits_per_second(num_bytes, seconds):.2f} Mbps"


def classic_unit(unit: str) -> str:
    """The unit of a classic table's Transfer column for -f `unit` (classic tables know B, KB
    and MB; an iperf3 unit or none leaves them in MB, as classic Simpleperf prints)."""
    return unit if unit in DISPLAY_UNITS else CLASSIC_DEFAULT_UNIT


def _scaled(value: float, base: float, unit_index: int | None) -> tuple[float, int]:
    if unit_index is not None:
        return value / base**unit_index, unit_index
    index = 0
    while value >= base and index < 4:
        value /= base
        index += 1
    return value, index


def _three_digits(value: float) -> str:
    """iperf3's widths: 1.68, 14.4, 238."""
    return f"{value:.2f}" if value < 9.995 else f"{value:.1f}" if value < 99.95 else f"{value:.0f}"


def format_iperf3_amount(num_bytes: float) -> str:
    """iperf3's Transfer column: bytes, scaled by 1024 ('1.68 GBytes')."""
    value, index = _scaled(num_bytes, 1024.0, None)
    return f"{_three_digits(value)} {_BYTE_NAMES[index]}"


def format_iperf3_rate(num_bytes: float, seconds: float, unit: str) -> str:
    """iperf3's Bitrate column for -f `unit`: '14.4 Gbits/sec', '1.73 GBytes/sec'."""
    per_second = num_bytes / seconds if seconds > 0 else 0.0
    letter = unit if unit in IPERF3_UNITS else "a"
    fixed = None if letter in "aA" else "kmgt".index(letter.lower()) + 1
    if letter.isupper():
        value, index = _scaled(per_second, 1024.0, fixed)
        return f"{_three_digits(value)} {_BYTE_NAMES[index]}/sec"
    value, index = _scaled(per_second * 8, 1000.0, fixed)
    return f"{_three_digits(value)} {_BIT_NAMES[index]}/sec"


def format_rate(bits_per_second: float) -> str:
    """A rate in bits/s, scaled as iperf3 prints one: '10.0 Mbits/sec'."""
    return format_iperf3_rate(bits_per_second / 8, 1.0, "a")
