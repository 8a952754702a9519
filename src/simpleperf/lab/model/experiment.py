"""Experiments as data: a topology, then steps; each step is a set of flows that start at
the same instant. Loaded from TOML and validated before anything runs; every mistake names
the step and the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ...errors import UsageError
from ...latency_flags import parse_isochronous
from ...options import (
    MAX_LENGTH,
    MAX_PARALLEL,
    MAX_RATE,
    MAX_UDP_LENGTH,
    MAX_WINDOW,
    MIN_LENGTH,
    MIN_UDP_LENGTH,
    MIN_WINDOW,
    is_congestion_name,
)
from ...protocol.native import MIN_ISOCHRONOUS_UDP_LENGTH
from ...units import parse_duration, parse_rate, parse_size
from . import datafiles, events, link_properties
from .events import Event
from .topology import TopologyError

DATA_DIR = Path(__file__).parents[1] / "data" / "experiments"
FLOW_KINDS = ("tcp", "udp", "ping", "scp", "http", "command")
APPLICATIONS = ("scp", "http", "command")  # real programs, timed from start to exit
TRANSFERS = ("scp", "http")  # applications that move `size` bytes over one TCP connection
CONTENTS = ("random", "sparse")
DEFAULT_TRANSFER_SIZE = 10_000_000
MAX_TRANSFER_SIZE = 10 ** 11
MAX_OBJECTS = 1000
FIRST_PORT = 15001  # a step's flow n listens on FIRST_PORT + n - 1 (captures match by it)
DEFAULT_CAPTURE_LIMIT = 100_000_000  # bytes per capture file
MAX_COMMAND = 2000  # characters of a command line
EXPERIMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,39}")
FLOW_FIELDS = {"kind", "from", "to", "address", "parallel", "duration", "rate", "length",
               "count", "interval", "rtt_under_load", "label", "window", "congestion",
               "size", "objects", "content", "server", "client", "frames"}
PAIR_FIELDS = link_properties.NAMES
LINK_SWEEPS = link_properties.SWEPT
FLOW_SWEEPS = ("window", "length", "parallel")
TIMING_FIELDS = {"duration", "ping_count", "ping_interval"}


class ExperimentError(datafiles.DataFileError):
    """A mistake in an experiment file; the message names the step and field."""


@dataclass(frozen=True)
class Flow:
    kind: str  # tcp (simpleperf), udp (iperf3 -u), ping
    source: str
    target: str
    address: str | None  # None: the target node's first address
    label: str
    parallel: int = 1
    duration: float | None = None  # None: the experiment's duration
    # udp: bits/s; "auto": 90 % of the path's bottleneck, from the topology; "probe": the
    # highest rate with loss under 1 %, found by simpleperf --probe without the topology
    rate: float | str | None = None
    length: int | None = None  # udp: datagram payload (default 1470); tcp: write size (-l)
    window: int | None = None  # tcp: socket buffers on both ends (-w), bytes
    congestion: str | None = None  # tcp: the sender's congestion control (-C)
    count: int | None = None  # ping: packets (None: the experiment's ping_count)
    interval: float | None = None  # ping: seconds between packets
    rtt_under_load: bool = False  # tcp/udp: ping alongside the flow
    size: int | None = None  # scp, http: bytes of the file or of each object
    objects: int = 1  # http: objects fetched one after another, like a page load
    content: str = "random"  # scp, http: "random" bytes, or "sparse" (zeros, not stored)
    server: str | None = None  # command: run in the target node, from before the start
    client: str | None = None  # command: run in the source node at the start, timed
    frames: str | None = None  # udp: video frames, iperf2's --isochronous FPS:MEAN,STDEV

    @property
    def one_tcp_connection(self) -> bool:
        """Theory treats it as one TCP connection (tcp flows have `parallel`)."""
        return self.kind in TRANSFERS

@dataclass(frozen=True)
class Step:
    case: str
    name: str
    flows: tuple[Flow, ...]
    repeat: int = 1
    capture: tuple[str, ...] = ()  # links or NODE:IFACE captured while the step runs
    events: tuple[Event, ...] = ()  # changes to the network while the flows run


@dataclass(frozen=True)
class Timing:
    duration: float = 25.0
    ping_count: int = 25
    ping_interval: float = 1.0


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

    def captures(self) -> set[str]:
        return {where for step in self.steps for where in step.capture}

    def congestion_controls(self) -> set[str]:
        """Every congestion control the experiment names (each must be in the kernel)."""
        return {flow.congestion for step in self.steps for flow in step.flows
                if flow.congestion is not None}


def load(name_or_path: str) -> Experiment:
    text, path = datafiles.read(name_or_path, DATA_DIR, "experiment", ExperimentError)
    return parse(text, path.stem, path.parent, origin=path)


def parse(text: str, default_name: str = "experiment", base: Path | None = None,
          origin: Path | None = None) -> Experiment:
    data = datafiles.parse_toml(text, ExperimentError, origin)
    _only(data, {"name", "description", "topology", "timing", "quick", "cases", "steps",
                 "pair", "sweep", "capture", "capture_limit", "congestion"}, "experiment")
    topology = data.get("topology")
    if not isinstance(topology, str) or not topology:
        raise ExperimentError("experiment: topology must name a topology, e.g. "
                              "topology = \"portfolio\"")
    if base is not None and topology.endswith(".toml") and not Path(topology).is_absolute():
        topology = str(base / topology)
    timing = _timing(data.get("timing", {}), Timing(), "timing")
    quick = _timing(data.get("quick", {}), Timing(5.0, 5, 0.2), "quick")
    cases = data.get("cases", {})
    if not isinstance(cases, dict) or not all(isinstance(v, str) for v in cases.values()):
        raise ExperimentError("cases must be a table of titles, e.g. cases.1 = \"...\"")
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise ExperimentError("experiment: no steps ([[steps]] with flows)")
    everywhere = _places(data.get("capture", []), "experiment: capture")
    congestion = data.get("congestion")
    if congestion is not None and not is_congestion_name(congestion):
        raise ExperimentError("experiment: congestion names the tcp flows' congestion "
                              f"control, such as \"cubic\", not {congestion!r}")
    steps = tuple(_pinned(_step(raw, index, everywhere), congestion)
                  for index, raw in enumerate(raw_steps, start=1))
    limit = _size(data.get("capture_limit", DEFAULT_CAPTURE_LIMIT), "capture_limit",
                  100_000, MAX_TRANSFER_SIZE)
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
        if flow.kind == "tcp" and flow.congestion is None else flow for flow in step.flows))


def _places(raw: Any, where: str) -> tuple[str, ...]:
    """Capture points: a list of link names or NODE[:IFACE] (checked against the topology
    once it is loaded)."""
    if not isinstance(raw, list) or not all(isinstance(p, str) and 0 < len(p) <= 60
                                            for p in raw):
        raise ExperimentError(f"{where} must be a list of links or NODE:IFACE, e.g. "
                              "[\"L2\", \"h1:h1-eth0\"]")
    return tuple(dict.fromkeys(raw))


def _size(value: Any, where: str, low: int, high: int) -> int:
    try:
        size = parse_size(value) if isinstance(value, str) else value
    except ValueError:
        size = None
    if not isinstance(size, int) or isinstance(size, bool) or not low <= size <= high:
        raise ExperimentError(f"{where} = {value!r} must be a size such as '100M' "
                              f"({low}..{high} bytes)")
    return size


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
    _only(raw, {"parameter", "values", "repeat"}, "sweep")
    parameter = raw.get("parameter")
    if parameter not in LINK_SWEEPS + FLOW_SWEEPS:
        raise ExperimentError(f"sweep: parameter must be one of "
                              f"{', '.join(LINK_SWEEPS + FLOW_SWEEPS)}, not {parameter!r}")
    values = raw.get("values")
    if not isinstance(values, list) or not values:
        raise ExperimentError("sweep: values must be a non-empty list")
    repeat = _count(raw.get("repeat", 1), "sweep: repeat", 1, 100)
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
        if not any(f.kind == "tcp" for step in steps for f in step.flows):
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
    _only(raw, TIMING_FIELDS, where)
    values: dict[str, Any] = {}
    if "duration" in raw:
        values["duration"] = _seconds(raw["duration"], f"{where}: duration")
    if "ping_interval" in raw:
        values["ping_interval"] = _seconds(raw["ping_interval"], f"{where}: ping_interval")
    if "ping_count" in raw:
        values["ping_count"] = _count(raw["ping_count"], f"{where}: ping_count", 1, 100_000)
    return replace(base, **values)


def _seconds(value: Any, where: str) -> float:
    try:
        seconds = parse_duration(value) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        raise ExperimentError(f"{where} = {value!r} is not a time such as '25s' or '200ms'"
                              ) from None
    if isinstance(value, bool) or not 0 < seconds <= 86_400:
        raise ExperimentError(f"{where} = {value!r} must be more than 0 and at most a day")
    return seconds


def _count(value: Any, where: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ExperimentError(f"{where} must be a whole number from {low} to {high}, "
                              f"not {value!r}")
    return value


def _step(raw: Any, index: int, everywhere: tuple[str, ...]) -> Step:
    if not isinstance(raw, dict):
        raise ExperimentError(f"step {index}: must be a table")
    name = datafiles.text(raw.get("name", f"step {index}"), f"step {index}: name",
                          ExperimentError)
    where = f"step {index} ({name})"
    _only(raw, {"case", "name", "flows", "repeat", "capture", "events"}, where)
    capture = tuple(dict.fromkeys(everywhere + _places(raw.get("capture", []),
                                                       f"{where}: capture")))
    flows = raw.get("flows")
    if not isinstance(flows, list) or not flows:
        raise ExperimentError(f"{where}: flows must be a non-empty list of flows")
    repeat = _count(raw.get("repeat", 1), f"{where}: repeat", 1, 1000)
    case = datafiles.text(raw.get("case", index), f"{where}: case", ExperimentError)
    return Step(case, name,
                tuple(_flow(f, f"{where} flow {i}") for i, f in enumerate(flows, start=1)),
                repeat, capture, events.parse(raw.get("events", []), where, ExperimentError))


def _flow(raw: Any, where: str) -> Flow:
    if not isinstance(raw, dict):
        raise ExperimentError(f"{where}: must be a table such as "
                              "{ kind = \"tcp\", from = \"h1\", to = \"h4\" }")
    _only(raw, FLOW_FIELDS, where)
    kind = raw.get("kind")
    if kind not in FLOW_KINDS:
        raise ExperimentError(f"{where}: kind must be one of {', '.join(FLOW_KINDS)}, "
                              f"not {kind!r}")
    for side in ("from", "to"):
        if not isinstance(raw.get(side), str) or not raw[side]:
            raise ExperimentError(f"{where}: '{side}' must name a node")
    values: dict[str, Any] = {}
    if "parallel" in raw:
        if kind != "tcp":
            raise ExperimentError(f"{where}: parallel only applies to tcp flows")
        values["parallel"] = _count(raw["parallel"], f"{where}: parallel", 1, MAX_PARALLEL)
    if "duration" in raw:
        values["duration"] = _seconds(raw["duration"], f"{where}: duration")
    if "rate" in raw:
        if kind != "udp":
            raise ExperimentError(f"{where}: rate only applies to udp flows")
        rate = raw["rate"]
        if rate not in ("auto", "probe"):
            try:
                rate = parse_rate(rate) if isinstance(rate, str) else float(rate)
            except (TypeError, ValueError):
                raise ExperimentError(f"{where}: rate = {raw['rate']!r} is not a rate such as "
                                      "'25M', \"auto\" or \"probe\"") from None
            if not 0 < rate <= MAX_RATE:
                raise ExperimentError(f"{where}: rate = {raw['rate']!r} is out of range")
        values["rate"] = rate
    elif kind == "udp":
        values["rate"] = "auto"
    if "frames" in raw:
        values.update(_frames(raw, kind, where))
    if "length" in raw:
        if kind == "ping":
            raise ExperimentError(f"{where}: length applies to tcp and udp flows")
        low, high = ((MIN_UDP_LENGTH, MAX_UDP_LENGTH) if kind == "udp"
                     else (MIN_LENGTH, MAX_LENGTH))
        values["length"] = _count(raw["length"], f"{where}: length", low, high)
    if "congestion" in raw:
        congestion = raw["congestion"]
        if kind != "tcp" or not is_congestion_name(congestion):
            raise ExperimentError(f"{where}: congestion names a tcp flow's congestion control, "
                                  f"such as \"cubic\", not {congestion!r}")
        values["congestion"] = congestion
    if "window" in raw:
        if kind != "tcp":
            raise ExperimentError(f"{where}: window only applies to tcp flows")
        window = raw["window"]
        try:
            values["window"] = parse_size(window) if isinstance(window, str) else int(window)
        except (TypeError, ValueError, OverflowError):
            raise ExperimentError(f"{where}: window = {window!r} is not a size such as '64K'"
                                  ) from None
        if not MIN_WINDOW <= values["window"] <= MAX_WINDOW:
            raise ExperimentError(f"{where}: window = {window!r} is out of range "
                                  f"({MIN_WINDOW}..{MAX_WINDOW} bytes)")
    if "count" in raw:
        values["count"] = _count(raw["count"], f"{where}: count", 1, 100_000)
    if "interval" in raw:
        values["interval"] = _seconds(raw["interval"], f"{where}: interval")
    if "rtt_under_load" in raw:
        if not isinstance(raw["rtt_under_load"], bool) or kind == "ping":
            raise ExperimentError(f"{where}: rtt_under_load is true or false, on tcp and udp "
                                  "flows")
        values["rtt_under_load"] = raw["rtt_under_load"]
    values.update(_application(raw, kind, where))
    label = datafiles.text(raw.get("label", f"{raw['from']}-{raw['to']}"), f"{where}: label",
                           ExperimentError)
    address = raw.get("address")
    if address is not None and not isinstance(address, str):
        raise ExperimentError(f"{where}: address must be a string")
    return Flow(kind, raw["from"], raw["to"], address, label, **values)


def _frames(raw: dict[str, Any], kind: str, where: str) -> dict[str, Any]:
    """A udp flow of video frames: its FPS:MEAN,STDEV, and MEAN as the flow's rate."""
    text = raw["frames"]
    if kind != "udp" or "rate" in raw:
        raise ExperimentError(f"{where}: frames applies to udp flows, which then take their "
                              "rate from it (leave out rate)")
    if not isinstance(text, str) or not text:
        raise ExperimentError(f"{where}: frames must be a string such as \"60:20M,2M\"")
    if isinstance(raw.get("length"), int) and raw["length"] < MIN_ISOCHRONOUS_UDP_LENGTH:
        raise ExperimentError(f"{where}: frames need a length of at least "
                              f"{MIN_ISOCHRONOUS_UDP_LENGTH} bytes")
    try:
        frames = parse_isochronous(text)
    except UsageError as error:
        raise ExperimentError(f"{where}: frames = {text!r}: "
                              f"{str(error).removeprefix('--isochronous')}") from None
    return {"frames": text, "rate": frames["frame_load"]}


def _application(raw: dict[str, Any], kind: str, where: str) -> dict[str, Any]:
    """size, objects and content of scp and http flows; server and client of a command."""
    values: dict[str, Any] = {}
    for name in ("size", "content"):
        if name in raw and kind not in TRANSFERS:
            raise ExperimentError(f"{where}: {name} applies to scp and http flows")
    if "objects" in raw and kind != "http":
        raise ExperimentError(f"{where}: objects applies to http flows")
    for name in ("server", "client"):
        if name in raw and kind != "command":
            raise ExperimentError(f"{where}: {name} applies to command flows")
    if kind in TRANSFERS:
        values["size"] = _size(raw.get("size", DEFAULT_TRANSFER_SIZE), f"{where}: size", 1,
                               MAX_TRANSFER_SIZE)
        content = raw.get("content", "random")
        if content not in CONTENTS:
            raise ExperimentError(f"{where}: content must be one of {', '.join(CONTENTS)}, "
                                  f"not {content!r}")
        values["content"] = content
    if "objects" in raw:
        values["objects"] = _count(raw["objects"], f"{where}: objects", 1, MAX_OBJECTS)
    if kind == "command":
        if not isinstance(raw.get("client"), str) or not raw["client"].strip():
            raise ExperimentError(f"{where}: a command flow needs client = \"...\" (run in "
                                  "the source node; {address} is the target's address, "
                                  "{port} the flow's port)")
        for name in ("server", "client"):
            if name in raw:
                command = raw[name]
                if (not isinstance(command, str) or len(command) > MAX_COMMAND
                        or "\x00" in command):
                    raise ExperimentError(f"{where}: {name} must be a command line of at most "
                                          f"{MAX_COMMAND} characters")
                values[name] = command
    return values


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
