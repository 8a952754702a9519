"""What a step of `lab run` is doing while it runs: on a terminal one line redrawn in place
(the phase, and a bar with the seconds while the flows run); piped or to a file, a plain
line per phase, so logs read in order and nothing is overwritten."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

BAR_WIDTH = 24
REDRAW_SECONDS = 0.25
PIPED_EVERY_SECONDS = 30.0  # a line while the flows of a long step run, when not a terminal


def bar(done: float, total: float, width: int = BAR_WIDTH) -> str:
    """`[#########---------------]` for done of total (clamped to 0..total)."""
    filled = 0 if total <= 0 else round(width * min(max(done / total, 0.0), 1.0))
    return "[" + "#" * filled + "-" * (width - filled) + "]"


class StepProgress:
    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out if out is not None else sys.stdout
        self.live = self.out.isatty()
        self._drawn = False
        self._lock = threading.Lock()
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()

    def phase(self, text: str) -> None:
        """The step is now doing `text` (ends any countdown)."""
        self._end_countdown()
        self._show(text)

    def countdown(self, text: str, seconds: float, at_most: bool = False) -> None:
        """`text` for about `seconds` (`at_most`: a bound, what runs may end sooner): a bar
        on a terminal, a line now and then if not."""
        self._end_countdown()
        began = time.monotonic()
        of = "of at most" if at_most else "of"
        if not self.live:
            self._show(f"{text} for {'at most ' if at_most else ''}{seconds:.0f} s")
        self._stop.clear()

        def tick() -> None:
            next_line = began + PIPED_EVERY_SECONDS
            while not self._stop.wait(REDRAW_SECONDS):
                passed = time.monotonic() - began
                if self.live:
                    self._show(f"{text} {bar(passed, seconds)} {min(passed, seconds):.0f} "
                               f"{of} {seconds:.0f} s")
                elif time.monotonic() >= next_line and passed < seconds:
                    self._show(f"{text}: {passed:.0f} {of} {seconds:.0f} s")
                    next_line += PIPED_EVERY_SECONDS

        self._ticker = threading.Thread(target=tick, name="progress", daemon=True)
        self._ticker.start()

    def say(self, line: str) -> None:
        """A line of the run's own output, printed over (not after) a drawn progress line."""
        with self._lock:
            if self.live and self._drawn:
                self.out.write("\r\033[K")
                self._drawn = False
            self.out.write(line + "\n")
            self.out.flush()

    def done(self) -> None:
        """The step is over: a terminal's line is cleared for what is printed next."""
        self._end_countdown()
        with self._lock:
            if self.live and self._drawn:
                self.out.write("\r\033[K")
                self.out.flush()
            self._drawn = False

    def _end_countdown(self) -> None:
        if self._ticker is not None:
            self._stop.set()
            self._ticker.join()
            self._ticker = None

    def _show(self, text: str) -> None:
        with self._lock:
            if self.live:
                self.out.write(f"\r\033[K    .. {text}")
                self._drawn = True
            else:
                self.out.write(f"    .. {text}\n")
            self.out.flush()
