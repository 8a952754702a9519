"""What a server may send to a UDP peer whose address nothing has proven, sans IO.

A UDP datagram's source address is whatever its sender wrote: one forged datagram asking
for a reverse test would make a server send to an address that never asked (iperf 2.1.8's
server does, 5,000 times what it was sent). An address is proven when a TCP handshake came
from it (a native or iperf3 test's control connection: its UDP streams must come from that
host), or when the peer echoes what only that address received. iperf2's UDP clients have
neither: to them a server sends at most UNPROVEN_UDP_FACTOR times what they sent it (QUIC's
anti-amplification limit, RFC 9000 section 8.1), plus what the server's operator allows
with --unproven-udp RATE/SECONDS (nothing unless given). A test in which the peer sends as
much as it asks for (-d, -r, --full-duplex) runs within the factor; one in which it sends
nothing more (-u -R) needs the operator's allowance, and is capped to it."""

from __future__ import annotations

import dataclasses

from ..description.options import UNPROVEN_UDP_FACTOR
from ..description.testspec import TestSpec


class Unproven:
    """The bytes a server may have sent to one unproven peer by `now`: the factor times
    what the peer sent, plus the stated allowance (`rate` bits/s for `seconds` from
    `start`)."""

    def __init__(self, rate: float, seconds: float, start: float) -> None:
        self.rate, self.seconds, self.start = rate, seconds, start

    def allowed(self, received: int, now: float) -> int:
        stated = self.rate / 8 * min(max(0.0, now - self.start), self.seconds)
        return UNPROVEN_UDP_FACTOR * received + int(stated)

    @property
    def allowance(self) -> bool:
        """Whether the operator allows anything beyond the factor."""
        return self.rate > 0

    def capped(self, spec: TestSpec) -> TestSpec:
        """A test that sends on the operator's allowance alone (the peer sends nothing
        more: -R): at most its rate for its seconds, whatever was asked."""
        if not self.allowance:
            return spec
        return dataclasses.replace(spec, rate=min(spec.rate or self.rate, self.rate),
                                   duration=min(spec.duration or self.seconds, self.seconds))


def same_host(endpoint: str, other: str) -> bool:
    """Whether two "host:port" endpoints (tcp.endpoint's form) are of one address."""
    return endpoint.rsplit(":", 1)[0] == other.rsplit(":", 1)[0]


class ReplyBudget:
    """Answers to unproven peers (UDP echo probes): each host at most `per_host` a second
    and all together at most `total` a second, in bursts of a second's worth. An echo
    answers one datagram with one of its size, so a forged source makes us reflect, not
    amplify; the budget keeps a reflection as slow as a prober (MIN_RTT_INTERVAL) and no
    host a target of more."""

    HOSTS = 4096  # hosts remembered; the oldest are forgotten past this

    def __init__(self, per_host: float, total: float) -> None:
        self.per_host, self.total = per_host, total
        self._hosts: dict[str, tuple[float, float]] = {}  # host: (tokens, when)
        self._all = (total, 0.0)

    def take(self, endpoint: str, now: float) -> bool:
        """Whether a reply to `endpoint` ("host:port") may go now (and count it)."""
        host = endpoint.rsplit(":", 1)[0]
        tokens, when = self._hosts.pop(host, (self.per_host, now))
        tokens = min(self.per_host, tokens + (now - when) * self.per_host)
        every, at = self._all
        every = min(self.total, every + (now - at) * self.total)
        allowed = tokens >= 1 and every >= 1
        if allowed:
            tokens, every = tokens - 1, every - 1
        self._hosts[host] = (tokens, now)  # the newest last: the oldest go first
        if len(self._hosts) > self.HOSTS:
            del self._hosts[next(iter(self._hosts))]
        self._all = (every, now)
        return allowed
