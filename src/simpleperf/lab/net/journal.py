"""A running lab's journal: what was done to it while it was up (a link or node changed, a
flow or a capture started from the console), one JSON line each, whoever did it. The
commands and the console write it through the same code (lifecycle.change writes every
change), `lab status` shows its last lines, the console's timeline all of them; it goes
with the lab (ownership.tear_down)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from . import ownership

SHOWN = 200  # lines the console reads and keeps, newest
MAX_READ = 256 * 1024  # bytes read from the journal's end
BY = ("command", "page")  # who did it: a typed command, or the console's page


@dataclass(frozen=True)
class Entry:
    at: float  # seconds since the epoch
    what: str  # "link P13 down; routing: converged 0.33 s after the change"
    by: str  # one of BY

    def line(self) -> str:
        """As `lab status` shows it."""
        origin = " (from the console)" if self.by == "page" else ""
        return f"{time.strftime('%H:%M:%S', time.localtime(self.at))} {self.what}{origin}"


def path(lab: str) -> Path:
    return ownership.RECORD_DIR / f"{lab}{ownership.JOURNAL_SUFFIX}"


def note(lab: str, what: str, by: str = "command", at: float | None = None
         ) -> Entry | None:
    """Add a line (one write, whole: two writers never interleave inside one), at `at`
    (when it was done; now by default); None for a lab that has no record (taken down:
    nothing of it is left behind)."""
    if by not in BY:
        raise ValueError(f"a journal entry is by one of {', '.join(BY)}, not {by!r}")
    if not (ownership.RECORD_DIR / f"{lab}{ownership.RECORD_SUFFIX}").is_file():
        return None
    entry = Entry(time.time() if at is None else at, what.replace("\n", "; "), by)
    data = (json.dumps(asdict(entry)) + "\n").encode()
    descriptor = os.open(path(lab), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(descriptor, data)
    finally:
        os.close(descriptor)
    return entry


def read(lab: str, last: int = SHOWN) -> list[Entry]:
    """The journal's last `last` entries, oldest first (none for a lab without one); a
    damaged line is passed over."""
    try:
        with open(path(lab), "rb") as journal:
            journal.seek(0, os.SEEK_END)
            journal.seek(max(0, journal.tell() - MAX_READ))
            text = journal.read().decode("utf-8", "replace")
    except OSError:
        return []
    return parse(text)[-last:] if last > 0 else []


def parse(text: str) -> list[Entry]:
    """A journal's lines as entries (pure); lines that are not one are passed over."""
    entries = []
    for line in text.splitlines():
        try:
            data: Any = json.loads(line)
            entry = Entry(float(data["at"]), str(data["what"]), str(data["by"]))
        except (ValueError, TypeError, KeyError):
            continue
        if entry.by in BY:
            entries.append(entry)
    return entries
