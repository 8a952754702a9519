"""What a server prints with -J: one JSON document per test, in iperf3's layout (start,
intervals, end), from the server's side: its own intervals, both ends' totals where the
client sent its own, and a document with an `error` key for a test that failed."""

from __future__ import annotations

import time
from typing import Any

from ..description.testspec import TestSpec
from ..engine.measurement import Measurement
from . import json as json_report


def test_document(spec: TestSpec, peer: str, measurement: Measurement,
                  client_view: dict[int, dict[str, Any]], started_wall: float,
                  protocol_name: str, client_cpu: tuple[float, float] | None = None
                  ) -> dict[str, Any]:
    """`client_view`: the client's results by stream number (empty if it sent none)."""
    ours = {entry["stream"]: entry for entry in measurement.local_results()}
    numbers = [stream.number for stream in measurement.streams]
    # By what each stream does here: an iperf3 client's streams carry its ids (1, 3, 4, ...).
    client_sends = {s.number: not s.sending for s in measurement.streams}.__getitem__
    end = json_report.end_section(spec.transport, numbers, client_sends, client_view, ours)
    end["cpu_utilization_percent"] = json_report.cpu_section(measurement.cpu_percent(),
                                                             client_cpu)
    return {
        "start": {**json_report.identity(started_wall),
                  "accepted_connection": _endpoint(peer),
                  # a stream's label is its client's address and port
                  "connected": [{"socket": s.number, **_split(s.label, "remote")}
                                for s in measurement.streams],
                  "test_start": json_report.test_start(spec), "protocol": protocol_name},
        "intervals": json_report.interval_entries(
            [r for r in measurement.intervals if not r.omitted], spec.transport,
            client_sends, False),
        "end": end,
    }


def classic_document(peer: str, local: str, seconds: float, num_bytes: int,
                     problem: str | None) -> dict[str, Any]:
    """A classic client's test: only what arrived (a classic client reports nothing)."""
    received = {"start": 0, "end": seconds, "seconds": seconds, "bytes": num_bytes,
                "bits_per_second": num_bytes * 8 / seconds if seconds > 0 else 0.0}
    document: dict[str, Any] = {
        "start": {**json_report.identity(time.time() - seconds),
                  "accepted_connection": _endpoint(peer),
                  "connected": [{"socket": 1, **_split(local, "local"),
                                 **_split(peer, "remote")}],
                  "test_start": {"protocol": "TCP", "num_streams": 1},
                  "protocol": "classic"},
        "intervals": [], "end": {"sum_received": received}}
    if problem:
        document["error"] = f"incomplete: {problem}"
    return document


def error_document(peer: str, message: str) -> dict[str, Any]:
    """A test that did not run to its end, as iperf3 writes one: the `error` key says why."""
    return {"start": {**json_report.identity(time.time()),
                      "accepted_connection": _endpoint(peer)},
            "intervals": [], "end": {}, "error": message}


def _endpoint(text: str) -> dict[str, Any]:
    host, _, port = text.rpartition(":")
    return {"host": host.strip("[]"), "port": int(port) if port.isdigit() else 0}


def _split(text: str, side: str) -> dict[str, Any]:
    point = _endpoint(text)
    return {f"{side}_host": point["host"], f"{side}_port": point["port"]}

