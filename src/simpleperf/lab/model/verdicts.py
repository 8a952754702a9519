"""Verdicts: is what a case measured within the stated tolerance of what theory predicted?

Pure functions over a stored run's flows (store.load_run's dictionaries). A transfer is
within when its goodput is THROUGHPUT_LOW to THROUGHPUT_HIGH times theory's; a ping when
its median RTT is within RTT_SLACK_MS or RTT_SLACK_FRACTION of the base RTT, whichever is
larger. A failed flow is outside. A flow theory says nothing about, or one in a step whose
events changed the network while it ran, is not judged.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

THROUGHPUT_LOW = 0.90  # goodput against theory: slow start and headers cost a few percent
THROUGHPUT_HIGH = 1.05  # more than the bottleneck allows is a shaping fault
RTT_SLACK_MS = 1.0
RTT_SLACK_FRACTION = 0.05
TOLERANCE = (f"goodput {THROUGHPUT_LOW:.2f} to {THROUGHPUT_HIGH:.2f} x theory; ping median "
             f"RTT within {RTT_SLACK_MS:g} ms or {RTT_SLACK_FRACTION:.0%} of the base RTT")


@dataclass(frozen=True)
class FlowVerdict:
    label: str
    within: bool
    detail: str  # e.g. "0.62 x theory", "RTT 80.4 ms, theory 80.0", "failed: ..."


@dataclass(frozen=True)
class CaseVerdict:
    case: str
    judged: int
    outside: list[FlowVerdict]

    @property
    def within(self) -> bool | None:
        """True, False, or None when nothing in the case could be judged."""
        return None if self.judged == 0 else not self.outside

    def summary(self) -> str:
        if self.judged == 0:
            return "not judged (no flow with a prediction, or events changed the network)"
        if not self.outside:
            return f"within tolerance: all {self.judged} flows"
        worst = "; ".join(f"{v.label} {v.detail}" for v in self.outside[:3])
        more = f" (+{len(self.outside) - 3} more)" if len(self.outside) > 3 else ""
        return f"outside: {len(self.outside)} of {self.judged} flows ({worst}{more})"


def flow_verdict(flow: dict[str, Any]) -> FlowVerdict | None:
    label = f"{flow['label']} {flow['kind']}"
    if not flow["ok"]:
        return FlowVerdict(label, False, f"failed: {flow['error']}")
    if flow["kind"] == "ping":
        base, measured = flow["base_rtt_ms"], flow["rtt_median"]
        if base is None or measured is None:
            return None
        slack = max(RTT_SLACK_MS, RTT_SLACK_FRACTION * base)
        return FlowVerdict(label, abs(measured - base) <= slack,
                           f"RTT {measured:.1f} ms, theory {base:.1f}")
    predicted, measured = flow["predicted"], flow["throughput"]
    if not predicted or measured is None:
        return None
    ratio = measured / predicted
    return FlowVerdict(label, THROUGHPUT_LOW <= ratio <= THROUGHPUT_HIGH,
                       f"{ratio:.2f} x theory")


def case_verdicts(steps: list[dict[str, Any]]) -> list[CaseVerdict]:
    """One verdict per case, in the order the cases ran."""
    cases: OrderedDict[str, tuple[int, list[FlowVerdict]]] = OrderedDict()
    for step in steps:
        judged, outside = cases.get(step["case"], (0, []))
        if not step.get("events"):
            for flow in step["flows"]:
                verdict = flow_verdict(flow)
                if verdict is not None:
                    judged += 1
                    if not verdict.within:
                        outside.append(verdict)
        cases[step["case"]] = (judged, outside)
    return [CaseVerdict(case, judged, outside) for case, (judged, outside) in cases.items()]
