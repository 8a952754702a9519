"""What `simpleperf lab analyze` prints: one table per protocol, a row per direction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from . import tcp, udp
from .tcp import TcpDirection, spread
from .udp import UdpDirection

if TYPE_CHECKING:  # as tcp.py: the tables need no dpkt
    from .packets import Packet


def tables(packets: Sequence[Packet]) -> list[str]:
    """A capture's packets as `lab analyze` prints them: the TCP table, then the UDP."""
    return tcp_table(tcp.analyze(packets)) + udp_table(udp.analyze(packets))


def _ends(d: TcpDirection | UdpDirection) -> str:
    return f"{d.source}:{d.source_port} > {d.destination}:{d.destination_port}"


def tcp_table(directions: list[TcpDirection]) -> list[str]:
    rows = [d for d in directions if d.data_segments]
    if not rows:
        return []
    lines = ["TCP (directions that carried data; Wireshark's tcp.analysis rules)",
             f"  {'flow':<44} {'segments':>9} {'MBytes':>8} {'Mbit/s':>8} {'retrans':>8} "
             f"{'ratio %':>8} {'resent':>7} {'ooo':>6} {'lost':>6} {'dup ack':>8} "
             f"{'RTT ms':>15}"]
    for d in rows:
        ratio = d.retransmission_ratio or 0.0
        rate = d.bytes * 8 / d.seconds / 1e6 if d.seconds > 0 else 0.0
        back = _reverse(directions, d)
        samples = spread(d.rtt_samples_ms)
        rtt = f"{samples[0]:.2f}/{samples[1]:.2f}" if samples else "-"
        lines.append(f"  {_ends(d):<44} {d.data_segments:>9} {d.bytes / 1e6:>8.2f} "
                     f"{rate:>8.2f} {d.retransmissions:>8} {ratio * 100:>8.3f} {d.resent:>7} "
                     f"{d.out_of_order:>6} {d.lost_segments:>6} "
                     f"{back.duplicate_acks if back else 0:>8} {rtt:>15}")
    lines.append("  retrans: tcp.analysis.retransmission (plain, fast and spurious); resent: "
                 "every data segment below the highest sequence seen; RTT: min/avg of ACKed "
                 "segments sent once; dup ack: sent by the other side")
    return lines


def _reverse(directions: list[TcpDirection], d: TcpDirection) -> TcpDirection | None:
    for other in directions:
        if (other.source, other.source_port) == (d.destination, d.destination_port) and (
                other.destination, other.destination_port) == (d.source, d.source_port):
            return other
    return None


def udp_table(directions: list[UdpDirection]) -> list[str]:
    if not directions:
        return []
    lines = ["UDP (gaps, reordering and jitter from simpleperf's datagram header)",
             f"  {'flow':<44} {'datagrams':>10} {'MBytes':>8} {'gaps':>7} {'loss %':>7} "
             f"{'reord':>6} {'dup':>5} {'jitter ms':>10} {'one-way ms':>17}"]
    for d in directions:
        expected = d.numbered + d.gaps - d.duplicates
        loss = d.gaps / expected * 100 if d.numbered and expected > 0 else None
        delays = spread(d.one_way_s)
        one_way = "/".join(f"{delay * 1e3:.2f}" for delay in delays) if delays else "-"
        lines.append(f"  {_ends(d):<44} {d.datagrams:>10} {d.bytes / 1e6:>8.2f} "
                     f"{d.gaps:>7} {'-' if loss is None else f'{loss:.3f}':>7} "
                     f"{d.reordered:>6} {d.duplicates:>5} "
                     f"{'-' if d.jitter_ms is None else f'{d.jitter_ms:.3f}':>10} "
                     f"{one_way:>17}")
    lines.append("  one-way: min/avg/max from the sender's timestamp to the capture (the lab's "
                 "hosts share one clock)")
    return lines
