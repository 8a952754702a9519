"""TCP and UDP, a row each: what differs between a test's two transports, so that code asks
the transport (`spec.transport.datagrams`, `transport.iperf3_length`) instead of comparing
its name. The name is the word on the command line, in the native test description and in
iperf3's parameters; `transport_of` is the one place a name becomes a row.

MPTCP is TCP here: a flag of the test (`mptcp`), carried as TCP is."""

from __future__ import annotations

from dataclasses import dataclass

from .options import (
    DEFAULT_UDP_LENGTH,
    DEFAULT_UDP_RATE,
    MAX_LENGTH,
    MAX_UDP_LENGTH,
    MIN_LENGTH,
    MIN_UDP_LENGTH,
)

IPERF3_TCP_LENGTH = 128 * 1024  # iperf3's own default write for TCP, not ours


@dataclass(frozen=True)
class Transport:
    """One transport: its name and what follows from it."""

    name: str
    # UDP: each write is a datagram of its own, numbered, so the receiver counts the lost,
    # the reordered and their jitter; TCP: a byte stream, whose sender counts retransmits
    # and reads TCP_INFO (cwnd, RTT, congestion control)
    datagrams: bool
    min_length: int  # the write (TCP) or datagram (UDP) sizes a peer may ask for
    max_length: int
    iperf3_length: int  # what an iperf3 peer writes when its parameters give no `len`
    iperf3_rate: float  # bits/s, what an iperf3 peer sends when they give no `bandwidth`

    def __str__(self) -> str:
        return self.name


TCP = Transport("tcp", datagrams=False, min_length=MIN_LENGTH, max_length=MAX_LENGTH,
                iperf3_length=IPERF3_TCP_LENGTH, iperf3_rate=0.0)
UDP = Transport("udp", datagrams=True, min_length=MIN_UDP_LENGTH, max_length=MAX_UDP_LENGTH,
                iperf3_length=DEFAULT_UDP_LENGTH, iperf3_rate=DEFAULT_UDP_RATE)
TRANSPORTS: dict[str, Transport] = {transport.name: transport for transport in (TCP, UDP)}
NAMES = tuple(TRANSPORTS)


def transport_of(name: str) -> Transport:
    """The row of a transport's name (KeyError for any other word: parsers check first)."""
    return TRANSPORTS[name]
