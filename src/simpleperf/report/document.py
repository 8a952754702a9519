"""A client's JSON document (report/json.py's layout, iperf3's) read back: the figures the
lab and the exporter both take from it, by one reader. KeyError or TypeError where the
document lacks what a test of its kind always has."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BIDIR_REVERSE = "_bidir_reverse"  # the sums' suffix for --bidir's reverse half


@dataclass(frozen=True)
class Sums:
    """One direction's totals: the sender's and the receiver's view, and a UDP test's
    datagram account (None for TCP)."""

    sent_bytes: int
    sent_bps: float
    received_bytes: int
    received_bps: float
    retransmits: int | None  # TCP: the sender's
    delivered_ce: int | None  # TCP: segments echoed CE-marked; UDP: datagrams arrived so
    jitter_ms: float | None = None
    lost: int | None = None
    packets: int | None = None
    lost_percent: float | None = None
    host_dropped: int | None = None  # of the lost, those the receiving host's socket dropped


def sums(end: dict[str, Any], part: str = "") -> Sums:
    """The totals of a document's `end`; `part`: BIDIR_REVERSE for --bidir's reverse."""
    sent, received = end["sum_sent" + part], end["sum_received" + part]
    datagrams = end.get("sum" + part)
    udp = datagrams if isinstance(datagrams, dict) and "jitter_ms" in datagrams else None
    return Sums(sent_bytes=sent["bytes"], sent_bps=sent["bits_per_second"],
                received_bytes=received["bytes"], received_bps=received["bits_per_second"],
                retransmits=sent.get("retransmits"),
                delivered_ce=sent.get("delivered_ce", received.get("ce_marked")),
                jitter_ms=None if udp is None else udp["jitter_ms"],
                lost=None if udp is None else udp["lost_packets"],
                packets=None if udp is None else udp["packets"],
                lost_percent=None if udp is None else udp["lost_percent"],
                host_dropped=None if udp is None else udp.get("receiver_dropped_packets"))


def receiver_delays(streams: list[dict[str, Any]], key: str = "one_way_delay"
                    ) -> list[dict[str, Any]]:
    """The receivers' delay summaries under `key` (one_way_delay: the path's;
    write_to_read_delay: the application's) that timed anything."""
    return [s["receiver"][key] for s in streams
            if isinstance((s.get("receiver") or {}).get(key), dict)
            and s["receiver"][key].get("count")]
