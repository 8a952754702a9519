"""Hostile input for iperf3's protocol layer (protocol/iperf3.py), without sockets: any
parameter or results message, framed or not, becomes a checked value or a ProtocolError,
and what our iperf3 client sends, an iperf3 server side reads back unchanged."""

from __future__ import annotations

import json
import math
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simpleperf.description.options import (
    MAX_LENGTH,
    MAX_PARALLEL,
    MAX_TEST_SECONDS,
    is_congestion_name,
)
from simpleperf.description.testspec import TestSpec as Spec
from simpleperf.errors import ProtocolError
from simpleperf.protocol import iperf3

PARAMETER_KEYS = ["tcp", "udp", "sctp", "omit", "time", "num", "blockcount", "parallel",
                  "reverse", "bidirectional", "window", "len", "bandwidth", "MSS", "nodelay",
                  "congestion", "get_server_output", "udp_counters_64bit", "client_version",
                  "authtoken", "file", "fqrate", "flowlabel", "pacing_timer"]
scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20))
values = scalars | st.lists(scalars, max_size=3) | st.dictionaries(st.text(max_size=4), scalars,
                                                                      max_size=3)
parameter_messages = st.dictionaries(st.sampled_from(PARAMETER_KEYS) | st.text(max_size=8),
                                     values, max_size=10)
result_entries = st.dictionaries(st.sampled_from(["id", *iperf3.RESULT_NUMBERS])
                                 | st.text(max_size=6), scalars, max_size=8)
results_messages = st.dictionaries(
    st.sampled_from(["streams", "cpu_util_total", "sender_has_retransmits"]),
    st.lists(result_entries | scalars, max_size=4) | scalars, max_size=3)
SETTINGS = settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(parameter_messages)
def test_any_parameter_message_is_checked_parameters_or_a_protocol_error(message):
    try:
        params = iperf3.parse_parameters(message)
    except ProtocolError:
        return
    assert params.protocol in ("tcp", "udp", "sctp")
    assert 1 <= params.parallel <= MAX_PARALLEL
    assert 0 <= params.duration <= MAX_TEST_SECONDS and math.isfinite(params.omit)
    assert 0 < params.length <= MAX_LENGTH
    assert params.rate >= 0 and math.isfinite(params.rate)
    assert params.congestion is None or is_congestion_name(params.congestion)
    assert params.window is None or params.window > 0
    assert params.stream_count() in (params.parallel, 2 * params.parallel)
    if params.protocol == "sctp" or any(message.get(key) for key in iperf3.UNSUPPORTED):
        assert params.refused is not None  # refused with iperf3's own error, not run


@SETTINGS
@given(results_messages)
def test_any_results_message_is_clean_numbers_or_a_protocol_error(message):
    try:
        parsed = iperf3.parse_results(message)
    except ProtocolError:
        return
    for stream_id, entry in parsed.items():
        assert isinstance(stream_id, int)
        assert set(entry) <= set(iperf3.RESULT_NUMBERS)
        assert all(not isinstance(v, bool) and 0 <= v < 2**63 for v in entry.values())


@SETTINGS
@given(st.binary(max_size=64) | st.builds(
    lambda size, body: struct.pack("!I", size) + body, st.integers(0, 2**32 - 1),
    st.binary(max_size=64)) | st.builds(
    lambda value: iperf3.encode_json(value), st.dictionaries(st.text(max_size=5), scalars)),
    st.integers(0, 100))
def test_framed_json_is_an_object_nothing_yet_or_a_protocol_error(data, cut):
    reader = iperf3.JsonReader(iperf3.MAX_PARAMS)
    try:
        first = reader.feed(data[:cut])
        value = first if first is not None else reader.feed(data[cut:])
    except ProtocolError:
        return
    assert value is None or isinstance(value, dict)


specs = st.builds(
    Spec, protocol=st.sampled_from(["tcp", "udp"]),
    direction=st.sampled_from(["forward", "reverse", "bidir"]),
    parallel=st.integers(1, MAX_PARALLEL), duration=st.floats(0.1, 3600),
    length=st.integers(16, 65507), rate=st.sampled_from([0.0, 1e6, 25e6, 1e10]),
    window=st.none() | st.integers(2000, 10**9), mss=st.none() | st.integers(88, 32767),
    nodelay=st.booleans(), congestion=st.none() | st.sampled_from(["cubic", "bbr", "reno"]),
    omit=st.floats(0, 10))


@SETTINGS
@given(specs)
def test_what_our_iperf3_client_asks_an_iperf3_server_reads_back(spec):
    framed = iperf3.encode_json(iperf3.parameters_message(spec, "simpleperf-test"))
    params = iperf3.parse_parameters(iperf3.JsonReader(iperf3.MAX_PARAMS).feed(framed) or {})
    assert (params.protocol, params.direction, params.parallel) == (
        spec.protocol, spec.direction, spec.parallel)
    assert (params.length, params.window, params.mss, params.nodelay, params.congestion) == (
        spec.length, spec.window, spec.mss, spec.nodelay, spec.congestion)
    assert params.duration == spec.duration and params.omit == spec.omit
    assert params.rate == (int(spec.rate) if spec.rate else
                           (1e6 if spec.protocol == "udp" else 0))
    assert params.refused is None


def test_results_we_send_are_results_we_read():
    entries = [{"stream": 1, "bytes": 1000, "seconds": 2.5, "sender": True, "retransmits": 3},
               {"stream": 2, "bytes": 990, "seconds": 2.5, "sender": False, "lost": 2,
                "packets": 10, "jitter_ms": 0.5}]
    message = iperf3.results_message(entries, [1, 3], (10.0, 5.0), 1)
    parsed = iperf3.parse_results(json.loads(iperf3.encode_json(message)[4:]))
    assert parsed[1]["bytes"] == 1000 and parsed[1]["retransmits"] == 3
    assert parsed[3]["errors"] == 2 and parsed[3]["packets"] == 10
    assert parsed[3]["jitter"] == 0.0005 and parsed[3]["end_time"] == 2.5
