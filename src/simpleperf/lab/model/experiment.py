"""Experiments as data: a topology, then steps; each step is a set of flows that start at
the same instant. Loaded from TOML and validated before anything runs; every mistake names
the step and the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ...description.options import (
    MAX_LENGTH,
    MAX_PARALLEL,
    MAX_WINDOW,
    MIN_LENGTH,
    MIN_WINDOW,
    is_congestion_name,
)
from ...units import parse_size
from . import datafiles, events, flows, link_properties
from .errors import ExperimentError, TopologyError
from .events import Event
from .flows import Flow, Timing

__all__ = ["Experiment", "ExperimentError", "Flow", "Step", "Sweep", "Timing"]

DATA_DIR = Path(__file__).parents[1] / "data" / "experiments"
FIRST_PORT = 15001  # a step's flow n listens on FIRST_PORT + n - 1 (captures match by it)
DEFAULT_CAPTURE_LIMIT = 100_000_000  # bytes per capture file
EXPERIMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,39}")
PAIR_FIELDS = link_properties.NAMES
LINK_SWEEPS = link_properties.SWEPT
FLOW_SWEEPS = ("window", "length", "parallel")
# Every key of an experiment file and what it says, a table per table of the file: the
# parser takes these and refuses any other; the file-format reference is made from them.
EXPERIMENT_KEYS = {
    "name": "the experiment's name, which names its results folder: 1-40 letters, digits, "
            "'_', '.' or '-' (default: the file's name)",
    "description": "a line that `lab list` shows",
    "topology": "a shipped topology's name or a topology file's path (relative to this "
                "file's folder)",
    "congestion": "the TCP flows' congestion control unless a flow names its own, e.g. "
                  "`\"cubic\"` (and every node's default that names none)",
    "timing": "`[timing]`: how long steps run (keys below)",
    "quick": "`[timing]`'s keys for `--quick`; scp and http flows then move the same "
             "share of their size",
    "cases": "titles of the cases steps belong to: `cases.1 = \"Link latency\"`",
    "steps": "the steps, `[[steps]]`, run in order, a table each (keys below)",
    "pair": "with `topology = \"pair\"`: its link's properties, as `lab up pair` takes "
            "them (`rate = \"50M\"`)",
    "sweep": "`[sweep]`: every step at each value of one parameter (keys below)",
    "capture": "links or NODE:IFACE captured during every step: `[\"L2\", \"h1:h1-eth0\"]`",
    "capture_limit": "the most each capture file may take, bytes or `\"200M\"` "
                     f"(default {DEFAULT_CAPTURE_LIMIT / 1e6:g} MB)",
}
QUICK_TIMING = Timing(5.0, 5, 0.2)  # --quick's, where the file's [quick] says nothing
TIMING_KEYS = {
    "duration": f"seconds a measured flow runs (default {Timing().duration:g}; quick "
                f"{QUICK_TIMING.duration:g})",
    "ping_count": f"echo requests a ping flow sends (default {Timing().ping_count}; quick "
                  f"{QUICK_TIMING.ping_count})",
    "ping_interval": f"seconds between them (default {Timing().ping_interval:g}; quick "
                     f"{QUICK_TIMING.ping_interval:g})",
}
STEP_KEYS = {
    "case": "the case it belongs to (a key of `cases`; default its number)",
    "name": "its name in the report (default `step N`)",
    "flows": "its flows, started at one instant: `[{ kind = \"tcp\", from = \"h1\", "
             "to = \"h4\" }]` (keys below)",
    "repeat": "times it runs (default 1)",
    "capture": "links or NODE:IFACE captured while it runs, beside the experiment's",
    "events": "changes to the network while it runs, on the flows' clock (keys below)",
}
SWEEP_KEYS = {
    "parameter": "a link property that sweeps, or a TCP flow's `window`, `length` or "
                 "`parallel`",
    "values": "its values, as the property or field takes them: `[\"5ms\", \"10ms\"]`",
    "repeat": "rounds at each value, for a mean and its confidence interval (default 1)",
}
MAX_SWEEP_VALUES = 100  # a sweep's points (each run `repeat` times, each a whole step)
MAX_SWEEP_REPEAT = 100
MAX_STEP_REPEAT = 1000


@dataclass(frozen=True)
class Step:
    case: str
    name: str
    flows: tuple[Flow, ...]
    repeat: int = 1
    capture: tuple[str, ...] = ()  # links or NODE:IFACE captured while the step runs
    events: tuple[Event, ...] = ()  # changes to the network while the flows run


@dataclass(frozen=True)
class Sweep:
    """One parameter over a list of values: a link parameter of the pair topology (the lab
    is rebuilt for each value) or a parameter of every tcp flow."""

    parameter: str
    values: tuple[str, ...]
    repeat: int = 1

    @property
    def of_link(self) -> bool:
        return self.parameter in LINK_SWEEPS


@dataclass(frozen=True)
class Experiment:
    name: str
    description: str
    topology: str  # a shipped topology name or a path
    timing: Timing
    quick: Timing
    steps: tuple[Step, ...]
    cases: dict[str, str]  # case id -> title
    source: str = ""
    pair: dict[str, Any] | None = None  # link parameters when topology = "pair"
    sweep: Sweep | None = None
    capture_limit: int = DEFAULT_CAPTURE_LIMIT  # bytes per capture file
    # tcp flows' congestion control where a flow does not name one (None: the system's)
    congestion: str | None = None
    shipped: bool = False  # one of the project's own experiments (their commands are known)

    def captures(self) -> set[str]:
        return {where for step in self.steps for where in step.capture}

    def commands(self) -> list[str]:
        """The command lines of its command flows (run as root in the lab's nodes)."""
        return [line for step in self.steps for flow in step.flows if flow.kind == "command"
                for line in (flow.server, flow.client) if line]

    def congestion_controls(self) -> set[str]:
        """Every congestion control the experiment names (each must be in the kernel)."""
        return {flow.congestion for step in self.steps for flow in step.flows
                if flow.congestion is not None} | ({self.congestion} if self.congestion else set())


def load(name_or_path: str, congestion: str | None = None) -> Experiment:
    """The experiment; `congestion`, the user's choice (lab run --congestion), in place of
    the one it names for its tcp flows (a flow that names its own keeps it)."""
    text, path = datafiles.read(name_or_path, DATA_DIR, "experiment", ExperimentError)
    return replace(parse(text, path.stem, path.parent, origin=path, congestion=congestion),
                   shipped=path.resolve().parent == DATA_DIR.resolve())


def parse(text: str, default_name: str = "experiment", base: Path | None = None,
          origin: Path | None = None, congestion: str | None = None) -> Experiment:
    data = datafiles.parse_toml(text, ExperimentError, origin)
    _only(data, set(EXPERIMENT_KEYS), "experiment")
    topology = data.get("topology")
    if not isinstance(topology, str) or not topology:
        raise ExperimentError("experiment: topology must name a topology, e.g. "
                              "topology = \"portfolio\"")
    if base is not None and topology.endswith(".toml") and not Path(topology).is_absolute():
        topology = str(base / topology)
    timing = _timing(data.get("timing", {}), Timing(), "timing")
    quick = _timing(data.get("quick", {}), QUICK_TIMING, "quick")
    cases = data.get("cases", {})
    if not isinstance(cases, dict) or not all(isinstance(v, str) for v in cases.values()):
        raise ExperimentError("cases must be a table of titles, e.g. cases.1 = \"...\"")
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise ExperimentError("experiment: no steps ([[steps]] with flows)")
    everywhere = _places(data.get("capture", []), "experiment: capture")
    if congestion is not None and not is_congestion_name(congestion):
        raise ExperimentError(f"--congestion names a congestion control, such as \"cubic\", "
                              f"not {congestion!r}")
    congestion = congestion or data.get("congestion")
    if congestion is not None and not is_congestion_name(congestion):
        raise ExperimentError("experiment: congestion names the tcp flows' congestion "
                              f"control, such as \"cubic\", not {congestion!r}")
    steps = tuple(_pinned(_step(raw, index, everywhere), congestion)
                  for index, raw in enumerate(raw_steps, start=1))
    limit = datafiles.size(data.get("capture_limit", DEFAULT_CAPTURE_LIMIT), "capture_limit",
                           100_000, flows.MAX_TRANSFER_SIZE, ExperimentError)
    pair = _pair(data, topology)
    sweep = _sweep(data.get("sweep"), topology, pair, steps)
    # Without a name, the file's: made to fit, since it only has to name a folder.
    fallback = re.sub(r"[^A-Za-z0-9_.-]", "-", default_name).strip("-.")[:40] or "experiment"
    name = datafiles.name(data.get("name", fallback), EXPERIMENT_NAME, "experiment name",
                          "1-40 letters, digits, '_', '.' or '-' (it names the results "
                          "folder)", ExperimentError)
    description = datafiles.text(data.get("description", ""), "description", ExperimentError)
    return Experiment(name, description, topology, timing, quick, steps, dict(cases), text,
                      pair, sweep, limit, congestion)


def _pinned(step: Step, congestion: str | None) -> Step:
    """The experiment's congestion control on every tcp flow that does not name its own."""
    if congestion is None:
        return step
    return replace(step, flows=tuple(
        replace(flow, congestion=congestion)
        if "congestion" in flow.spec.fields and flow.congestion is None else flow
        for flow in step.flows))


def _places(raw: Any, where: str) -> tuple[str, ...]:
    """Capture points: a list of link names or NODE[:IFACE] (checked against the topology
    once it is loaded)."""
    if not isinstance(raw, list) or not all(isinstance(p, str) and 0 < len(p) <= 60
                                            for p in raw):
        raise ExperimentError(f"{where} must be a list of links or NODE:IFACE, e.g. "
                              "[\"L2\", \"h1:h1-eth0\"]")
    return tuple(dict.fromkeys(raw))


def _pair(data: dict[str, Any], topology: str) -> dict[str, Any] | None:
    if "pair" not in data:
        return {} if topology == "pair" else None
    if topology != "pair":
        raise ExperimentError("[pair] only applies to topology = \"pair\"")
    raw = data["pair"]
    if not isinstance(raw, dict):
        raise ExperimentError("[pair] must be a table such as rate = \"50M\"")
    _only(raw, set(PAIR_FIELDS), "pair")
    from .topology import pair as make_pair

    try:
        make_pair(**raw)
    except TopologyError as error:
        raise ExperimentError("pair: " + str(error).replace("link h1-h2: ", "")) from None
    return dict(raw)


def _sweep(raw: Any, topology: str, pair: dict[str, Any] | None, steps: tuple[Step, ...]
           ) -> Sweep | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ExperimentError("[sweep] must be a table with parameter and values")
    _only(raw, set(SWEEP_KEYS), "sweep")
    parameter = raw.get("parameter")
    if parameter not in LINK_SWEEPS + FLOW_SWEEPS:
        raise ExperimentError(f"sweep: parameter must be one of "
                              f"{', '.join(LINK_SWEEPS + FLOW_SWEEPS)}, not {parameter!r}")
    values = raw.get("values")
    if not isinstance(values, list) or not values:
        raise ExperimentError("sweep: values must be a non-empty list")
    if len(values) > MAX_SWEEP_VALUES:
        raise ExperimentError(f"sweep: {len(values)} values, at most {MAX_SWEEP_VALUES} (each "
                              "is a run of every step)")
    repeat = datafiles.count(raw.get("repeat", 1), "sweep: repeat", 1, MAX_SWEEP_REPEAT,
                             ExperimentError)
    sweep = Sweep(parameter, tuple(str(v) for v in values), repeat)
    if sweep.of_link:
        if topology != "pair":
            raise ExperimentError(f"sweep: the link parameter {parameter} can be swept on "
                                  "topology = \"pair\"")
        from .topology import pair as make_pair

        for value in sweep.values:
            try:
                make_pair(**(pair or {}) | {parameter: _pair_value(parameter, value)})
            except TopologyError as error:
                raise ExperimentError(f"sweep: {parameter} = {value!r}: "
                                      + str(error).replace("link h1-h2: ", "")) from None
    else:
        if not any(parameter in f.spec.fields for step in steps for f in step.flows):
            raise ExperimentError(f"sweep: {parameter} applies to tcp flows, and there are none")
        for value in sweep.values:
            flow_value(parameter, value)
    return sweep


def _pair_value(parameter: str, value: str) -> Any:
    """Sweep values are strings; the property says what a string is (a queue: packets)."""
    try:
        return link_properties.BY_NAME[parameter].from_text(value)
    except ValueError as error:
        raise ExperimentError(f"sweep: {parameter} = {value!r} {error}") from None


def flow_value(parameter: str, value: str) -> int:
    """A swept flow parameter as the number the flow takes."""
    try:
        number = int(value) if parameter == "parallel" else parse_size(value)
    except ValueError:
        raise ExperimentError(f"sweep: {parameter} = {value!r} is not "
                              + ("a number" if parameter == "parallel" else "a size such as "
                                 "'64K'")) from None
    low, high = {"parallel": (1, MAX_PARALLEL), "window": (MIN_WINDOW, MAX_WINDOW),
                 "length": (MIN_LENGTH, MAX_LENGTH)}[parameter]
    if not low <= number <= high:
        raise ExperimentError(f"sweep: {parameter} = {value!r} is out of range")
    return number


def link_parameters(experiment: Experiment, value: str | None) -> dict[str, Any]:
    """The pair link's parameters at one point of a link sweep."""
    parameters = dict(experiment.pair or {})
    if value is not None and experiment.sweep is not None and experiment.sweep.of_link:
        parameters[experiment.sweep.parameter] = _pair_value(experiment.sweep.parameter, value)
    return parameters


def _only(table: dict[str, Any], allowed: set[str], where: str) -> None:
    datafiles.only(table, allowed, where, ExperimentError)


def _timing(raw: Any, base: Timing, where: str) -> Timing:
    if not isinstance(raw, dict):
        raise ExperimentError(f"{where} must be a table")
    _only(raw, set(TIMING_KEYS), where)
    values: dict[str, Any] = {}
    if "duration" in raw:
        values["duration"] = datafiles.seconds(raw["duration"], f"{where}: duration",
                                               ExperimentError)
    if "ping_interval" in raw:
        values["ping_interval"] = datafiles.seconds(raw["ping_interval"],
                                                    f"{where}: ping_interval", ExperimentError)
    if "ping_count" in raw:
        values["ping_count"] = datafiles.count(raw["ping_count"], f"{where}: ping_count", 1,
                                               100_000, ExperimentError)
    return replace(base, **values)


def _step(raw: Any, index: int, everywhere: tuple[str, ...]) -> Step:
    if not isinstance(raw, dict):
        raise ExperimentError(f"step {index}: must be a table")
    name = datafiles.text(raw.get("name", f"step {index}"), f"step {index}: name",
                          ExperimentError)
    where = f"step {index} ({name})"
    _only(raw, set(STEP_KEYS), where)
    capture = tuple(dict.fromkeys(everywhere + _places(raw.get("capture", []),
                                                       f"{where}: capture")))
    raw_flows = raw.get("flows")
    if not isinstance(raw_flows, list) or not raw_flows:
        raise ExperimentError(f"{where}: flows must be a non-empty list of flows")
    repeat = datafiles.count(raw.get("repeat", 1), f"{where}: repeat", 1, MAX_STEP_REPEAT,
                             ExperimentError)
    case = datafiles.text(raw.get("case", index), f"{where}: case", ExperimentError)
    parsed = tuple(flows.parse(f, f"{where} flow {i}") for i, f in enumerate(raw_flows, start=1))
    return Step(case, name, parsed, repeat, capture,
                events.parse(raw.get("events", []), where, ExperimentError))


def check_against(experiment: Experiment, nodes: set[str], links: set[str] | None = None
                  ) -> None:
    """Every flow's nodes, and every event's link or node, exist in the topology (checked
    before the lab is built)."""
    for index, step in enumerate(experiment.steps, start=1):
        for event in step.events:
            known = nodes if event.on_node else (links or set())
            if event.target not in known:
                raise ExperimentError(
                    f"step {index} ({step.name}): {event.describe()}: the topology "
                    f"{experiment.topology} has no {'node' if event.on_node else 'link'} "
                    f"{event.target}")
        for number, flow in enumerate(step.flows, start=1):
            for node in (flow.source, flow.target):
                if node not in nodes:
                    raise ExperimentError(f"step {index} ({step.name}) flow {number}: node "
                                          f"{node} is not in topology {experiment.topology}")


__all__ = ["Experiment", "ExperimentError", "Flow", "Step", "Timing", "TopologyError", "load",
           "parse", "check_against"]
