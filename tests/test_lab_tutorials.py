"""The tutorials run as written: every ```bash block of each page, in a fresh folder, as a
reader pastes it, and what the page says the run shows is checked on what it stored."""

from __future__ import annotations

import re
import sqlite3
import statistics
import subprocess
from pathlib import Path

import pytest
from lab_helpers import assert_gone, needs_lab

pytestmark = needs_lab
TUTORIALS = Path(__file__).resolve().parents[1] / "docs" / "tutorials"


def _bash_blocks(page: Path) -> list[str]:
    return re.findall(r"^```bash\n(.*?)^```", page.read_text(), re.S | re.M)


def _run_blocks(page: Path, folder: Path) -> list[str]:
    outputs = []
    for block in _bash_blocks(page):
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=folder,
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, (block, done.stdout[-2000:], done.stderr[-2000:])
        assert "Traceback" not in done.stderr, block
        outputs.append(done.stdout)
    return outputs


def test_every_tutorial_is_run_by_a_test():
    assert {page.stem for page in TUTORIALS.glob("*.md")} == {"bufferbloat"}


@pytest.mark.slow
@pytest.mark.timing
def test_the_bufferbloat_tutorial_shows_what_it_says(tmp_path):
    """Drop-tail's full queue waits the ping out for hundreds of ms; flow queueing serves it
    at the path's RTT; the plots and the report are where the page says."""
    (output,) = _run_blocks(TUTORIALS / "bufferbloat.md", tmp_path)
    (folder,) = (tmp_path / "rrul-results").glob("rrul-*")
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
    assert set(medians) == {"droptail", "codel", "pie", "fq_codel", "fq_pie", "cake"}
    base = 20.0  # 10 ms each way
    for fair in ("fq_codel", "fq_pie", "cake"):
        assert base <= medians[fair] < base + 10, medians
    assert medians["droptail"] > base + 100, medians  # 1000 frames at 20 Mbit/s: 606 ms
    assert medians["droptail"] > max(medians["codel"], medians["pie"]), medians
    assert_gone({"h1", "h2", "pair-wire"})
