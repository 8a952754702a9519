"""UDP flows in a capture. For datagrams that carry simpleperf's (or iperf3's) header, send
time in seconds and microseconds and a 64-bit packet number, the capture also shows what
the receiver's report shows, from an independent witness: numbers missing (gaps), numbers
that came after a higher one (reordered) or twice, and the jitter of RFC 3550 computed
from the capture's timestamps against the sender's. Inside a lab both clocks are the
machine's, so the transit time is the one-way delay to the capture point.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .packets import UDP_HEAD_BYTES, Packet
from .tcp import spread

_HEADER = struct.Struct("!IIQ")
assert _HEADER.size == UDP_HEAD_BYTES
JITTER_GAIN = 16  # RFC 3550, A.8


@dataclass
class UdpDirection:
    source: str
    source_port: int
    destination: str
    destination_port: int
    datagrams: int = 0
    bytes: int = 0
    numbered: int = 0  # datagrams with a readable header
    first_number: int | None = None
    highest_number: int | None = None
    reordered: int = 0
    duplicates: int = 0
    jitter_s: float = 0.0
    one_way_s: list[float] = field(default_factory=list)
    _seen: set[int] = field(default_factory=set)
    _last_transit: float | None = None

    @property
    def gaps(self) -> int:
        """Numbers between the first and the highest seen that never appeared."""
        if self.first_number is None or self.highest_number is None:
            return 0
        return self.highest_number - self.first_number + 1 - len(self._seen)

    @property
    def jitter_ms(self) -> float | None:
        return self.jitter_s * 1e3 if self.numbered > 1 else None

    def summary(self) -> dict[str, Any]:
        """What the direction reports, one-way delays as min, mean and max in ms."""
        one_way = spread([delay * 1e3 for delay in self.one_way_s]) or (None, None, None)
        return {"source": self.source, "source_port": self.source_port,
                "destination": self.destination, "destination_port": self.destination_port,
                "datagrams": self.datagrams, "bytes": self.bytes, "gaps": self.gaps,
                "reordered": self.reordered, "duplicates": self.duplicates,
                "jitter_ms": self.jitter_ms, "one_way_min_ms": one_way[0],
                "one_way_avg_ms": one_way[1], "one_way_max_ms": one_way[2]}


def analyze(packets: Iterable[Packet]) -> list[UdpDirection]:
    directions: dict[tuple[str, int, str, int], UdpDirection] = {}
    for packet in packets:
        if packet.protocol != 17:
            continue
        direction = directions.get(packet.endpoints)
        if direction is None:
            direction = directions[packet.endpoints] = UdpDirection(*packet.endpoints)
        _account(packet, direction)
    return list(directions.values())


def _account(packet: Packet, direction: UdpDirection) -> None:
    direction.datagrams += 1
    direction.bytes += packet.payload_length
    if len(packet.head) < UDP_HEAD_BYTES:
        return
    seconds, microseconds, number = _HEADER.unpack(packet.head)
    if microseconds >= 1_000_000:
        return  # not a simpleperf or iperf3 header
    direction.numbered += 1
    if number in direction._seen:
        direction.duplicates += 1
        return
    direction._seen.add(number)
    if direction.first_number is None or number < direction.first_number:
        direction.first_number = number
    if direction.highest_number is not None and number < direction.highest_number:
        direction.reordered += 1
    else:
        direction.highest_number = number
    transit = packet.time_ns / 1e9 - (seconds + microseconds / 1e6)
    direction.one_way_s.append(transit)
    if direction._last_transit is not None:
        change = abs(transit - direction._last_transit)
        direction.jitter_s += (change - direction.jitter_s) / JITTER_GAIN
    direction._last_transit = transit
