"""Every queue discipline a link direction can run, defined once: what `qdisc` takes, which
of them Linux has, how each serves the flows that share it and how it is set up. The lab's
own implementations (net/shaping/aqm, sans IO) are keyed by the same names; a test fails
when the two disagree. Link properties, theory, the stages that build a link and the
reference pages derive their lists from QUEUE_DISCIPLINES.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QueueDiscipline:
    """One discipline. `kernel`: Linux has a qdisc of this name (whether this kernel has its
    module, the probe asks); `in_turn`: it serves flows in turn, each its max-min share,
    rather than one queue in arrival order, where a flow that does not back off takes what
    it sends; `own_rate`: it holds the link's rate itself (CAKE's shaper, the classes' htb
    tree) instead of sitting below the lab's rate limiter; `about`: one line, its source;
    `sheds_longest`: a full queue drops from its longest flow's queue (a flow above its
    share loses its own packets), where the others drop whatever packet arrives, of any
    flow (fq_pie, as Linux's: beside a flow that does not back off, the shared limit fills
    with its packets until PIE's drop probability for it catches up, and every flow's
    arrivals are dropped meanwhile). `target`: the queueing delay its AQM holds a standing
    queue at under load (the kernel's default; the lab's own implementations start from
    it, a link's `target` replaces it), None for a queue that fills."""

    name: str
    kernel: bool
    in_turn: bool
    own_rate: bool
    about: str
    sheds_longest: bool = False
    target: float | None = None


QUEUE_DISCIPLINES: tuple[QueueDiscipline, ...] = (
    QueueDiscipline("droptail", False, False, False,
                    "first in, first out; a packet that finds the queue full is dropped "
                    "(the kernel's pfifo)"),
    QueueDiscipline("codel", True, False, False, "CoDel, RFC 8289", target=0.005),
    QueueDiscipline("fq_codel", True, True, False, "FQ-CoDel, RFC 8290", sheds_longest=True,
                    target=0.005),
    QueueDiscipline("pie", True, False, False, "PIE, RFC 8033", target=0.015),
    QueueDiscipline("fq_pie", True, True, False, "flow queueing over PIE (Linux's fq_pie)",
                    target=0.015),
    QueueDiscipline("cake", True, True, True,
                    "CAKE: tins by DSCP, host and flow isolation, COBALT (Linux's sch_cake)",
                    sheds_longest=True, target=0.005),
    QueueDiscipline("dualpi2", True, False, False,
                    "the DualQ Coupled AQM for L4S, RFC 9332 (its two queues coupled into "
                    "one's shares)", target=0.015),
    QueueDiscipline("classes", False, False, True,
                    "DiffServ classes as routers configure them: expedited forwarding first "
                    "and policed, weighted classes each a drop-tail queue"),
)
BY_NAME = {discipline.name: discipline for discipline in QUEUE_DISCIPLINES}


def target_of(name: str) -> float:
    """An AQM's default target delay, seconds (what its own implementation starts from)."""
    target = BY_NAME[name].target
    assert target is not None, f"{name} holds no target"
    return target
QDISCS = tuple(BY_NAME)
KERNEL_QDISCS = tuple(d.name for d in QUEUE_DISCIPLINES if d.kernel)
# Served in arrival order (within a class's part of the link, for classes)
ARRIVAL_ORDER = tuple(d.name for d in QUEUE_DISCIPLINES if not d.in_turn)
# Serve flows in turn, but a full queue drops whatever arrives, of any flow
SHARED_TAIL_DROP = tuple(d.name for d in QUEUE_DISCIPLINES if d.in_turn and not d.sheds_longest)
# The kernel's active queue management below the lab's rate limiter
KERNEL_AQM = tuple(d.name for d in QUEUE_DISCIPLINES if d.kernel and not d.own_rate)
