#!/usr/bin/env python3
"""The lab's fidelity with netem beside the own shaper's, on a machine whose kernel has no
netem: bench/lab_calibration.py runs here with the own shaper, then in Debian's kernel booted
by scripts/netem-guest with the own shaper and with netem. Own-in-guest against netem-in-guest
tells what netem does apart from what the emulated guest does to every measurement (its
unshaped RTT is the first row); own here against own in the guest shows the emulator's cost.

    python3 bench/netem_beside_own.py [--quick] [--only PART]...   (root; about 20 minutes)
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CALIBRATION = REPO / "bench" / "lab_calibration.py"
COLUMNS = (("own, this machine", "host-own"), ("own, guest", "guest-own"),
           ("netem, guest", "guest-netem"))


def calibration(shaper: str, out: Path, options: list[str]) -> list[str]:
    return [sys.executable, str(CALIBRATION), "--shaper", shaper, "--json", str(out), *options]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    parser.add_argument("--only", choices=("portfolio", "pair"), action="append",
                        help="this part only (repeatable; default pair and portfolio)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench: needs root (network namespaces, the guest)", file=sys.stderr)
        return 1
    options = ["--quick"] if args.quick else []
    for part in args.only or ["pair", "portfolio"]:
        options += ["--only", part]
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder)
        subprocess.run(calibration("own", out / "host-own.json", options), check=True)
        inner = " && ".join(shlex.join(calibration(shaper, out / f"guest-{shaper}.json",
                                                   options)) for shaper in ("own", "netem"))
        subprocess.run(["bash", str(REPO / "scripts" / "netem-guest"), "--command", inner],
                       check=True, env={**os.environ, "SIMPLEPERF_GUEST_OUT": folder})
        runs = {key: json.loads((out / f"{key}.json").read_text()) for _, key in COLUMNS}
    print(f"\nkernels: this machine {runs['host-own']['kernel']}, guest "
          f"{runs['guest-netem']['kernel']} (emulated by qemu, no KVM)")
    # A name can stand on several rows ("  the same with BBR"): rows are told apart by the
    # name and how many rows of that name came before.
    def keyed(rows: list[dict]) -> dict[str, dict]:
        seen: dict[str, int] = {}
        out = {}
        for row in rows:
            seen[row["name"]] = seen.get(row["name"], 0) + 1
            out[f"{row['name']}#{seen[row['name']]}"] = row
        return out

    measured = {key: keyed(run["rows"]) for key, run in runs.items()}
    names = list(measured["host-own"])
    widths = (44, 34, 34, 34)
    print("".join(f"{title:<{width}}" for title, width in
                  zip(("", *(title for title, _ in COLUMNS)), widths, strict=True)) + "target")
    for name in names:
        cells = []
        for _, key in COLUMNS:
            row = measured[key].get(name)
            verdict = {True: " ok", False: " MISS", None: ""}[row["ok"]] if row else ""
            cells.append((row["measured"] if row else "-") + verdict)
        target = measured["host-own"][name]["target"]
        print(f"{name.rsplit('#', 1)[0]:<44}" + "".join(f"{cell:<34}" for cell in cells)
              + target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
