"""Timed changes to the network during a step: a link or node down or up, a link's shaping
set anew (Mininet's link fields), at a time on the flows' clock (0 = the flows' start).

    events = [{ at = "10s", link = "P13", action = "down" },
              { at = "20s", link = "P13", action = "up" },
              { at = "5s", link = "L1", action = "set", delay = "30ms", bw = "10M" }]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...units import parse_duration
from . import datafiles, link_properties

ACTIONS = ("down", "up", "set")
SET_FIELDS = tuple(p.mininet for p in link_properties.LIVE)
# An event's keys besides the link properties `set` changes (SET_FIELDS), with what each
# says (the file-format reference's source)
EVENT_KEYS = {
    "at": "when, on the flows' clock: `\"10s\"` after they start",
    "link": "the link it changes (or `node`)",
    "node": "the node whose every link it takes down or up (or `link`)",
    "action": f"{', '.join(repr(a) for a in ACTIONS)}: `set` changes the link's "
              "properties given beside it (`delay = \"30ms\"`)",
}
EVENT_FIELDS = {*EVENT_KEYS, *SET_FIELDS}
MAX_EVENTS = 100
MAX_AT_SECONDS = 3600.0


@dataclass(frozen=True)
class Event:
    at: float  # seconds after the flows' start
    target: str  # a link's or a node's name
    on_node: bool  # the target is a node (all its links)
    action: str  # down, up or set
    shaping: dict[str, Any] = field(default_factory=dict)  # set: Mininet's link fields

    def describe(self) -> str:
        what = f"{'node' if self.on_node else 'link'} {self.target} {self.action}"
        if self.shaping:
            what += " " + ", ".join(f"{k} {v}" for k, v in self.shaping.items())
        return f"at {self.at:g} s: {what}"


def parse(raw: Any, where: str, error: type[Exception]) -> tuple[Event, ...]:
    if not isinstance(raw, list) or len(raw) > MAX_EVENTS:
        raise error(f"{where}: events must be a list of at most {MAX_EVENTS} tables such as "
                    "{ at = \"10s\", link = \"L2\", action = \"down\" }")
    events = []
    for number, spec in enumerate(raw, start=1):
        here = f"{where} event {number}"
        if not isinstance(spec, dict):
            raise error(f"{here}: must be a table such as {{ at = \"10s\", link = \"L2\", "
                        "action = \"down\" }")
        datafiles.only(spec, EVENT_FIELDS, here, error)
        at = _at(spec.get("at"), here, error)
        if ("link" in spec) == ("node" in spec):
            raise error(f"{here}: give either link = NAME or node = NAME")
        target = spec.get("link", spec.get("node"))
        if not isinstance(target, str) or not target:
            raise error(f"{here}: the link or node must be a name")
        action = spec.get("action")
        if action not in ACTIONS:
            raise error(f"{here}: action must be one of {', '.join(ACTIONS)}, not {action!r}")
        shaping = {key: spec[key] for key in SET_FIELDS if key in spec}
        if action == "set" and ("node" in spec or not shaping):
            raise error(f"{here}: action = 'set' changes a link: give link = NAME and at "
                        f"least one of {', '.join(SET_FIELDS)}")
        if action != "set" and shaping:
            raise error(f"{here}: {next(iter(shaping))} goes with action = 'set'")
        events.append(Event(at, target, "node" in spec, action, shaping))
    return tuple(sorted(events, key=lambda event: event.at))


def _at(value: Any, where: str, error: type[Exception]) -> float:
    try:
        seconds = parse_duration(value) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        seconds = -1.0
    if isinstance(value, bool) or not 0 <= seconds <= MAX_AT_SECONDS:
        raise error(f"{where}: at = {value!r} must be a time from 0 to {MAX_AT_SECONDS:g} s "
                    "after the flows' start, such as '10s'")
    return seconds
