"""The IP header's ECN field (RFC 3168; ECT(1) for L4S, RFC 9331): the two low bits of the
IPv4 TOS byte and of the IPv6 traffic class, below the DSCP. Every part of the tool and
the lab reads and writes it through these."""

from __future__ import annotations

MASK = 0b11
NOT_ECT, ECT1, ECT0, CE = 0, 1, 2, 3


def of(tos: int) -> int:
    """The ECN field of a TOS byte (or traffic class)."""
    return tos & MASK


def with_field(tos: int, value: int) -> int:
    """The TOS byte with its ECN field set to `value`, its DSCP kept."""
    return (tos & ~MASK) | value


def dscp_of(tos: int) -> int:
    return tos >> 2
