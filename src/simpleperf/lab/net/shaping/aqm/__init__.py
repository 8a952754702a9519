"""The lab's own queue disciplines: what a link's bottleneck does with the packets waiting
for the wire, where the kernel's qdisc cannot do it (the own shaper). Each discipline is
the published algorithm, following the Linux qdisc of the same name where the two differ
(the guest compares them): drop-tail, CoDel (RFC 8289), PIE (RFC 8033), and flow queueing
over either (FQ-CoDel, RFC 8290; FQ-PIE), the DualQ Coupled AQM for L4S (DualPI2, RFC
9332), CAKE (its tins, host and flow isolation and COBALT); and DiffServ classes as routers
configure them.

Sans-IO: a discipline is given packets and times and answers which to send, drop or mark;
`bottleneck.py` drives one at the link's rate and the delay line gives the verdicts. A new
discipline is one module here with a `make(settings)` and a row in DISCIPLINES.
"""

from __future__ import annotations

from collections.abc import Callable

from . import cake, classes, codel, dualpi2, fifo, fq, pie
from .base import Discipline, Packet, Settings

DISCIPLINES: dict[str, Callable[[Settings], Discipline]] = {
    "droptail": fifo.make,
    "codel": codel.make,
    "pie": pie.make,
    "fq_codel": fq.make_codel,
    "fq_pie": fq.make_pie,
    "dualpi2": dualpi2.make,
    "cake": cake.make,
    "classes": classes.make,
}
OWN_QDISCS = tuple(DISCIPLINES)


def make(name: str, settings: Settings) -> Discipline:
    return DISCIPLINES[name](settings)


__all__ = ["DISCIPLINES", "OWN_QDISCS", "Discipline", "Packet", "Settings", "make"]
