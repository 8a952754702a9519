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
    assert {page.stem for page in TUTORIALS.glob("*.md")} == {
        "bufferbloat", "failover", "containerlab", "fleet", "portfolio"}


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


@pytest.mark.slow
def test_the_containerlab_tutorial_shows_what_it_says(tmp_path):
    """wan as containerlab's files and back: the same 40 ms and about its 50 Mbit/s; a
    hand-written containerlab file's OSPF neighbours Full, its 10 ms link's 20 ms RTT, and
    its tc lines read back as the link's rate, delay and queue; the clabernetes export."""
    exported, wan, ring, k8s = _run_blocks(TUTORIALS / "containerlab.md", tmp_path)
    assert "wan.clab.yml" in exported and int(exported.split()[-1]) > 10  # tc lines
    assert 40 <= _ping_avg(wan) < 45, wan
    rates = [float(rate) for rate in re.findall(r"([\d.]+) Mbps$", wan, re.M)]
    assert rates and all(40 < rate <= 50 for rate in rates), wan
    assert re.search(r"^10\.0\.0\.2 .* Full", ring, re.M), ring
    assert 20 <= _ping_avg(ring) < 24, ring
    assert re.search(r"r1-r2 .* 20 Mbit/s, delay 10 ms one-way, queue 100 pkt", ring), ring
    assert "wan.clabernetes.yaml" in k8s
    assert (tmp_path / "wan-k8s" / "wan.clabernetes.yaml").stat().st_size > 0
    assert_gone({"h1", "h3", "r1", "r2", "PC1", "PC2", "wan-wire", "ring-wire"})


@pytest.mark.slow
def test_the_fleet_tutorial_shows_what_it_says(tmp_path):
    """A probe by hand answers in Prometheus' format; the fleet, as Prometheus recorded it
    and read back, agrees with theory in every phase: site B at its backup's 10 Mbit/s
    while WB is down, 20 before and after; everything it started is gone after."""
    (tmp_path / "examples").symlink_to(TUTORIALS.parents[1] / "examples")  # the clone's
    probe, fleet = _run_blocks(TUTORIALS / "fleet.md", tmp_path)
    assert re.search(r"^probe_success\{.*\} 1(\.0)?$", probe, re.M), probe
    assert re.search(r"^simpleperf_tcp_retransmits\{.*\} \d", probe, re.M), probe
    goodput = re.search(r"^simpleperf_goodput_bits_per_second\{.*\} ([\d.e+]+)$", probe, re.M)
    assert goodput and float(goodput.group(1)) > 1e8, probe  # loopback: far past 100 Mbit/s
    rows = {(m.group(1), m.group(2)): (int(m.group(3)), float(m.group(4)), float(m.group(5)),
                                       m.group(6))
            for m in re.finditer(r"^(\w)\s+(before|failed|after)\s+(\d+)\s+([\d.]+)\s+"
                                 r"([\d.]+)\s+\S+\s+\S+\s+(ok|OFF)$", fleet, re.M)}
    assert len(rows) == 9, fleet
    assert [rows[("B", phase)][2] for phase in ("before", "failed", "after")] == \
        [20.0, 10.0, 20.0]
    assert rows[("A", "failed")][2] == 50.0 and rows[("C", "failed")][2] == 100.0
    assert all(verdict == "ok" and probes >= 2 for probes, _, _, verdict in rows.values()), \
        fleet
    (folder,) = (tmp_path / "fleet-results").iterdir()
    assert (folder / "series.csv").read_text().count("\n") > 9
    assert (folder / "goodput.png").stat().st_size > 0
    assert_gone({"mon", "ha", "hb", "hc", "r0", "ra", "rb", "rc"})


@pytest.mark.slow
def test_the_portfolio_tutorial_shows_what_it_says(tmp_path):
    """h1 to h9 across all three links at their 80 ms; L1 by hand: 20 ms and about 35 of its
    40 Mbit/s. The page's last block, all five cases, is Getting started's own, which its
    test runs and checks (tests/test_lab_run.py): the same text, run once."""
    *blocks, run = bash_blocks(TUTORIALS / "portfolio.md")
    started = bash_blocks(TUTORIALS.parent / "getting-started.md")
    assert run.strip() == started[-1].strip() == "simpleperf lab run portfolio --quick"
    up, link = run_blocks(blocks, tmp_path)
    assert re.search(r"L1 .* 40 Mbit/s, delay 10 ms one-way, queue 67 pkt", up), up
    assert 80 <= _ping_avg(up) < 84, up
    assert 20 <= _ping_avg(link) < 22, link
    rates = [float(rate) for rate in re.findall(r"([\d.]+) Mbps$", link, re.M)]
    assert rates and all(30 < rate <= 40 for rate in rates), link
    assert_gone({"h1", "h9", "r1", "r2", "r3", "r4", "portfolio-wire"})
