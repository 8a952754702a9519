"""Waiting for a stream's start without missing a stop."""

from __future__ import annotations

import threading
import time


def wait_until(moment: float, stop: threading.Event) -> None:
    delay = moment - time.monotonic()
    if delay > 0:
        stop.wait(delay)


