"""What the routers themselves say of their neighbours, read from their daemons' logs: a BGP
session up or down (`bgp log-neighbor-changes`) and an OSPF adjacency reaching Full or
leaving it (`log-adjacency-changes`), with the router's own time stamp. The console's
timeline shows them beside the changes that caused them. Parsing is pure; LogFollower
reads only what each log gained since its last call."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from . import daemons

LOGS = ("bgpd", "ospfd")  # the daemons whose logs say what their neighbours did
MAX_READ = 256 * 1024  # bytes of one log read at a call (a log that grew more: its end)
STAMP = re.compile(r"(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d)(\.\d+)?")
BGP = re.compile(r"%ADJCHANGE: neighbor (\S+?)(?:\((\S*)\))? in vrf \S+ (Up|Down)\s*(.*)")
OSPF = re.compile(r"AdjChg: Nbr (\S+?), NbrIP (\S+) \(\S+\) on ([^:\s]+)\S*: (\S+) -> (\S+) "
                  r"\(([^)]*)\)")


@dataclass(frozen=True)
class RoutingEvent:
    at: float  # seconds since the epoch, the router's own stamp
    router: str
    what: str  # "BGP session with 172.16.13.2 (r4) down: Interface down"

    def view(self) -> dict[str, object]:
        return {"at": self.at, "router": self.router, "what": self.what}


def parse(router: str, line: str) -> RoutingEvent | None:
    """One line of a daemon's log, if it says a neighbour came or went (pure)."""
    stamp = STAMP.match(line)
    if stamp is None:
        return None
    try:
        at = time.mktime(time.strptime(stamp[1], "%Y/%m/%d %H:%M:%S"))
    except (ValueError, OverflowError):
        return None
    at += float(stamp[2]) if stamp[2] else 0.0
    bgp = BGP.search(line)
    if bgp is not None:
        address, name, state, reason = bgp.groups()
        peer = f"{address} ({name})" if name and name != "Unknown" else address
        said = f"BGP session with {peer} {state.lower()}"
        return RoutingEvent(at, router, said + (f": {reason.strip()}" if reason.strip() and
                                                state == "Down" else ""))
    ospf = OSPF.search(line)
    if ospf is not None:
        neighbour, address, interface, before, after, cause = ospf.groups()
        if "Full" not in (before, after):  # the steps on the way up are not news
            return None
        said = "up (Full)" if after == "Full" else f"down ({after}: {cause})"
        return RoutingEvent(at, router, f"OSPF neighbour {neighbour} on {interface} {said}")
    return None


def parse_text(router: str, text: str) -> list[RoutingEvent]:
    return [event for line in text.splitlines() if (event := parse(router, line))]


class LogFollower:
    """A lab's routers' logs, read from where the last call stopped (a log that shrank, as
    when the lab was built anew, from its start)."""

    def __init__(self, lab: str, routers: list[str]) -> None:
        self.lab, self.routers = lab, routers
        self.offsets: dict[Path, int] = {}

    def read(self) -> list[RoutingEvent]:
        """What every router said since the last call, in time order."""
        found: list[RoutingEvent] = []
        for router in self.routers:
            for daemon in LOGS:
                path = daemons.events_log(self.lab, router, daemon)
                found += parse_text(router, self._new_text(path))
        return sorted(found, key=lambda event: event.at)

    def _new_text(self, path: Path) -> str:
        try:
            with open(path, "rb") as log:
                size = log.seek(0, 2)
                start = self.offsets.get(path, 0)
                if size < start:
                    start = 0
                start = max(start, size - MAX_READ)
                log.seek(start)
                data = log.read(size - start)
        except OSError:
            return ""
        complete = data.rfind(b"\n") + 1  # a line half written is read next time, whole
        self.offsets[path] = start + complete
        return data[:complete].decode("utf-8", "replace")
