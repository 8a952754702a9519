"""Start a command at an agreed instant, so that the flows of a step begin together.

Every network namespace shares CLOCK_MONOTONIC, so the runner hands each launcher the same
absolute moment. The launcher sleeps until just before it, spins the last 2 ms, prints when
it really started (the runner measures the spread), then becomes the command.

    python3 -m simpleperf.lab.run.launch MONOTONIC_SECONDS [--timed] -- COMMAND ...

--timed runs COMMAND as a child and prints, after its output, when it ended and its exit
status (applications are timed from the start to their exit).

With COMMAND `simpleperf ARGS`, simpleperf runs inside the launcher itself, imported before
the instant: no interpreter start-up after it (which on a busy 2-core machine staggers
dozens of clients by seconds).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

START_MARK = "SIMPLEPERF-START"
END_MARK = "SIMPLEPERF-END"


def main(argv: list[str]) -> int:
    timed = len(argv) > 1 and argv[1] == "--timed"
    if timed:
        argv = argv[:1] + argv[2:]
    if len(argv) < 3 or argv[1] != "--":
        print("usage: launch MONOTONIC_SECONDS [--timed] -- COMMAND ...", file=sys.stderr)
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
    if timed:
        return _timed(argv[2:])
    try:
        os.execvp(argv[2], argv[2:])
    except OSError as error:
        print(f"cannot start {argv[2]}: {error.strerror}", file=sys.stderr)
        return 127


def _timed(command: list[str]) -> int:
    try:
        child = subprocess.Popen(command)
    except OSError as error:
        print(f"cannot start {command[0]}: {error.strerror}", file=sys.stderr)
        status = 127
    else:
        status = child.wait()
    sys.stdout.flush()
    os.write(1, f"{END_MARK} {time.monotonic():.6f} {status}\n".encode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
