"""Hostile input for the native protocol: truncated, oversized, wrong types, wrong order.
The protocol layer alone (no sockets) and then a real server on loopback: every input ends
in a clean protocol error, nothing crashes or hangs, and a valid client is served after."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import time

import pytest
from helpers import proc_status, run_simpleperf, start_server
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from simpleperf.description.testspec import TestSpec
from simpleperf.errors import ProtocolError
from simpleperf.protocol import detect, events, native
from simpleperf.protocol.exchange import Exchange, Role

TYPES = ["hello", "welcome", "auth", "test", "accepted", "start", "finished", "results",
         "bye", "error", "authenticated"]
scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True)
           | st.text(max_size=12))
# Nesting one level deep is enough to be the wrong type everywhere; deeper costs time only.
json_values = scalars | st.lists(scalars, max_size=8) | st.dictionaries(
    st.sampled_from(list(native.RESULT_FIELDS)) | st.text(max_size=6), scalars, max_size=4)
field_names = st.sampled_from(["protocol", "direction", "parallel", "duration", "num_bytes",
                               "length", "rate", "window", "congestion", "mss", "nodelay",
                               "omit", "streams", "intervals", "proof", "token", "stream",
                               "bytes", "seconds", "message"])
messages = st.builds(lambda kind, fields: {"type": kind, **fields},
                     st.sampled_from(TYPES) | st.text(max_size=10),
                     st.dictionaries(field_names, json_values, max_size=4))
results = st.builds(lambda rows: {"type": "results", "streams": rows},
                    st.lists(st.dictionaries(st.sampled_from(list(native.RESULT_FIELDS)),
                                             scalars, max_size=6), max_size=3))


def _frame(body: bytes) -> bytes:
    return struct.pack("!I", len(body)) + body


hostile_streams = st.one_of(
    st.binary(max_size=200),
    st.builds(lambda ms, cut: b"".join(native.encode(m) for m in ms)[:cut],
              st.lists(messages | results, min_size=1, max_size=3), st.integers(0, 400)),
    st.builds(lambda n, body: struct.pack("!I", n) + body, st.integers(0, 2**32 - 1),
              st.binary(max_size=64)),
    st.builds(lambda value: _frame(json.dumps(value).encode()), json_values),
    st.builds(lambda text: _frame(text), st.binary(max_size=100)),
    st.lists(messages | results, max_size=3).map(
        lambda ms: b"".join(native.encode(m) for m in ms)),
)


def _consume(data: bytes, cuts: list[int]) -> None:
    """What a server does with bytes: frame, parse, validate every message, and hold the
    typed events against the exchange's order."""
    reader = native.MessageReader()
    exchange = Exchange(Role.SERVER)
    pieces, last = [], 0
    for cut in sorted(c % (len(data) + 1) for c in cuts):
        pieces.append(data[last:cut])
        last = cut
    pieces.append(data[last:])
    for piece in pieces:
        for message in reader.feed(piece):
            for check in (native.parse_spec, native.parse_results,
                          native.parse_intervals):
                with contextlib.suppress(ProtocolError):
                    check(message)
            with contextlib.suppress(ProtocolError):
                events.decode(message)
        with contextlib.suppress(ProtocolError):
            exchange.receive(piece)


@pytest.mark.slow
@settings(max_examples=10_000, deadline=None, suppress_health_check=list(HealthCheck))
@given(hostile_streams, st.lists(st.integers(0, 1000), max_size=4))
def test_protocol_layer_turns_any_input_into_messages_or_a_protocol_error(data, cuts):
    with contextlib.suppress(ProtocolError):
        _consume(data, cuts)


@settings(max_examples=2_000, deadline=None)
@given(st.binary(max_size=64))
def test_prefaces_and_detection_never_fail_otherwise(data):
    assert detect.detect(data) in (None, *detect.KINDS)
    for parse in (native.parse_preface, native.parse_data_preface):
        with contextlib.suppress(ProtocolError):
            parse(data)


def test_valid_messages_survive_every_split():
    spec = TestSpec(protocol="udp", direction="bidir", parallel=3, rate=1e6,
                           length=1200, omit=1.0)
    data = native.encode({"type": "hello"}) + native.encode(native.spec_message(spec))
    for cut in range(len(data) + 1):
        reader = native.MessageReader()
        got = reader.feed(data[:cut]) + reader.feed(data[cut:])
        assert [m["type"] for m in got] == ["hello", "test"]
        assert native.parse_spec(got[1]) == spec


def test_oversized_length_is_refused_before_buffering():
    reader = native.MessageReader()
    with pytest.raises(ProtocolError):
        reader.feed(struct.pack("!I", native.MAX_MESSAGE + 1))
    assert native.MessageReader().feed(struct.pack("!I", 10)) == []


@pytest.fixture(scope="module")
def live_server():
    live, port = start_server()
    yield live, port
    live.close()


# 10,000 real connections (about 90 s); SIMPLEPERF_FUZZ_LIVE=N for a longer campaign.
LIVE_EXAMPLES = int(os.environ.get("SIMPLEPERF_FUZZ_LIVE", "10000"))


@pytest.mark.slow
@pytest.mark.loopback
@settings(max_examples=LIVE_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
          database=None)
@given(kind=st.sampled_from([native.CONTROL, native.DATA, native.ECHO, b"X"]),
       data=hostile_streams)
@example(kind=native.CONTROL,  # a valid test whose client closes before its streams come
         data=native.encode({"type": "hello"}) + native.encode({"type": "test"}))
def test_live_server_survives_hostile_connections(live_server, kind, data):
    _, port = live_server
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            sock.sendall(native.preface(kind)[:5] + bytes([native.VERSION]) + data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            return  # the server already refused and closed (reset, not connected): fine
        sock.settimeout(10)
        reply = b""
        began = time.monotonic()
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            reply += chunk
        assert time.monotonic() - began < 10
    if kind == native.CONTROL and reply:
        replies = native.MessageReader().feed(reply)
        if replies[-1]["type"] == "accepted":
            # Only a hello followed by a valid test may be accepted (the client's close
            # then ends it quietly, the peer being gone).
            sent = native.MessageReader().feed(data[:_framed_length(data, 2)])
            assert [m.get("type") for m in sent] == ["hello", "test"]
            native.parse_spec(sent[1])
        else:
            assert replies[-1]["type"] in ("error", "welcome")


def _framed_length(data: bytes, count: int) -> int:
    """How many leading bytes of data hold its first count length-prefixed frames."""
    end = 0
    for _ in range(count):
        (size,) = struct.unpack_from("!I", data, end)
        end += 4 + size
    return end


def test_after_the_hostile_inputs_a_valid_client_is_served(live_server):
    live, port = live_server
    baseline = proc_status(live.process.pid)
    done = run_simpleperf("-c", "-p", str(port), "-J", "-t", "1", "--native")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["end"]["sum_received"]["bytes"] > 0
    deadline = time.monotonic() + 10
    while proc_status(live.process.pid)["fds"] > baseline["fds"] and \
            time.monotonic() < deadline:
        time.sleep(0.1)
    assert proc_status(live.process.pid)["fds"] <= baseline["fds"]
    assert live.process.poll() is None


@settings(max_examples=2000, deadline=None)
@given(number=st.integers(0, 2**64 - 1), clock=st.integers(0, 2**64 - 1),
       secret=st.binary(min_size=1, max_size=64), other=st.binary(min_size=1, max_size=64),
       noise=st.binary(max_size=40))
def test_echo_probes_authenticate_with_their_secret_only(number, clock, secret, other, noise):
    probe = native.echo_probe(number, clock, secret)
    assert native.echo_probe_is_authentic(secret, probe)
    # HMAC pads keys shorter than its block with zeros: b"k" and b"k\0" are one key.
    same_key = other.rstrip(b"\0") == secret.rstrip(b"\0")
    assert native.echo_probe_is_authentic(other, probe) == same_key
    assert not native.echo_probe_is_authentic(secret, probe[:16] + bytes(16))
    assert native.echo_probe_is_authentic(secret, noise) == (noise == probe)
