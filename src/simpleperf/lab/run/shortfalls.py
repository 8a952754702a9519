"""Where the lab itself fell behind during a step: the own shaper's delay line dropped
packets it did not take in (the kernel counts them per NFQUEUE queue) or released them 20 ms
late or more (it counts those itself). The flows across such a queue are not judged (their
numbers are the machine's, not the link's), and the run says so."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from ..model import theory
from ..model.outcomes import FlowOutcome
from ..model.topology import Topology, TopologyError
from ..net import build, ownership
from ..net.shaping import delayline
from ..net.system import queue_drops


class ShaperShortfalls:
    """Counted when made (before a step's flows start) and judged after them."""

    def __init__(self, record: ownership.LabRecord, built: Topology) -> None:
        self.record = record
        self.built = built
        self.delay_lines = [process for process in record.processes
                            if process.what.startswith("delay line")]
        self.before = self.counts()

    def counts(self) -> dict[int, int]:
        """By queue number, the packets the own shaper's delay line failed to take in so far
        (the kernel dropped them) and its releases that came LATE_SECONDS or more late."""
        found: Counter[int] = Counter()
        for process in self.delay_lines:
            if not found:
                found.update(queue_drops(process.pid))  # one namespace holds every queue
            number = process.what.rsplit(" ", 1)[-1]
            found.update(delayline.read_late(str(ownership.RECORD_DIR / (
                f"{self.record.lab}.delayline{number}{delayline.LATE_SUFFIX}"))))
        return dict(found)

    def judge(self, outcomes: list[FlowOutcome], model: Topology,
              say: Callable[[str], None]) -> None:
        """Every flow whose path crossed a queue the lab fell behind on is not judged, and
        a warning names each such queue."""
        if not self.delay_lines:
            return
        time.sleep(delayline.REPORT_SECONDS * 1.5)  # its last word on late releases
        directions = build.delay_queue_directions(self.built)
        lost = {directions[queue]: count - self.before.get(queue, 0)
                for queue, count in self.counts().items()
                if count > self.before.get(queue, 0) and queue in directions}
        for (link, direction), count in sorted(lost.items()):
            say(f"  warning: the own shaper's delay line on {link} "
                f"{direction.replace('_', ' ')} fell behind: {count} packets it could not "
                "take in or releases 20 ms late or more (more packets a second than it keeps "
                "up with on this machine)")
        for outcome in outcomes if lost else []:
            try:
                way = theory.path(model, outcome.flow.source, outcome.address)
            except TopologyError:
                continue
            crossed = {(name, theory.direction_of(part))
                       for name, part in way.resources()}
            hit = [(link, direction, count) for (link, direction), count in lost.items()
                   if (link, direction) in crossed]
            if hit:
                outcome.no_theory = "the lab fell behind on its path: " + ", ".join(
                    f"the own shaper's delay line on {link} {direction.replace('_', ' ')} "
                    f"({count} packets dropped or released late)"
                    for link, direction, count in hit) + (
                    " (more packets a second than it keeps up with on this machine; "
                    "netem, --shaper netem, has no such limit)")
