"""What an event did to the flows and the routers: pure functions over timestamps on the
flows' clock (seconds after the flows' start)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

RECOVERED_SHARE = 0.9  # throughput is back once it reaches this share of its new level


def outage(replies: Sequence[float], at: float, until: float, interval: float
           ) -> float | None:
    """The data plane's outage: the longest silence in a probe stream's replies from the
    event on (from the last reply before it to the first after), less the probe interval
    that separates replies anyway. 0.0 when the replies never paused; None when none came
    back before `until` (the network stayed cut)."""
    before = [t for t in replies if t <= at]
    after = sorted(t for t in replies if at < t <= until)
    if not after:
        return None
    previous = before[-1] if before else at
    longest = 0.0
    for moment in after:
        longest = max(longest, moment - previous)
        previous = moment
    return max(0.0, longest - interval)


def convergence(route_changes: Sequence[float], at: float, until: float) -> float | None:
    """The control plane's convergence: from the event to the last route any router changed
    before `until` (None: no router changed a route)."""
    within = [t for t in route_changes if at <= t < until]
    return max(within) - at if within else None


def throughput_dip(intervals: Sequence[tuple[float, float, float]], at: float, until: float
                   ) -> tuple[float | None, float | None]:
    """(dip, recovery): how far the throughput fell below its level before the event, as a
    share of that level, and the seconds from the event until it was back at 90 % of its
    level after (the second half of the time until `until`: a failover may settle lower)."""
    before = [bps for start, end, bps in intervals if end <= at and start >= 1.0]
    if not before:
        before = [bps for start, end, bps in intervals if end <= at]
    window = [(start, end, bps) for start, end, bps in intervals if end > at and start < until]
    if not before or not window:
        return None, None
    level = statistics.mean(before)
    settled = [bps for start, end, bps in window if start >= (at + until) / 2] or \
        [window[-1][2]]
    target = RECOVERED_SHARE * statistics.mean(settled)
    lowest = min(bps for _, _, bps in window)
    dip = max(0.0, 1 - lowest / level) if level > 0 else None
    recovery = next((end - at for start, end, bps in window if bps >= target and
                     start >= at), None)
    return dip, recovery
