"""A TCP flow's path one-way delay on the lab lies where the path puts it, under every
congestion control the kernel has: between the path's delay and that delay plus its full
queue, beside a UDP flow on the same queue. Before the receiver timed each write's last
segment by its arrival (a capture), BBR's flows read 50-70 ms on this 10 ms + 20 ms path:
the wait behind lost segments was counted as the path's."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from lab_helpers import assert_gone, lab, needs_lab

pytestmark = needs_lab

FLOOR_MS = 10.0
FULL_QUEUE_MS = 50 * 1514 * 8 / 30e6 * 1e3  # 50 frames at 30 Mbit/s: 20.2 ms
SLACK_MS = 1.0  # the verdicts' (lab.model.verdicts.DELAY_SLACK_MS)


def _available() -> list[str]:
    names = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    return [name for name in ("reno", "cubic", "bbr", "dctcp") if name in names]


def _experiment(controls: list[str]) -> str:
    steps = "".join(f"""
[[steps]]
case = "1"
name = "{name}"
flows = [{{ kind = "udp", from = "h1", to = "h2", rate = "5M", label = "udp-{name}" }},
         {{ kind = "tcp", from = "h1", to = "h2", label = "{name}-1", congestion = "{name}" }},
         {{ kind = "tcp", from = "h1", to = "h2", label = "{name}-2", congestion = "{name}" }}]
""" for name in controls)
    return f"""
name = "tcp-delay"
topology = "pair"
[pair]
rate = "30M"
delay = "10ms"
queue = 50
[timing]
duration = "5s"
[cases]
1 = "two TCP flows and a UDP flow on one queue"
{steps}"""


@pytest.mark.timing
def test_tcp_path_one_way_delay_is_within_the_path_under_every_congestion_control(tmp_path):
    controls = _available()
    assert {"reno", "cubic", "bbr"} <= set(controls)
    plan = tmp_path / "tcp-delay.toml"
    plan.write_text(_experiment(controls))
    lab("run", str(plan), "--results", str(tmp_path / "runs"), timeout=300)
    (folder,) = (tmp_path / "runs").iterdir()
    db = sqlite3.connect(folder / "results.sqlite")
    rows = db.execute("SELECT label, congestion, one_way_p50_ms, one_way_p99_ms, "
                      "base_one_way_ms, ok FROM flow").fetchall()
    assert len(rows) == 3 * len(controls)
    for label, congestion, median, p99, floor, ok in rows:
        assert ok and floor == pytest.approx(FLOOR_MS), label
        if label.startswith("udp"):
            continue
        assert congestion == label.split("-")[0]
        # BBR keeps the queue full here (two flows, each with twice the path's
        # bandwidth-delay product in flight); a loss-based flow fills it and backs off
        assert FLOOR_MS - SLACK_MS <= median <= FLOOR_MS + FULL_QUEUE_MS + SLACK_MS, \
            (label, median)
        # the own shaper's timers add a ms or two: UDP's p99 on the same queue reads 32
        assert median <= p99 < FLOOR_MS + FULL_QUEUE_MS + 5, (label, p99)
    assert_gone({"h1", "h2", "pair-wire"})
