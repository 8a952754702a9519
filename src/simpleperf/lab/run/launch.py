"""Start a command at an agreed instant, so that the flows of a step begin together.

Every network namespace shares CLOCK_MONOTONIC, so the runner hands each launcher the same
absolute moment. The launcher sleeps until just before it, spins the last 2 ms, prints when
it really started (the runner measures the spread), then becomes the command.

    python3 -m simpleperf.lab.run.launch MONOTONIC_SECONDS -- COMMAND ...

With COMMAND `simpleperf ARGS`, simpleperf runs inside the launcher itself, imported before
the instant: no interpreter start-up after it (which on a busy 2-core machine staggers
dozens of clients by seconds).
"""

from __future__ import annotations

import os
import sys
import time

START_MARK = "SIMPLEPERF-START"


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: launch MONOTONIC_SECONDS -- COMMAND ...", file=sys.stderr)
        return 2
    at = float(argv[0])
    in_process = argv[2] == "simpleperf"
    if in_process:
        from simpleperf.classic import client  # noqa: F401 - import now
        from simpleperf.main import main as simpleperf_main
    while (remaining := at - time.monotonic()) > 0.002:
        time.sleep(remaining - 0.002)
    while time.monotonic() < at:
        pass
    os.write(1, f"{START_MARK} {time.monotonic():.6f}\n".encode())
    if in_process:
        return simpleperf_main(argv[3:])
    try:
        os.execvp(argv[2], argv[2:])
    except OSError as error:
        print(f"cannot start {argv[2]}: {error.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
