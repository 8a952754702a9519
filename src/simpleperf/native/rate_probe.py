"""`simpleperf -c HOST -u --probe`: the highest UDP rate the path carries with loss under a
threshold, found without knowing the path: grow the offered rate fourfold until a trial
fails, then bisect (geometrically) between the last good and the first bad rate.

A trial is good when the receiver lost at most the threshold, received at least
GOOD_DELIVERY of the offered rate (a sender or host that cannot reach the rate is no
proof that the path carries it), and the one-way delay did not grow by more than
QUEUE_GROWTH_MS: a rate just above the bottleneck fills the queue for seconds before the
first loss, so loss alone overestimates by up to a queue's worth per trial.

A failed trial is run once more before its rate counts as bad: a shared path (or an
emulated one on a busy host) loses a few packets now and then below its rate, and one such
accident would leave the search settled low for good. Nothing makes a path carry more than
it can, so a good trial is never repeated; nor is one whose receiver got less than
CLEARLY_OVER of the offered rate."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass

from ..description.client_options import ClientOptions
from .client import measure

START_RATE = 1e6
MAX_RATE = 100e9
MIN_RATE = 10e3
GROWTH = 4.0
PRECISION = 1.05  # stop when bad / good is below this
MAX_TRIALS = 16
TRIAL_SECONDS = 2.0
GOOD_DELIVERY = 0.9
QUEUE_GROWTH_MS = 5.0
CLEARLY_OVER = 0.5  # received / offered below which a failure needs no second trial


@dataclass(frozen=True)
class Trial:
    offered: float  # bits/s
    received: float  # bits/s at the receiver
    lost_percent: float
    queue_growth_ms: float | None
    good: bool


def search(run_trial: Callable[[float], tuple[float, float, float | None]],
           threshold: float, start: float = START_RATE, max_trials: int = MAX_TRIALS
           ) -> list[Trial]:
    """Pure search over `run_trial(rate) -> (received bits/s, lost percent, queue growth
    in ms or None)`."""
    trials: list[Trial] = []

    def trial(rate: float) -> Trial:
        received, lost, growth = run_trial(rate)
        good = (lost <= threshold and received >= GOOD_DELIVERY * rate
                and (growth is None or growth <= QUEUE_GROWTH_MS))
        trials.append(Trial(rate, received, lost, growth, good))
        return trials[-1]

    def attempt(rate: float) -> bool:
        first = trial(rate)
        if first.good or first.received < CLEARLY_OVER * rate or len(trials) >= max_trials:
            return first.good
        return trial(rate).good

    good_rate, bad_rate = None, None
    rate = start
    while len(trials) < max_trials:
        if attempt(rate):
            good_rate = rate
            if bad_rate is not None or rate * GROWTH > MAX_RATE:
                break
            rate *= GROWTH
        else:
            bad_rate = rate
            if good_rate is not None or rate / GROWTH < MIN_RATE:
                break
            rate /= GROWTH
    while (good_rate is not None and bad_rate is not None and bad_rate / good_rate > PRECISION
           and len(trials) < max_trials):
        middle = (good_rate * bad_rate) ** 0.5
        if attempt(middle):
            good_rate = middle
        else:
            bad_rate = middle
    return trials


def best(trials: list[Trial]) -> Trial | None:
    good = [t for t in trials if t.good]
    return max(good, key=lambda t: t.offered) if good else None


def run(options: ClientOptions, out: Callable[[str], None]) -> None:
    seconds = options.seconds if "duration" in options.given else TRIAL_SECONDS
    trial_options = dataclasses.replace(  # trials: no rows
        options, probe=False, latency=False, interval=0.0).asking(duration=seconds,
                                                                  num_bytes=None)
    if not options.json:
        out(f"UDP rate search to {options.host} port {options.port}: loss under "
            f"{options.loss_threshold:g}%, {seconds:g} s per trial, {options.test.length}-byte "
            f"datagrams")

    def run_trial(rate: float) -> tuple[float, float, float | None]:
        document = measure(trial_options.asking(rate=rate).settled())
        total = document["end"]["sum"]
        received = document["end"]["sum_received"]
        result = (received.get("bits_per_second", 0.0), total.get("lost_percent", 0.0),
                  total.get("queue_growth_ms"))
        if not options.json:
            growth = "" if result[2] is None else f"   queue growth {result[2]:7.2f} ms"
            out(f"offered {rate / 1e6:10.2f} Mbps   received {result[0] / 1e6:10.2f} Mbps   "
                f"loss {result[1]:6.2f}%{growth}")
        return result

    asked = options.test.rate if "rate" in options.given else 0.0
    trials = search(run_trial, options.loss_threshold, asked or START_RATE)
    found = best(trials)
    if options.json:
        out(json.dumps({"probe": {
            "loss_threshold_percent": options.loss_threshold, "trial_seconds": seconds,
            "datagram_bytes": options.test.length,
            "trials": [dataclasses.asdict(t) for t in trials],
            "result": dataclasses.asdict(found) if found else None}}, indent=2))
    elif found is None:
        out(f"No rate from {MIN_RATE / 1e3:g} kbit/s up kept loss under "
            f"{options.loss_threshold:g}%")
    else:
        out(f"Highest rate with loss under {options.loss_threshold:g}%: "
            f"{found.offered / 1e6:.2f} Mbps offered, {found.received / 1e6:.2f} Mbps "
            f"received ({found.lost_percent:.2f}% loss)")
