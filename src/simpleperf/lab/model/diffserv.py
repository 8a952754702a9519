"""DiffServ classes as a router's queueing policy sets them (Cisco's LLQ with CBWFQ; the
classes of RFC 4594), as data: which DSCP goes to which class, the classes' weights and
the priority class's cap; and what they give each class of a link (pure). The own
discipline (net/shaping/aqm/classes.py), the kernel's htb tree (net/stages.py) and theory
read them from here. Likewise CAKE's diffserv3 tins (the own CAKE, net/shaping/aqm/cake.py,
and theory)."""

from __future__ import annotations

import math
from collections.abc import Mapping

PRIORITY = "priority"
PRIORITY_SHARE = 0.30  # of the link rate: the policer of the priority class
PRIORITY_BURST = 0.200  # seconds of that rate the policer lets through at once (Cisco's)
# The classes and their shares of the link, by DSCP (RFC 4594's treatment aggregates).
WEIGHTS = {"control": 5, "af4": 25, "af3": 20, "af2": 15, "af1": 10, "be": 20,
           "scavenger": 5}
CLASS_OF_DSCP = {46: PRIORITY, 44: PRIORITY,  # EF, VOICE-ADMIT
                 48: "control", 56: "control",  # CS6, CS7: routing, network control
                 32: "af4", 34: "af4", 36: "af4", 38: "af4", 40: "af4",  # CS4, AF4x, CS5
                 24: "af3", 26: "af3", 28: "af3", 30: "af3",  # CS3, AF3x
                 16: "af2", 18: "af2", 20: "af2", 22: "af2",  # CS2, AF2x
                 10: "af1", 12: "af1", 14: "af1",  # AF1x
                 8: "scavenger", 1: "scavenger"}  # CS1, LE: less than best effort


def class_of(dscp: int) -> str:
    return CLASS_OF_DSCP.get(dscp, "be")


def class_shares(rate: float, demands: dict[str, float]) -> dict[str, float]:
    """What the classes give each busy class of a link of `rate` bits/s (`demands`: class
    -> what its traffic would take, math.inf for elastic traffic): the priority class
    first, up to PRIORITY_SHARE of the rate (its policer); the rest by weight, work
    conserving as deficit round robin is: a class that asks less than its weighted part
    keeps what it asks, and what it leaves goes to the others by their weights."""
    shares = {name: 0.0 for name in demands}
    left = rate
    if PRIORITY in demands:
        shares[PRIORITY] = min(demands[PRIORITY], PRIORITY_SHARE * rate)
        left -= shares[PRIORITY]
    active = {name for name in demands if name != PRIORITY and demands[name] > 0}
    _share_by_weight(shares, demands, active, left, WEIGHTS)
    return {name: share for name, share in shares.items() if math.isfinite(share)}


def _share_by_weight(shares: dict[str, float], demands: dict[str, float], active: set[str],
                     left: float, weights: Mapping[str, float]) -> None:
    """Add `left` bits/s to the `active` names' `shares` by `weights`, work conserving as
    deficit round robin is: a name that asks less than its weighted part keeps what it
    asks, and what it leaves goes to the others by their weights."""
    while active and left > 1e-9:
        total = sum(weights[name] for name in active)
        offered = {name: left * weights[name] / total for name in active}
        sated = {name for name in active if demands[name] - shares[name] <= offered[name]}
        if not sated:
            for name in active:
                shares[name] += offered[name]
            return
        for name in sated:
            left -= demands[name] - shares[name]
            shares[name] = demands[name]
        active = active - sated


def priority_burst(rate: float, frame_bytes: int) -> float:
    """The bytes the priority class's policer lets through at once on a link of `rate`:
    PRIORITY_BURST seconds of its cap, at least two frames."""
    return max(2 * frame_bytes, PRIORITY_SHARE * rate / 8 * PRIORITY_BURST)


def priority_delay(rate: float, frame_bytes: int) -> float:
    """The longest a priority packet waits at a link of `rate` (seconds): behind the frame
    on the wire and the priority bytes the policer lets in at once, which drain first."""
    return (priority_burst(rate, frame_bytes) + frame_bytes) * 8 / rate


# CAKE's diffserv3 tins (sch_cake's default), by index: its name, its threshold rate as a
# share of the link's, its deficit round robin weight where the link has no fixed rate, and
# the DSCPs it takes (best effort takes the rest). A tin below its threshold is served
# before the others, the highest index first; above it, a tin waits its turn.
CAKE_TINS: tuple[tuple[str, float, int, frozenset[int]], ...] = (
    ("best-effort", 1.0, 1024, frozenset()),
    ("bulk", 1 / 16, 64, frozenset({1, 8})),  # LE, CS1
    ("voice", 1 / 4, 256, frozenset({4, 44, 46, 48, 56})))  # TOS4, VA, EF, CS6, CS7


def cake_tin_of(dscp: int) -> int:
    """The index in CAKE_TINS of the tin that takes packets of `dscp`."""
    for index, (_, _, _, dscps) in enumerate(CAKE_TINS):
        if dscp in dscps:
            return index
    return 0


def cake_tin_shares(rate: float, demands: dict[str, float]) -> dict[str, float]:
    """What CAKE's tins give each busy tin of a link of `rate` bits/s (`demands`: tin name
    -> what its traffic would take, math.inf for elastic traffic): each tin, the highest
    first, up to its threshold (a tin below it is served first: rrul's bulk flows took
    1/16 of the link and its voice flow 1/4 beside elastic best effort); what is left goes
    to the tins that want more in proportion to their thresholds (above it, each tin's
    turn comes as its clock, advanced at its threshold rate, allows)."""
    thresholds = {name: share for name, share, _, _ in CAKE_TINS}
    shares = {name: 0.0 for name in demands}
    left = rate
    for name, _, _, _ in reversed(CAKE_TINS):
        if name in demands:
            shares[name] = min(demands[name], thresholds[name] * rate, left)
            left -= shares[name]
    active = {name for name in demands if demands[name] - shares[name] > 1e-9}
    _share_by_weight(shares, demands, active, left, thresholds)
    return {name: share for name, share in shares.items() if math.isfinite(share)}
