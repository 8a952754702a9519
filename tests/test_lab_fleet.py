"""The shipped fleet example: a lab of sites probed by the exporter on a schedule and
scraped by a real Prometheus, a WAN link failing in the middle; what Prometheus recorded,
read back, agrees with theory in every phase, and everything it started is gone after."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from lab_helpers import assert_gone, needs_lab

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fleet.py"

pytestmark = [*needs_lab, pytest.mark.slow]


def test_the_fleet_sees_site_b_move_to_its_backup_and_back(tmp_path):
    done = subprocess.run([sys.executable, str(EXAMPLE), "--quick", "--results",
                           str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout, done.stderr)
    rows = {(m.group(1), m.group(2)): (int(m.group(3)), float(m.group(4)), float(m.group(5)),
                                       m.group(6))
            for m in re.finditer(r"^(\w)\s+(before|failed|after)\s+(\d+)\s+([\d.]+)\s+"
                                 r"([\d.]+)\s+\S+\s+\S+\s+(ok|OFF)$", done.stdout, re.M)}
    assert len(rows) == 9, done.stdout
    # Site B: 20 Mbit/s over WB, 10 over the backup through C while WB is down, 20 again.
    assert [rows[("B", phase)][2] for phase in ("before", "failed", "after")] == \
        [20.0, 10.0, 20.0]
    assert rows[("A", "failed")][2] == 50.0 and rows[("C", "failed")][2] == 100.0
    assert all(verdict == "ok" and probes >= 2 for probes, _, _, verdict in rows.values()), \
        done.stdout
    (folder,) = tmp_path.iterdir()
    assert (folder / "series.csv").read_text().count("\n") > 9
    assert (folder / "goodput.png").stat().st_size > 0
    assert_gone({"mon", "ha", "hb", "hc", "r0", "ra", "rb", "rc"})
