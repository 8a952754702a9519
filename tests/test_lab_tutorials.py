"""The tutorials run as written: every ```bash block of each page, in a fresh folder, as a
reader pastes it, and what the page says the run shows is checked on what it stored."""

from __future__ import annotations

import re
import sqlite3
import statistics
from pathlib import Path

import pytest
from lab_helpers import assert_gone, bash_blocks, needs_lab, run_blocks

pytestmark = needs_lab
TUTORIALS = Path(__file__).resolve().parents[1] / "docs" / "tutorials"


def _run_blocks(page: Path, folder: Path) -> list[str]:
    return run_blocks(bash_blocks(page), folder)


def test_every_tutorial_is_run_by_a_test():
    assert {page.stem for page in TUTORIALS.glob("*.md")} == {"bufferbloat", "failover"}


@pytest.mark.slow
@pytest.mark.timing
def test_the_bufferbloat_tutorial_shows_what_it_says(tmp_path):
    """Drop-tail's full queue waits the ping out for hundreds of ms; flow queueing serves it
    at the path's RTT; the plots and the report are where the page says."""
    (output,) = _run_blocks(TUTORIALS / "bufferbloat.md", tmp_path)
    (folder,) = (tmp_path / "bufferbloat-results").glob("bufferbloat-*")
    for made in ("report.html", "plots/casesweep-latency.png",
                 "plots/casesweep-throughput.png"):
        assert (folder / made).exists(), made
    assert "Verdicts" in output
    db = sqlite3.connect(folder / "results.sqlite")
    medians = {}
    for qdisc, in db.execute("SELECT DISTINCT sweep_value FROM step"):
        rtts = [r for r, in db.execute(
            "SELECT p.rtt_ms FROM probe p JOIN flow f ON f.id = p.flow_id JOIN step s ON "
            "s.id = f.step_id WHERE s.sweep_value = ? AND f.kind = 'ping' AND p.rtt_ms "
            "IS NOT NULL", (qdisc,))]
        medians[qdisc] = statistics.median(rtts)
    assert set(medians) == {"droptail", "codel", "fq_codel"}
    base = 20.0  # 10 ms each way
    assert base <= medians["fq_codel"] < base + 10, medians
    assert medians["droptail"] > base + 100, medians  # 1000 frames at 20 Mbit/s: 606 ms
    assert medians["droptail"] > 2 * medians["codel"], medians
    assert_gone({"h1", "h2", "pair-wire"})


def _ping_avg(output: str) -> float:
    """ping's summary: rtt min/avg/max/mdev = 40.1/40.3/40.6/0.2 ms."""
    match = re.search(r"= [\d.]+/([\d.]+)/", output)
    assert match, output
    return float(match.group(1))


@pytest.mark.slow
def test_the_failover_tutorial_shows_what_it_says(tmp_path):
    """The direct path's RTT (40 ms), the transit path's with P13 down (120 ms), back again;
    BGP's table with both routes; then the failover run's events, each with its outage."""
    up, broken, run = _run_blocks(TUTORIALS / "failover.md", tmp_path)
    assert 40 <= _ping_avg(up) < 45, up
    assert "10.3.1.0/24" in up and "65002 65003" in up  # the transit route, beside P13's
    before, after = re.split(r"(?=PING )", broken)[1:]
    assert 120 <= _ping_avg(before) < 126 and 40 <= _ping_avg(after) < 45, broken
    assert_gone({"h1", "h3", "r1", "r2", "r3", "r4", "r5"})
    (folder,) = (tmp_path / "failover-results").glob("failover-*")
    assert (folder / "report.html").exists() and "link P13 down" in run
    db = sqlite3.connect(folder / "results.sqlite")
    outages = db.execute("SELECT e.description, f.label, f.outage FROM event_flow f JOIN "
                         "event e ON e.id = f.event_id ORDER BY e.position, f.label").fetchall()
    assert [(what.split(": ")[-1], label) for what, label, _ in outages] == [
        ("link P13 down", "tcp"), ("link P13 down", "udp"), ("link P13 up", "tcp"),
        ("link P13 up", "udp")], outages
    # the failure silences both flows while BGP moves them (a fraction of a second here)
    assert all(outage is not None and 0 < outage < 3 for _, _, outage in outages[:2]), outages
    assert "routes converged" in run
