"""iperf2's --bounceback-congest: TCP streams beside a bounceback test, so that its round
trips are measured under a working load. As iperf 2.1.8's client: iperf2 tests of their
own to the same server, for the same time, both ways on each connection (its full duplex)
unless told up or down, with TOS 0; unlike it, written in our TCP writes' size rather
than the bounceback messages' (its 100 bytes a write make the load the client's CPU).

The load's own report is iperf2's client's JSON document (iperf2/client.py), read here
for its rates."""

from __future__ import annotations

import dataclasses
import json
import threading
from typing import Any

from ..description.client_options import ClientOptions
from ..description.options import WORKING_LOAD_WAYS
from ..description.testspec import TestSpec
from ..errors import SimpleperfError
from ..units import format_rate
from . import client

JOIN_SECONDS = 10.0  # after the bounceback test: how long the load may take to end


class WorkingLoad:
    """The load's test, run in a thread of its own beside the round trips."""

    def __init__(self, options: ClientOptions) -> None:
        assert options.bounce_congest is not None
        self.way, self.streams = options.bounce_congest
        test = dataclasses.replace(
            options.test, direction=WORKING_LOAD_WAYS[self.way], parallel=self.streams, tos=0,
            quickack=False, length=TestSpec().length)
        self.options = dataclasses.replace(
            options, test=test, given=options.given - {"length"}, bounceback=0,
            bounce_congest=None, iperf2=True, json=True, json_stream=False,
            json_stream_full=False, csv=False, peer_detect=False)
        self.document: dict[str, Any] | None = None
        self.error: str | None = None
        self.thread = threading.Thread(target=self._run, name="working load", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        lines: list[str] = []
        try:
            client.run(self.options, lines.append)
            self.document = json.loads("\n".join(lines))
        except SimpleperfError as error:
            self.error = str(error)
        except (OSError, ValueError) as error:
            self.error = f"the working load failed: {error}"

    def result(self) -> dict[str, Any]:
        """What the load carried each way (bits a second; None: not that way), once it
        has ended; its error if it failed."""
        self.thread.join(JOIN_SECONDS)
        result: dict[str, Any] = {"direction": self.way, "streams": self.streams,
                                  "up_bits_per_second": None, "down_bits_per_second": None}
        if self.thread.is_alive():
            self.error = self.error or "the working load did not end"
        end = (self.document or {}).get("end", {})
        if self.error is None and self.document is not None:
            self.error = self.document.get("error") or None
        received = end.get("sum_received", {}).get("bits_per_second")
        if self.way == "up":
            result["up_bits_per_second"] = received
        elif self.way == "down":
            result["down_bits_per_second"] = received
        else:
            result["up_bits_per_second"] = received
            result["down_bits_per_second"] = end.get("sum_received_bidir_reverse", {}).get(
                "bits_per_second")
        if self.error is not None:
            result["error"] = self.error
        return result


def line(result: dict[str, Any]) -> str:
    """The text's line for the load's `result`."""
    streams = result["streams"]
    what = f"working load ({streams} TCP stream{'s' if streams > 1 else ''}, {result['direction']})"
    if "error" in result:
        return f"{what}: {result['error']}"
    rates = [f"{way} {format_rate(result[f'{way}_bits_per_second'] or 0.0)}"
             for way in ("up", "down") if result[f"{way}_bits_per_second"] is not None]
    return f"{what}: {', '.join(rates)}"
