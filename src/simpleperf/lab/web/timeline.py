"""Each lab's timeline as the page shows it: the lab's journal (every change, typed or
made from the page, and what routing did after it; the page's flows) and what its routers
said of their neighbours, from their own logs (routing/log.py), in time order."""

from __future__ import annotations

from collections import deque
from typing import Any

from ..model.topology import Topology
from ..net import journal
from ..net.routing.log import LogFollower, RoutingEvent

SHOWN = 60  # entries a lab's timeline sends the page, newest


class Timelines:
    """The labs' timelines; the routers' logs are read from where the last reading
    stopped. Blocks (files): call it off the event loop."""

    def __init__(self) -> None:
        self.followers: dict[str, LogFollower] = {}
        self.said: dict[str, deque[RoutingEvent]] = {}

    def of(self, lab: str, model: Topology) -> list[dict[str, Any]]:
        if model.runs_daemons:
            follower = self.followers.get(lab)
            if follower is None:
                follower = self.followers[lab] = LogFollower(lab, model.routers())
            self.said.setdefault(lab, deque(maxlen=SHOWN)).extend(follower.read())
        entries: list[dict[str, Any]] = [{"at": entry.at, "what": entry.what, "by": entry.by}
                   for entry in journal.read(lab, SHOWN)]
        entries += [{"at": event.at, "what": f"{event.router}: {event.what}", "by": "router"}
                    for event in self.said.get(lab, ())]
        return sorted(entries, key=lambda entry: entry["at"])[-SHOWN:]

    def keep_only(self, labs: set[str]) -> None:
        """Forget the labs no longer up (one brought up again is read afresh)."""
        for lab in set(self.followers) - labs:
            del self.followers[lab]
            self.said.pop(lab, None)
