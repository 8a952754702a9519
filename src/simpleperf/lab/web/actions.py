"""What the page asks a lab to do, as the command line's `lab link` and `lab node` would
ask it: a change (net/changes.py) made from the request's JSON, every property read as its
flag reads it (the link property table). Pure."""

from __future__ import annotations

from typing import Any

from ..model import link_properties
from ..model.errors import TopologyError
from ..net import changes

ACTIONS = ("down", "up", "set")


class ActionError(ValueError):
    """A request the console cannot turn into a change: one line for the page."""


def change_of(kind: str, name: str, asked: Any) -> changes.Change:
    """`asked` ({"action": ..., "set": {...}}) for the link or node `name`."""
    if not isinstance(asked, dict) or asked.get("action") not in ACTIONS:
        raise ActionError(f"a change is {{\"action\": one of {', '.join(ACTIONS)}}}")
    action = asked["action"]
    given = asked.get("set") or {}
    if kind == "nodes" and (action == "set" or given):
        raise ActionError("a node is taken down or up; its links are set one by one")
    if action != "set":
        if given:
            raise ActionError(f"properties go with 'set', not '{action}'")
        return changes.Change(name, action)
    if not isinstance(given, dict) or not given:
        raise ActionError("set needs at least one of " +
                          ", ".join(prop.name for prop in link_properties.LIVE))
    values: dict[str, Any] = {}
    for key, text in given.items():
        prop = link_properties.BY_NAME.get(key)
        if prop is None or not prop.live:
            raise ActionError(f"{key!r} is not a property a running link takes")
        try:
            values[key] = prop.from_text(str(text))
            prop.parse(values[key], f"link {name}: {key}")
        except (ValueError, TopologyError) as error:
            raise ActionError(str(error) or f"{key}: not '{text}'") from None
    return changes.Change(name, "set", link_properties.to_mininet(values))
