"""The bytes each protocol puts on the wire for a test, pinned: a reshaping of the code (the
test description's table, its rooms) must leave every encoding as it was. The encodings of
CASES, as our client sends them (native: the test message; iperf3: the parameter JSON;
iperf2: the client header, TCP and UDP), are compared with tests/data/wire.json, recorded
from the code before #49's reshaping. A deliberate change of a protocol records the file
again (SIMPLEPERF_RECORD_WIRE=1), and its diff shows what moved on the wire."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from simpleperf.description.testspec import TestSpec
from simpleperf.protocol import iperf2, iperf3, native

RECORDED = Path(__file__).parent / "data" / "wire.json"

CASES: dict[str, dict[str, Any]] = {
    "tcp default": {},
    "tcp reverse, four streams, window, congestion, mss, tos, omit, nodelay": dict(
        direction="reverse", parallel=4, window=262144, congestion="cubic", mss=1400, tos=0x28,
        omit=2.0, nodelay=True),
    "tcp bidir, an amount, zero copy, fq rate, repeating payload, affinity": dict(
        direction="bidir", duration=None, num_bytes=50_000_000, zerocopy=True,
        fq_rate=1e8, repeating_payload=True, affinity=1),
    "udp 10M, 1400 B, reverse": dict(protocol="udp", rate=10e6, length=1400,
                                     direction="reverse"),
    "udp trip times, histograms, isochronous": dict(
        protocol="udp", trip_times=True, histogram_bin_width=1e-3, histogram_bins=500,
        frame_rate=60.0, frame_load=20e6, frame_stdev=2e6, length=1470),
    "tcp trip times, write prefetch, whole segments, sample": dict(
        trip_times=True, write_prefetch=65536, whole_segments=True, sample=0.5),
    "udp l4s": dict(protocol="udp", l4s=True, rate=0.0, length=1200),
}


def encodings(spec_class: Any = TestSpec) -> dict[str, dict[str, str]]:
    """Each case's encodings, as text (hex for bytes; iperf3's JSON with sorted keys)."""
    found = {}
    for name, fields in CASES.items():
        spec = spec_class(**fields)
        header = iperf2.header_from_spec(spec, 5001, (1_700_000_000, 250_000))
        found[name] = {
            "native": native.encode(native.spec_message(spec)).hex(),
            "iperf3": json.dumps(iperf3.parameters_message(spec, "simpleperf-0.1.0"),
                                 sort_keys=True),
            "iperf2": iperf2.encode_header(header, udp=spec.protocol == "udp").hex(),
        }
    return found


def test_every_protocol_puts_the_recorded_bytes_on_the_wire():
    now = encodings()
    if os.environ.get("SIMPLEPERF_RECORD_WIRE") == "1":
        RECORDED.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
    recorded = json.loads(RECORDED.read_text())
    assert set(now) == set(recorded)
    for name, encoded in now.items():
        assert encoded == recorded[name], name
