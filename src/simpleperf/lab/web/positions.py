"""Where the page placed a lab's nodes, kept with the lab (a file beside its record, which
`lab down` removes with it), so every browser that opens the console draws the lab the
same way, and it stays put across reloads."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from ..model.topology import Topology
from ..net import ownership

LIMIT = 1e6  # a coordinate's magnitude, in the drawing's pixels


class PositionError(ValueError):
    """Positions the console will not keep: one line."""


def path(lab: str) -> Path:
    return ownership.RECORD_DIR / f"{lab}{ownership.POSITIONS_SUFFIX}"


def checked(model: Topology, asked: Any) -> dict[str, dict[str, float]]:
    """{node: {"x": number, "y": number}} for nodes of the lab, finite and bounded (pure)."""
    if not isinstance(asked, dict) or not asked:
        raise PositionError("positions are {\"NODE\": {\"x\": X, \"y\": Y}, ...}")
    kept: dict[str, dict[str, float]] = {}
    for node, place in asked.items():
        if node not in model.nodes:
            raise PositionError(f"no node {node!r} in lab {model.name}")
        if not isinstance(place, dict) or set(place) != {"x", "y"}:
            raise PositionError(f"node {node}: a position is {{\"x\": X, \"y\": Y}}")
        values = place["x"], place["y"]
        if not all(isinstance(value, (int, float)) and not isinstance(value, bool) and
                   math.isfinite(value) and abs(value) <= LIMIT for value in values):
            raise PositionError(f"node {node}: x and y are numbers within ±{LIMIT:g}")
        kept[node] = {"x": float(values[0]), "y": float(values[1])}
    return kept


def save(lab: str, model: Topology, asked: Any) -> dict[str, dict[str, float]]:
    """Keep `asked` (merged into what is kept) for a lab that is up."""
    given = checked(model, asked)
    with ownership.locked(lab):
        if ownership.load(lab) is None:
            raise PositionError(f"no lab named {lab} is up")
        kept = {**read(lab, model), **given}
        temporary = path(lab).with_name(path(lab).name + ".tmp")
        temporary.write_text(json.dumps(kept))
        os.replace(temporary, path(lab))
    return kept


def read(lab: str, model: Topology) -> dict[str, dict[str, float]]:
    """What is kept for the lab's nodes (none if nothing is, or it is not readable)."""
    try:
        return checked(model, json.loads(path(lab).read_text()))
    except (OSError, ValueError):
        return {}
