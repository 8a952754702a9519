"""What `simpleperf --rpm` prints: a row per interval, then goodput and responsiveness with
the draft's confidence; with -J one JSON document (docs/json-output.md, "Responsiveness")."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from typing import Any

from ..description.client_options import ClientOptions
from ..engine.responsiveness import (
    CONNECT,
    FOREIGN,
    LOADED,
    TLS,
    IntervalRecord,
    RpmParameters,
    RpmResult,
)
from ..stats import rpm
from ..units import format_iperf3_rate
from .json import identity


def _direction(options: ClientOptions) -> str:
    return {"bidir": "both", "reverse": "download"}.get(options.test.direction, "upload")


def _direction_text(options: ClientOptions) -> str:
    return ("upload and download at once" if options.test.direction == "bidir"
            else _direction(options))


def target(options: ClientOptions) -> str:
    """What the run measures: the configuration URL, or the simpleperf server's address."""
    return options.rpm_url or f"{options.host} port {options.port}"


def header(options: ClientOptions, parameters: RpmParameters, limit: float,
           note: str = "") -> str:
    return (f"Responsiveness (draft-ietf-ippm-responsiveness) to {target(options)}{note}: "
            f"{_direction_text(options)}, intervals of {parameters.interval:g} s, "
            f"at most {limit:g} s\n"
            "Interval          Conns  Goodput          Moving average     RPM")


def _rate(bits_per_second: float, unit: str) -> str:
    return format_iperf3_rate(bits_per_second / 8, 1.0, unit)


def interval_line(record: IntervalRecord, parameters: RpmParameters, unit: str) -> str:
    start = record.index * parameters.interval
    span = f"{start:.2f}-{start + parameters.interval:.2f} sec"
    measured = f"{record.rpm:.0f}" if record.rpm is not None else "-"
    return (f"{span:<18}{record.connections:<7}{_rate(record.goodput, unit):<17}"
            f"{_rate(record.moving_goodput, unit):<19}{measured}")


# a foreign probe's round trips as the summary names them
_FOREIGN_PARTS = ((CONNECT, "handshake"), (TLS, "TLS"), (FOREIGN, "request"))


def _foreign_times(trimmed: dict[str, float]) -> str:
    return ", ".join(f"{name} {trimmed[kind]:.3f} ms" for kind, name in _FOREIGN_PARTS
                     if kind in trimmed)


def _foreign_ms(times: dict[str, float]) -> float:
    """A foreign probe's round trips, averaged into one (as the draft's formula does)."""
    parts = [times[kind] for kind, _ in _FOREIGN_PARTS if kind in times]
    return sum(parts) / len(parts)


def summary_lines(result: RpmResult, idle: dict[str, float], unit: str) -> list[str]:
    both = result.uplink_goodput is not None and result.downlink_goodput is not None
    split = (f" (up {_rate(result.uplink_goodput or 0.0, unit)}, down "
             f"{_rate(result.downlink_goodput or 0.0, unit)})" if both else "")
    lines = [f"Goodput: {_rate(result.goodput, unit)}{split} over {result.connections} "
             f"load-generating connections{' each way' if both else ''} (confidence "
             f"{result.goodput_confidence})"]
    if result.rpm is None:
        lines.append("Responsiveness: not measured (no probe of some kind came back)")
    else:
        lines.append(f"Responsiveness: {result.rpm:.0f} RPM, {result.rating} (confidence "
                     f"{result.confidence})")
        trimmed, probes = result.trimmed_ms, result.probes
        lines.append(f"  foreign {result.foreign_rpm:.0f} RPM: {_foreign_times(trimmed)} "
                     f"(trimmed means of {probes[FOREIGN]} new connections)")
        lines.append(f"  loaded  {result.loaded_rpm:.0f} RPM: request {trimmed[LOADED]:.3f} "
                     f"ms (trimmed mean of {probes[LOADED]} self probes)")
    lines.append(f"Idle: {_foreign_times(idle)} ({rpm(_foreign_ms(idle)):.0f} RPM)")
    return lines


def document(options: ClientOptions, parameters: RpmParameters, limit: float,
             idle: dict[str, float], result: RpmResult, failure: str | None) -> str:
    """One JSON document: start (what ran), intervals, end (the result)."""
    end: dict[str, Any] = result.as_dict()
    intervals = end.pop("intervals")
    if options.test.direction != "bidir":  # one direction: its goodput is the goodput
        for item in (end, *intervals):
            for key in ("uplink", "downlink", "uplink_goodput", "downlink_goodput"):
                item.pop(key, None)
    value: dict[str, Any] = {
        "start": {**identity(time.time()),
                  "connecting_to": ({"url": options.rpm_url} if options.rpm_url else
                                    {"host": options.host, "port": options.port}),
                  "responsiveness": {"direction": _direction(options), "time_limit": limit,
                                     "parameters": asdict(parameters)}},
        "intervals": intervals,
        "end": {"responsiveness": {**end, "idle_ms": idle}},
    }
    if failure is not None:
        value["error"] = failure
    return json.dumps(value, indent=2)
