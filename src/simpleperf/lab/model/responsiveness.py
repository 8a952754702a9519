"""What theory says of an rpm flow (draft-ietf-ippm-responsiveness over a lab path):
RPM is 60000 over the mean of a foreign probe's round trip and a self probe's, and each
round trip is the path's base RTT plus the queue its packets meet on the way the load runs.

- A queue served in arrival order (drop-tail, CoDel, PIE, DualPI2's classic queue) is
  shared: every probe waits in it. Drop-tail's fills (its limit, drained at the link's
  rate); an AQM holds it near its target delay.
- A discipline that serves flows in turn (fq_codel, fq_pie, CAKE) serves a new connection's
  few packets before the backlogged flows: a foreign probe meets no queue, and a self
  probe, riding a load-generating connection, meets that flow's own queue, held near the
  target.
- The load's sender keeps about 5 ms of its own rate unsent (TCP_NOTSENT_LOWAT, as the
  draft asks of both ends, and as simpleperf's server and client do): a self probe's answer
  waits behind that too.

Theory's range for a measured value: from every queue of the load's way full (and the
sender's 5 ms) to none at all."""

from __future__ import annotations

from dataclasses import dataclass

from ...engine.responsiveness import REPLENISH_SECONDS
from ...stats import rpm
from .disciplines import BY_NAME
from .topology import Shaping


@dataclass(frozen=True)
class RpmTheory:
    rpm: float  # the draft's responsiveness, the queues standing as the disciplines hold them
    low: float  # every queue of the load's way full
    high: float  # no queue at all: the base RTT
    foreign_ms: float  # a foreign probe's round trip
    loaded_ms: float  # a self probe's


def predict_rpm(base_rtt_ms: float, load_way: list[tuple[Shaping, float | None]]
                ) -> RpmTheory | None:
    """Theory for a responsiveness run whose load crosses these link directions, each with
    the seconds its queue holds when full (None where its limit is not known: its delay
    could be anything; a direction without a rate holds none)."""
    shared = own = full = 0.0
    for shaping, fill in load_way:
        if shaping.rate is None:
            continue
        if fill is None:
            return None
        discipline = BY_NAME[shaping.qdisc]
        target = shaping.target or discipline.target
        standing = fill if target is None else min(target, fill)
        own += standing
        if not discipline.in_turn:
            shared += standing
        full += fill
    sender = REPLENISH_SECONDS * 1e3
    foreign = base_rtt_ms + shared * 1e3
    loaded = base_rtt_ms + own * 1e3 + sender
    worst = base_rtt_ms + full * 1e3
    return RpmTheory(rpm((foreign + loaded) / 2), rpm((worst + worst + sender) / 2),
                     rpm(base_rtt_ms), foreign, loaded)
