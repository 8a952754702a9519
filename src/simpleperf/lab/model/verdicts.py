"""Verdicts: is what a case measured within the stated tolerance of what theory predicted?

Pure functions over a stored run's flows (store.load_run's dictionaries). A transfer is
within when its goodput is THROUGHPUT_LOW to THROUGHPUT_HIGH times theory's; a ping when
its median RTT is within RTT_SLACK_MS or RTT_SLACK_FRACTION of the base RTT, whichever is
larger. A failed flow is outside. A flow theory says nothing about, or one in a step whose
events changed the network while it ran, is not judged.

A loss-based (AIMD) TCP flow alone on its bottleneck is judged on its goodput after its first
congestion epoch (theory.congestion_epoch: slow start, its overshoot and the climb back, of
which theory promises nothing: CUBIC after a slow start into a queue shallower than the path
spends it below the link's rate); a run shorter than that epoch plus one interval is not
judged. Where a path's random loss limits a loss-based TCP flow, theory is a range: Mathis
et al.'s bound, an AIMD flow that never waits out a timeout, above, and Padhye et al.'s
(theory.pftk_bound), which adds Reno's timeouts, below (loss_range). A flow's median path
one-way delay (--trip-times; the mean in runs stored before
the median was) is within when it lies between the
forward path's delays less DELAY_SLACK_MS and those delays plus every forward queue full plus
DELAY_SLACK_MS (the application's write-to-read delay, which includes the sender's buffer, has
no theory and is not judged). TCP flows that share their bottleneck with other flows of the
step: their total is judged as one transfer (the link's rate is a promise), and each flow's
own share within what theory can promise after the congestion epochs it lasted: AIMD flows
converge to their max-min share, the gap shrinking by the decrease b each epoch, so over n
epochs the mean gap is at most the starting one times f = theory.share_tolerance (n); the
starting gap is at most 1 below (a flow cannot get less than nothing) and N / k - 1 above (a
flow of k of the N connections sharing the link cannot get more than all of it), widened by
LOSS_SIGMAS of the share's own spread over n epochs, SHARE_SPREAD / sqrt(n): which flows a
full queue drops from is chance, so shares wander about the fair one; a share whose least
comes to nothing (a few epochs) is not judged, only the total. A flow whose
congestion control is not AIMD (BBR) has no such theory, and only the total it is part of is
judged.

An rpm flow's goodput is a ramp of connections, not a transfer, and is not judged; its RPM
stands beside theory's (model/responsiveness.py: the queues a discipline keeps), which is
no bound on it: a probe whose packet a full queue drops waits out a retransmission timeout
(a SYN's second) that no queue explains. Across a sweep, an rpm flow's measured RPMs are
judged on their order (rpm_order_verdicts): every pair of sweep points whose theory differs
by ORDER_MARGIN or more must measure in theory's order; a pair theory puts closer is not
judged.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Any

from .flows import KINDS

THROUGHPUT_LOW = 0.90  # goodput against theory: slow start and headers cost a few percent
THROUGHPUT_HIGH = 1.05  # more than the bottleneck allows is a shaping fault
# a ping's median RTT against the base RTT: within this many ms or this part of it, whichever
# is larger (the hosts' and the shaper's own time to answer is in every RTT)
RTT_SLACK_MS = 1.0
RTT_SLACK_FRACTION = 0.05
DELAY_SLACK_MS = 1.0  # the machine's own share of a one-way delay
# rpm flows across a sweep: sweep points whose RPMs theory puts this far apart (the higher
# over the lower) must measure in the same order; nearer ones are not judged
ORDER_MARGIN = 1.25
# An AIMD flow's goodput over k congestion epochs that random losses end varies by this
# / sqrt(k) of its mean (one standard deviation). Simulated, a window a round trip that
# grows until a round trip loses any of its segments: 0.44-0.55 for Reno and CUBIC's
# TCP-friendly growth from 0.1 to 5 % loss. Measured, the 1 s intervals of 40 s runs of
# Reno and CUBIC through 10 and 20 ms lab links losing 0.1 to 1 %: 0.86-1.51 times what
# 0.5 gives, 1.16 on average (recoveries and timeouts vary too).
LOSS_EPOCH_SPREAD = 0.6
# AIMD flows sharing a full drop-tail queue: which of them lose a packet when it overflows is
# chance, so each one's share over n congestion epochs varies about its fair share by this /
# sqrt(n) (one standard deviation) beside the gap slow start left. Simulated, a window a
# round trip each, the queue's overflow dropping one packet a flow, each from a flow in
# proportion to its window: 0.27 for two flows, 0.37 for three, 0.41 for four, 0.47 for
# eight (Reno and CUBIC alike); measured over 220 CUBIC flows' shares in the shipped
# experiments' runs: 0.42.
SHARE_SPREAD = 0.45
LOSS_SIGMAS = 3  # a flow is within its range widened by this many of its spreads
LOSS_SPREAD_MOST = 0.3  # wider than this, too few epochs to judge: said, not judged
TOLERANCE = (f"goodput {THROUGHPUT_LOW:.2f} to {THROUGHPUT_HIGH:.2f} x theory; ping median "
             f"RTT within {RTT_SLACK_MS:g} ms or {RTT_SLACK_FRACTION:.0%} of the base RTT; "
             f"median path one-way delay from the path's delays to them plus its queues "
             f"full, "
             f"{DELAY_SLACK_MS:g} ms either side; "
             "a loss-based TCP flow alone on its bottleneck: its goodput after its first "
             "congestion epoch (start-up); a transfer timed from its program's start to "
             "its exit (scp, http): its size over its handshakes and slow start plus its "
             "size at its share; where random loss limits a loss-based TCP flow, "
             "from Padhye et al.'s goodput with timeouts (PFTK) to Mathis et al.'s without; "
             "TCP flows sharing a bottleneck: their total as "
             "one transfer, each flow's share from 1 - f - s to 1 + (N / k - 1) f + s times "
             "it, f = (1 - b^n) / ((1 - b) n) after n congestion epochs (AIMD with decrease "
             "b: CUBIC 0.7, Reno 0.5), k of the N connections sharing the link, s = "
             f"{LOSS_SIGMAS} x {SHARE_SPREAD} / sqrt(n) the share's own spread; not judged "
             "for BBR")


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
    notes: tuple[str, ...] = ()  # how flows that share a bottleneck were judged

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


def connections(flow: dict[str, Any]) -> int:
    return int(flow.get("parameters", {}).get("parallel") or 1)


def share_bounds(flow: dict[str, Any], sharing: int) -> tuple[float, float]:
    """The least and most of its share theory promises a flow whose bottleneck `sharing`
    connections share, after its congestion epochs (see the module's text): the gap slow
    start left, shrunk by the epochs, and LOSS_SIGMAS of the share's own spread over them,
    SHARE_SPREAD / sqrt(n) (which flows a full queue drops from is chance)."""
    tolerance = flow["share_tolerance"]
    spread = _spread(SHARE_SPREAD, float(flow.get("epochs") or 1))
    return (max(0.0, 1 - tolerance - spread),
            1 + (sharing / connections(flow) - 1) * tolerance + spread)


def flow_verdict(flow: dict[str, Any], sharing: int = 1, loaded: bool = False
                 ) -> FlowVerdict | None:
    """`sharing`: the connections of the step at the flow's bottleneck, when it shares one;
    `loaded`: other flows of the step load the network (a ping then sees queues)."""
    label = f"{flow['label']} {flow['kind']}"
    if not flow["ok"]:
        return FlowVerdict(label, False, f"failed: {flow['error']}")
    if flow.get("no_theory"):
        return None  # sharing_notes says why
    if KINDS[flow["kind"]].responsiveness:
        return None  # judged across the sweep, on its order (rpm_order_verdicts)
    if flow["kind"] == "ping":
        base, measured = flow["base_rtt_ms"], flow["rtt_median"]
        if base is None or measured is None:
            return None
        slack = max(RTT_SLACK_MS, RTT_SLACK_FRACTION * base)
        full = flow.get("loaded_rtt_ms")
        if loaded and full is not None:  # between the base and every queue on the way full
            return FlowVerdict(label, base - slack <= measured <= full + slack,
                               f"RTT under load {measured:.1f} ms, theory {base:.1f} .. "
                               f"{full:.1f}")
        return FlowVerdict(label, abs(measured - base) <= slack,
                           f"RTT {measured:.1f} ms, theory {base:.1f}")
    predicted, measured = flow["predicted"], flow["throughput"]
    if not predicted or measured is None:
        return None
    if flow.get("bottleneck") and flow.get("share_tolerance") is None:
        return None  # no theory of its share: judged in its bottleneck's total
    if flow.get("bottleneck") and inside_first_epoch([flow]):
        return None  # theory promises nothing of slow start's epoch: sharing_notes says
    startup = flow.get("epoch_seconds")
    if startup is not None and not flow.get("bottleneck"):
        steady = steady_goodput(flow["intervals"], startup)
        if steady is None:
            return None  # the run ended inside its start-up: sharing_notes says so
        ranged = loss_range(flow)
        if ranged is None:
            return None  # too few loss epochs: sharing_notes says so
        low, high, why = ranged
        return FlowVerdict(label, low <= steady / predicted <= high,
                           f"{steady / predicted:.2f} x theory after its start-up "
                           f"({startup:.1f} s){why}")
    ratio = measured / predicted
    asked = flow.get("rate")
    if (KINDS[flow["kind"]].paced and asked and predicted < asked * (1 - 1e-3)
            and not flow.get("parameters", {}).get("l4s")):
        # a paced flow above its share: a scheduler that serves flows in turn gives it at
        # least that share, and what the others leave unused (it is backlogged, they may not
        # be: TCP flows whose shares are a segment or two a round trip lose time to timeouts)
        ceiling = asked / predicted
        return FlowVerdict(label, THROUGHPUT_LOW <= ratio <= max(THROUGHPUT_HIGH, ceiling),
                           f"{ratio:.2f} x its share (theory: at least {THROUGHPUT_LOW:.2f}, "
                           f"at most what it sends, {ceiling:.2f})")
    if flow.get("bottleneck"):
        least, most = share_bounds(flow, sharing)
        if least <= 0:
            return None  # theory promises it no least share yet: sharing_notes says so
        low, high = min(THROUGHPUT_LOW, least), max(THROUGHPUT_HIGH, most)
        return FlowVerdict(label, low <= ratio <= high,
                           f"{ratio:.2f} x its share (theory: {low:.2f} to {high:.2f} after "
                           f"{flow['epochs']:.1f} congestion epochs)")
    ranged = loss_range(flow)
    if ranged is None:
        return None  # too few loss epochs: sharing_notes says so
    low, high, why = ranged
    return FlowVerdict(label, low <= ratio <= high, f"{ratio:.2f} x theory{why}")


def rpm_order_verdicts(steps: list[dict[str, Any]]) -> list[FlowVerdict]:
    """Each rpm flow (by label) across the sweep's points: its measured RPMs in theory's
    order, for every pair theory puts ORDER_MARGIN apart or more."""
    points: OrderedDict[str, list[tuple[str, float, float]]] = OrderedDict()
    for step in steps:
        if not step.get("sweep_value"):
            continue
        for flow in step["flows"]:
            if (flow["kind"] in KINDS and KINDS[flow["kind"]].responsiveness and flow["ok"]
                    and flow.get("rpm") and flow.get("rpm_theory")):
                points.setdefault(flow["label"], []).append(
                    (str(step["sweep_value"]), flow["rpm"], flow["rpm_theory"]))
    verdicts = []
    for label, found in points.items():
        judged, wrong = 0, []
        for i, (a, measured_a, theory_a) in enumerate(found):
            for b, measured_b, theory_b in found[i + 1:]:
                if max(theory_a, theory_b) < ORDER_MARGIN * min(theory_a, theory_b):
                    continue
                judged += 1
                if (measured_a > measured_b) != (theory_a > theory_b):
                    wrong.append(f"{a} {measured_a:.0f} vs {b} {measured_b:.0f} RPM "
                                 f"(theory {theory_a:.0f} vs {theory_b:.0f})")
        if judged:
            verdicts.append(FlowVerdict(
                f"{label} rpm order", not wrong,
                f"{judged - len(wrong)} of {judged} pairs in theory's order"
                + (f": {'; '.join(wrong[:3])}" if wrong else "")))
    return verdicts


def judged_seconds(flow: dict[str, Any]) -> float | None:
    """How long the goodput a flow is judged on was measured: after its start-up where it
    has one and is alone on its bottleneck (steady_span), else its whole run."""
    startup = flow.get("epoch_seconds")
    if startup is not None and not flow.get("bottleneck"):
        span = steady_span(flow["intervals"], startup)
        return span[1] if span else None
    if flow.get("seconds"):
        return float(flow["seconds"])
    intervals = flow.get("intervals") or []
    return float(sum(end - start for start, end, _ in intervals)) or None


def loss_epochs(flow: dict[str, Any]) -> float | None:
    """The congestion epochs (random loss ending each) in what a loss-limited flow is judged
    on; None where random loss does not limit it (Padhye et al.'s figure at or above
    theory's) or no epoch is known."""
    floor, epoch = flow.get("pftk_bound"), flow.get("loss_epoch_seconds")
    seconds = judged_seconds(flow)
    if not floor or floor >= flow["predicted"] or not epoch or not seconds:
        return None
    return seconds / float(epoch)


def loss_range(flow: dict[str, Any]) -> tuple[float, float, str] | None:
    """Goodput against theory's (Mathis et al.'s ceiling where random loss limits the flow)
    that is within, low and high, and the words that say why: from THROUGHPUT_LOW of the
    least theory expects, Padhye et al.'s (PFTK) with its timeouts, to THROUGHPUT_HIGH,
    each widened by LOSS_SIGMAS of the goodput's spread over the k loss epochs measured,
    LOSS_EPOCH_SPREAD / sqrt(k); None where that spread is more than LOSS_SPREAD_MOST: too
    few epochs to judge. Flows that random loss does not limit: the usual tolerance."""
    floor, predicted = flow.get("pftk_bound"), flow["predicted"]
    if not floor or floor >= predicted:
        return THROUGHPUT_LOW, THROUGHPUT_HIGH, ""
    epochs = loss_epochs(flow)
    spread = 0.0 if epochs is None else loss_spread(epochs)
    if spread > LOSS_SPREAD_MOST:
        return None
    low = THROUGHPUT_LOW * floor / predicted * (1 - spread)
    high = THROUGHPUT_HIGH * (1 + spread)
    over = "" if epochs is None else f", +-{spread:.0%} over {epochs:.0f} loss epochs"
    return low, high, (f" (theory: {low:.2f} to {high:.2f}, from PFTK's "
                       f"{floor / 1e6:.3g} Mbit/s with timeouts to Mathis et al.'s "
                       f"without{over})")


def loss_spread(epochs: float) -> float:
    """LOSS_SIGMAS of a loss-limited goodput's spread over `epochs` congestion epochs."""
    return _spread(LOSS_EPOCH_SPREAD, epochs)


def _spread(per_epoch: float, epochs: float) -> float:
    """LOSS_SIGMAS of a spread that is `per_epoch` over one congestion epoch, over `epochs`
    of them (it falls as 1 / sqrt(epochs))."""
    return LOSS_SIGMAS * per_epoch / math.sqrt(max(epochs, 1.0))


def delay_verdict(flow: dict[str, Any]) -> FlowVerdict | None:
    """The median path one-way delay between theory's floor and that floor with every
    forward queue full (full_queue_rtt - base_rtt: the queues of the way out). A TCP
    write's is its last segment's first arrival (timed_writes), so a loss's recovery is
    not in it; the median, because a flow's first RTTs can find queues from before it."""
    median = flow.get("one_way_p50_ms")
    measured = median if median is not None else flow.get("one_way_mean_ms")
    floor = flow.get("base_one_way_ms")
    if not flow["ok"] or measured is None or floor is None or flow.get("no_theory"):
        return None  # (DiffServ classes drain a class's queue at its share, not the link)
    queues = (flow["full_queue_rtt_ms"] or 0.0) - (flow["base_rtt_ms"] or 0.0)
    high = floor + queues + DELAY_SLACK_MS
    return FlowVerdict(f"{flow['label']} {flow['kind']}",
                       floor - DELAY_SLACK_MS <= measured <= high,
                       f"path one-way delay ({'median' if median is not None else 'mean'}) "
                       f"{measured:.1f} ms, theory {floor:.1f} .. "
                       f"{high - DELAY_SLACK_MS:.1f}")


STEADY_MIN_SECONDS = 2.0  # a receiver's second can hold what a loss held back from the last
# A last interval longer than this many of the others holds the drain after the senders
# stopped (parallel connections finishing one by one, one waiting out a retransmission
# timeout): its goodput is of a link no longer full, so the steady goodput leaves it out
DRAIN_INTERVALS = 1.5


def steady_goodput(intervals: list[list[float]], startup: float) -> float | None:
    """The goodput (bits/s) over the intervals that begin `startup` seconds or more after the
    first one began; None when they last less than STEADY_MIN_SECONDS (a TCP receiver counts
    bytes as it reads them, and a recovery's worth of them, held behind a lost segment, can
    come in the next interval)."""
    span = steady_span(intervals, startup)
    return span[0] if span else None


def steady_span(intervals: list[list[float]], startup: float) -> tuple[float, float] | None:
    """steady_goodput's goodput and the seconds it was measured over (a last interval that
    holds the drain after the senders stopped left out: DRAIN_INTERVALS)."""
    if not intervals:
        return None
    begin = intervals[0][0] + startup - 1e-6
    lengths = sorted(end - start for start, end, _ in intervals[:-1])
    *running, (last_start, last_end, _) = intervals
    if not lengths or last_end - last_start <= DRAIN_INTERVALS * lengths[len(lengths) // 2]:
        running = intervals
    steady = [(end - start, rate) for start, end, rate in running if start >= begin]
    seconds = sum(length for length, _ in steady)
    if seconds < STEADY_MIN_SECONDS - 1e-6:
        return None
    return sum(length * rate for length, rate in steady) / seconds, seconds


def together(step: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The step with each transfer's goodput taken over the intervals in which all its
    transfers ran at once (theory's shares are of flows that share the link: one that runs
    on after the others, a bulk sender draining its buffer after a paced flow's end, has the
    link to itself then), and a note saying so; the step as it is when it has fewer than two
    transfers, or no whole interval in common."""
    transfers = [flow for flow in step["flows"]
                 if flow["ok"] and flow.get("intervals") and flow["predicted"]]
    if len(transfers) < 2:
        return step, None
    begin = max(flow["intervals"][0][0] for flow in transfers)
    end = min(flow["intervals"][-1][1] for flow in transfers)
    rates = {id(flow): _within(flow["intervals"], begin, end) for flow in transfers}
    if any(rate is None for rate in rates.values()):
        return step, None
    longer = [flow for flow in transfers if flow["intervals"][-1][1] > end + COMMON_SLACK]
    if not longer:
        return step, None
    flows = [{**flow, "throughput": rates[id(flow)],
              "intervals": _inside(flow["intervals"], begin, end)}
             if id(flow) in rates else flow for flow in step["flows"]]
    note = (f"{step['name']}: goodput judged over {begin:.1f} to {end:.1f} s, while all its "
            f"transfers ran ({', '.join(flow['label'] for flow in longer)} ran longer)")
    return {**step, "flows": flows}, note


COMMON_SLACK = 0.05  # seconds: flows of one step start and end this close together


def _inside(intervals: list[list[float]], begin: float, end: float) -> list[list[float]]:
    return [interval for interval in intervals
            if interval[0] >= begin - COMMON_SLACK and interval[1] <= end + COMMON_SLACK]


def _within(intervals: list[list[float]], begin: float, end: float) -> float | None:
    """The goodput over the intervals that lie within begin..end; None when none does."""
    inside = [(stop - start, rate) for start, stop, rate in _inside(intervals, begin, end)]
    seconds = sum(length for length, _ in inside)
    if seconds <= 0:
        return None
    return sum(length * rate for length, rate in inside) / seconds


def shared_verdicts(step: dict[str, Any]) -> list[FlowVerdict]:
    """The total of the tcp flows of a step that share each bottleneck, as one transfer."""
    groups: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
    for flow in step["flows"]:
        if flow.get("bottleneck") and flow["predicted"]:
            groups.setdefault(flow["bottleneck"], []).append(flow)
    verdicts = []
    for bottleneck, flows in groups.items():
        label = " + ".join(flow["label"] for flow in flows) + f" on {bottleneck}"
        failed = [flow for flow in flows if not flow["ok"] or flow["throughput"] is None
                  or flow.get("no_theory")]
        if failed or inside_first_epoch(flows):
            continue  # each failed flow is outside on its own already; sharing_notes says
        ratio = (sum(flow["throughput"] for flow in flows)
                 / sum(flow["predicted"] for flow in flows))
        verdicts.append(FlowVerdict(label, THROUGHPUT_LOW <= ratio <= THROUGHPUT_HIGH,
                                    f"total {ratio:.2f} x theory"))
    return verdicts


def inside_first_epoch(flows: list[dict[str, Any]]) -> bool:
    """AIMD flows that share a bottleneck and ended inside their first congestion epoch
    (slow start, its overshoot and the climb back): theory promises their total nothing
    yet, as it promises a flow alone nothing of that epoch."""
    epochs = [flow.get("epochs") for flow in flows]
    known = [float(epoch) for epoch in epochs if epoch is not None]
    return len(known) == len(epochs) > 0 and min(known) < 1


def sharing_notes(step: dict[str, Any]) -> list[str]:
    """In words, how the flows of a step that share a bottleneck are judged: one line per
    bottleneck."""
    groups: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
    for flow in step["flows"]:
        if flow.get("bottleneck"):
            groups.setdefault(flow["bottleneck"], []).append(flow)
    notes = [f"{step['name']}: {flow['label']} not judged: {flow['no_theory']}"
             for flow in step["flows"] if flow["ok"] and flow.get("no_theory")]
    for flow in step["flows"]:
        startup = flow.get("epoch_seconds")
        if not flow["ok"] or flow.get("no_theory") or not flow.get("predicted"):
            continue
        if (startup is not None and not flow.get("bottleneck")
                and steady_goodput(flow["intervals"], startup) is None):
            notes.append(f"{step['name']}: {flow['label']} ({flow.get('congestion')}) not "
                         f"judged: the run ended inside its start-up (one congestion epoch "
                         f"on its path, {startup:.1f} s) or less than "
                         f"{STEADY_MIN_SECONDS:g} s after it (the drain after its senders "
                         "stopped left out), of which theory promises no goodput; a longer "
                         "run is judged after it")
        elif flow.get("throughput") is not None and loss_range(flow) is None:
            epochs = loss_epochs(flow) or 0.0
            notes.append(f"{step['name']}: {flow['label']} ({flow.get('congestion')}) not "
                         f"judged: random loss ended {epochs:.0f} of its congestion epochs "
                         f"({flow['loss_epoch_seconds']:.2f} s each) in what it is judged "
                         f"on, over which its goodput varies by "
                         f"+-{loss_spread(epochs):.0%} ({LOSS_SIGMAS} standard deviations): "
                         f"more than the "
                         f"{LOSS_SPREAD_MOST:.0%} a verdict can take; a longer run is judged")
    for bottleneck, flows in groups.items():
        algorithms = sorted({flow.get("congestion") or (
            "scalable" if flow.get("parameters", {}).get("l4s") else "?") for flow in flows})
        who = (f"{step['name']}: {', '.join(flow['label'] for flow in flows)} "
               f"({', '.join(algorithms)}) share {bottleneck}")
        promised = [flow for flow in flows if flow.get("share_tolerance") is not None]
        scalable = [flow["label"] for flow in flows if flow.get("parameters", {}).get("l4s")]
        if scalable:
            notes.append(f"{who}: {', '.join(scalable)} is an L4S flow (it answers CE marks "
                         "as DCTCP does, a loss by halving): how it and classic TCP split "
                         "the link follows each sender's response and the queues each waits "
                         "in, so theory promises each flow no share; only their total is "
                         "judged")
        elif len(promised) < len(flows):
            lacking = sorted({flow.get("congestion") or "?" for flow in flows
                              if flow.get("share_tolerance") is None})
            notes.append(f"{who}: {', '.join(lacking)} is not AIMD (it paces to a model of "
                         "the path instead of cutting its window at a loss), so theory "
                         "promises each flow no share; only their total is judged")
        elif inside_first_epoch(flows):
            epochs = min(flow["epochs"] for flow in flows)
            notes.append(f"{who}: {epochs:.1f} congestion epochs: the run ended inside the "
                         "first (start-up), of which theory promises neither their shares "
                         "nor their total; a longer run is judged")
        else:
            epochs = min(flow["epochs"] for flow in flows)
            sharing = sum(connections(flow) for flow in flows)
            bounds = [share_bounds(flow, sharing) for flow in flows]
            if min(b[0] for b in bounds) <= 0:
                notes.append(f"{who}: {epochs:.1f} congestion epochs: too few for theory to "
                             "promise each flow a least share (the gap slow start left and "
                             "the share's own spread over so few epochs can be all of it), "
                             "so such a share is not judged, their total is "
                             f"({THROUGHPUT_LOW:.2f} to {THROUGHPUT_HIGH:.2f}); a longer run "
                             "is judged flow by flow")
                continue
            notes.append(f"{who}: {epochs:.1f} congestion epochs or more, so theory promises "
                         f"each from {min(b[0] for b in bounds):.2f} to "
                         f"{max(b[1] for b in bounds):.2f} times its share (their total "
                         f"{THROUGHPUT_LOW:.2f} to {THROUGHPUT_HIGH:.2f})")
    return notes


def case_verdicts(steps: list[dict[str, Any]]) -> list[CaseVerdict]:
    """One verdict per case, in the order the cases ran."""
    cases: OrderedDict[str, tuple[int, list[FlowVerdict], list[str]]] = OrderedDict()
    for step in steps:
        judged, outside, notes = cases.get(step["case"], (0, [], []))
        if not step.get("events"):
            step, common = together(step)
            if common is not None:
                notes.append(common)
            sharing: Counter[str | None] = Counter()
            for flow in step["flows"]:
                if flow.get("bottleneck"):
                    sharing[flow["bottleneck"]] += connections(flow)
            loads = sum(KINDS[flow["kind"]].loads_path for flow in step["flows"]
                        if flow["kind"] in KINDS)
            verdicts = [flow_verdict(flow, sharing[flow.get("bottleneck")], loads > 0)
                        for flow in step["flows"]] + shared_verdicts(step)
            verdicts += [delay_verdict(flow) for flow in step["flows"]]
            for verdict in verdicts:
                if verdict is not None:
                    judged += 1
                    if not verdict.within:
                        outside.append(verdict)
            notes += [note for note in sharing_notes(step) if note not in notes]
        cases[step["case"]] = (judged, outside, notes)
    for case, (judged, outside, notes) in cases.items():
        for verdict in rpm_order_verdicts([s for s in steps if s["case"] == case]):
            judged += 1
            if not verdict.within:
                outside.append(verdict)
            cases[case] = (judged, outside, notes)
    return [CaseVerdict(case, judged, outside, tuple(notes))
            for case, (judged, outside, notes) in cases.items()]
