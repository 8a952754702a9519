"""Every property of a link direction, defined once.

A property has one name in the model (`Shaping`'s field, the `lab up pair` and `lab link set`
flag, the key of an experiment's [pair] table and of a sweep) and Mininet's name in topology
files and events (`bw`, `max_queue_size`). The table says how a value is read, whether a
running link can take a new one (`lab link set`, events), whether a pair experiment may sweep
it and whether it can act at a switch's port (where only a rate limiter can sit). Topology
loading, the command line, events and experiments all derive their fields from PROPERTIES;
adding a property is a row here and a field of `Shaping`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...units import parse_duration, parse_rate
from . import datafiles, traces
from .disciplines import KERNEL_QDISCS, QDISCS
from .errors import TopologyError

MIN_RATE, MAX_RATE = 1e3, 100e9  # bits/s
MAX_DELAY = 10.0  # seconds
TIME_DIGITS = 9  # times are kept to the nanosecond
MAX_QUEUE = 1_000_000  # packets
AQM_TIMES = (1e-6, 10.0)  # seconds: a target, interval or update period
MAX_FLOWS = 65536  # fq_codel's and fq_pie's flow queues (the kernel's limit)
MAX_QUANTUM = 1 << 20  # bytes a flow queue may send per round
MAX_COUPLING = 255  # DualPI2's k (the kernel's u8)


def rate(value: Any, where: str) -> float:
    """Mininet gives bw as a number of Mbit/s; a string may carry its unit ('40M')."""
    if isinstance(value, bool):
        raise TopologyError(f"{where} must be a rate such as 40 (Mbit/s) or '40M'")
    try:
        bits = float(value) * 1e6 if isinstance(value, (int, float)) else parse_rate(value)
    except (ValueError, TypeError):
        raise TopologyError(f"{where} = {value!r} is not a rate such as 40 (Mbit/s) or "
                            "'40M', '1G', '512K'") from None
    if not MIN_RATE <= bits <= MAX_RATE:
        raise TopologyError(f"{where} = {value!r} is out of range (1 kbit/s to 100 Gbit/s)")
    return bits


def duration(value: Any, where: str) -> float:
    if not isinstance(value, str):
        raise TopologyError(f"{where} = {value!r} needs a unit, such as '10ms'")
    try:
        seconds = parse_duration(value)
    except ValueError:
        raise TopologyError(f"{where} = {value!r} is not a time such as '10ms', '0.5s', "
                            "'250us'") from None
    if seconds > MAX_DELAY:
        raise TopologyError(f"{where} = {value!r} is longer than {MAX_DELAY:g} s")
    # To the nanosecond, so that one time in any unit is one value: '7000us' is 0.007 s
    # as '7ms' is (7000 x 1e-6 alone is 0.006999...).
    return round(seconds, TIME_DIGITS)


def loss(value: Any, where: str) -> float:
    """Mininet gives loss as a percentage number; '1%' is accepted too."""
    text = str(value).strip()
    try:
        percent = float(text[:-1] if text.endswith("%") else text)
    except ValueError:
        raise TopologyError(f"{where} = {value!r} is not a percentage such as 1 or '0.5%'"
                            ) from None
    if isinstance(value, bool) or not 0 <= percent <= 100:
        raise TopologyError(f"{where} = {value!r} must be a percentage from 0 to 100")
    return percent / 100


def flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise TopologyError(f"{where} must be true or false")
    return value


def packets(value: Any, where: str) -> int:
    return datafiles.count(value, where, 1, MAX_QUEUE, TopologyError, "packets")


def qdisc(value: Any, where: str) -> str:
    if value not in QDISCS:
        raise TopologyError(f"{where} must be one of {', '.join(QDISCS)}, not {value!r}")
    return str(value)


def aqm_time(value: Any, where: str) -> float:
    seconds = duration(value, where)
    if not AQM_TIMES[0] <= seconds <= AQM_TIMES[1]:
        raise TopologyError(f"{where} = {value!r} must be from 1us to 10s")
    return seconds


def flow_queues(value: Any, where: str) -> int:
    return datafiles.count(value, where, 1, MAX_FLOWS, TopologyError)


def quantum(value: Any, where: str) -> int:
    return datafiles.count(value, where, 64, MAX_QUANTUM, TopologyError, "bytes")


def coupling(value: Any, where: str) -> int:
    return datafiles.count(value, where, 1, MAX_COUPLING, TopologyError)


def trace(value: Any, where: str) -> str:
    """A Mahimahi trace (a shipped name or a path), read and checked now: its path."""
    return traces.load(value, where).path


def _micro(seconds: float) -> str:
    return f"{seconds * 1e6:.0f}us"


def whole_text(unit: str = "") -> Callable[[str], int]:
    """Reads a whole number (of `unit`) given as text: a flag, a sweep's value."""
    def read(text: str) -> int:
        try:
            return int(text)
        except ValueError:
            of = f" of {unit}" if unit else ""
            raise ValueError(f"must be a whole number{of}, not '{text}'") from None
    return read


@dataclass(frozen=True)
class LinkProperty:
    name: str  # Shaping's field; the flag (`flag`); the key in [pair] and sweeps
    mininet: str  # the key in a topology's links and in events (Mininet's name)
    parse: Callable[[Any, str], Any]  # (value, where) -> the model's value, or TopologyError
    description: str
    example: str = ""  # a value as text; none for a switch
    live: bool = True  # a running link can be set to a new value (lab link set, events)
    sweep: bool = True  # a pair experiment may sweep it
    at_switch: bool = False  # can act at a switch's port (only a rate limiter sits there)
    from_text: Callable[[str], Any] = str  # a value given as text, before parse
    qdiscs: tuple[str, ...] = ()  # a queue discipline's parameter: the disciplines it tunes
    replaces: str = ""  # another property it stands in for (a trace: the rate)
    written: Callable[[Any], Any] = lambda value: value  # the model's value as files give it

    @property
    def flag(self) -> str:
        """Its command-line flag (argparse gives it back under `name`)."""
        return "--" + self.name.replace("_", "-")

    @property
    def switch(self) -> bool:
        """A flag without a value (--reorder)."""
        return not self.example

    @property
    def help(self) -> str:
        example = self.example.replace("%", "%%")  # argparse formats help with %
        return f"{self.description}, e.g. {example}" if example else self.description


PROPERTIES: tuple[LinkProperty, ...] = (
    LinkProperty("rate", "bw", rate, "link rate", "100M", at_switch=True,
                 written=lambda bits: f"{bits:.0f}bit"),
    LinkProperty("delay", "delay", duration, "one-way delay in each direction", "20ms",
                 written=_micro),
    LinkProperty("jitter", "jitter", duration, "standard deviation of the one-way delay",
                 "2ms", written=_micro),
    LinkProperty("reorder", "reorder", flag, "let jitter reorder packets", live=False,
                 sweep=False),
    LinkProperty("loss", "loss", loss, "random loss in each direction", "1%",
                 written=lambda probability: probability * 100),
    LinkProperty("queue", "max_queue_size", packets, "the queue's limit in packets (needs a "
                 "rate)", "50", at_switch=True, from_text=whole_text("packets")),
    LinkProperty("qdisc", "qdisc", qdisc, f"queue discipline: {', '.join(QDISCS)}",
                 "fq_codel", at_switch=True),
    LinkProperty("ecn", "ecn", flag, "the queue discipline marks ECN-capable packets CE "
                 "instead of dropping them", live=False, sweep=False, at_switch=True,
                 qdiscs=KERNEL_QDISCS),
    LinkProperty("target", "target", aqm_time, "AQM target queue delay (kernel default: "
                 "codel, fq_codel 5ms; pie, fq_pie, dualpi2 15ms)", "5ms", at_switch=True,
                 qdiscs=("codel", "fq_codel", "pie", "fq_pie", "dualpi2"), written=_micro),
    LinkProperty("interval", "interval", aqm_time, "CoDel's interval (default 100ms; CAKE's "
                 "rtt)", "100ms", at_switch=True, qdiscs=("codel", "fq_codel", "cake"),
                 written=_micro),
    LinkProperty("tupdate", "tupdate", aqm_time, "the probability's update period of PIE "
                 "(default 15ms) and DualPI2 (16ms)", "15ms", at_switch=True,
                 qdiscs=("pie", "fq_pie", "dualpi2"), written=_micro),
    LinkProperty("step", "step", aqm_time, "DualPI2's marking threshold for its L4S queue "
                 "(default 1ms)", "1ms", at_switch=True, qdiscs=("dualpi2",), written=_micro),
    LinkProperty("coupling", "coupling", coupling, "DualPI2's coupling factor k between its "
                 "queues (default 2)", "2", at_switch=True, qdiscs=("dualpi2",),
                 from_text=whole_text()),
    LinkProperty("any_ect", "any_ect", flag, "DualPI2 puts every ECN-capable packet in its "
                 "L4S queue (ECT(0) too, as DCTCP sends), not only ECT(1)", live=False,
                 sweep=False, at_switch=True, qdiscs=("dualpi2",)),
    LinkProperty("flows", "flows", flow_queues, "flow queues of fq_codel and fq_pie "
                 "(default 1024)", "1024", at_switch=True, qdiscs=("fq_codel", "fq_pie"),
                 from_text=whole_text()),
    LinkProperty("quantum", "quantum", quantum, "bytes a flow queue may send per round "
                 "(fq_codel, fq_pie; default 1514)", "1514", at_switch=True,
                 qdiscs=("fq_codel", "fq_pie"), from_text=whole_text()),
    LinkProperty("trace", "trace", trace, "a Mahimahi trace (a shipped name: "
                 f"{', '.join(traces.shipped())}; or a file) that sets when the link may "
                 "send, instead of bw (the own shaper)", "lte-walk", live=False,
                 replaces="rate"),
)
BY_NAME = {p.name: p for p in PROPERTIES}
BY_MININET = {p.mininet: p for p in PROPERTIES}
MININET_NAMES = tuple(p.mininet for p in PROPERTIES)
NAMES = tuple(p.name for p in PROPERTIES)
LIVE = tuple(p for p in PROPERTIES if p.live)
SWEPT = tuple(p.name for p in PROPERTIES if p.sweep)


def parse_mininet(spec: dict[str, Any], where: str) -> dict[str, Any]:
    """The model's values of the properties a topology's table gives by Mininet's names."""
    return {p.name: p.parse(spec[p.mininet], f"{where}: {p.mininet}")
            for p in PROPERTIES if p.mininet in spec}


def check_qdisc(values: dict[str, Any], where: str) -> None:
    """A discipline's parameters need that discipline (given, or already the link's)."""
    chosen = values.get("qdisc", "droptail")
    for prop in PROPERTIES:
        given = values.get(prop.name)
        if prop.qdiscs and given not in (None, False) and chosen not in prop.qdiscs:
            raise TopologyError(f"{where}: {prop.mininet} applies to qdisc "
                                f"{' or '.join(prop.qdiscs)}, and the queue is {chosen}")


def to_file(values: dict[str, Any]) -> dict[str, Any]:
    """Values by the model's names as a topology file writes them (bw '100000000bit',
    delay '1000us', loss in percent): what from_dict reads back to the same values."""
    return {BY_NAME[name].mininet: BY_NAME[name].written(value)
            for name, value in values.items() if value is not None and value is not False}


def to_mininet(values: dict[str, Any]) -> dict[str, Any]:
    """Values by the model's names (flags, [pair]) as a topology's table gives them; a
    switch that is off is left out."""
    return {BY_NAME[name].mininet: value for name, value in values.items()
            if value is not None and value is not False}
