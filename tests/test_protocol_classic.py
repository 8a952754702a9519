"""The classic receiver, fed the byte stream in every way TCP may cut it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simpleperf.protocol.classic import (
    ClassicReceiver,
    ProtocolError,
    is_acknowledgement,
)


def feed_in_pieces(stream: bytes, cuts: list[int]) -> ClassicReceiver:
    receiver = ClassicReceiver()
    edges = [0] + sorted(set(c for c in cuts if 0 < c < len(stream))) + [len(stream)]
    for start, end in zip(edges, edges[1:], strict=False):
        finished = receiver.feed(stream[start:end])
        assert finished == (end == len(stream) and stream.endswith(b"BYE"))
    return receiver


def test_bye_alone_glued_and_split():
    assert feed_in_pieces(b"\0" * 1000 + b"BYE", [1000]).payload_bytes == 1000
    assert feed_in_pieces(b"\0" * 1000 + b"BYE", []).payload_bytes == 1000
    assert feed_in_pieces(b"\0" * 1000 + b"BYE", [1001]).payload_bytes == 1000
    assert feed_in_pieces(b"\0" * 1000 + b"BYE", [1002]).payload_bytes == 1000
    assert feed_in_pieces(b"0" * 999 + b"BYE", [1000, 1001]).payload_bytes == 999
    assert feed_in_pieces(b"BYE", [1, 2]).payload_bytes == 0


def test_end_of_stream_without_bye_counts_everything():
    receiver = feed_in_pieces(b"\0" * 5000, [1000, 2000])
    assert not receiver.finished
    assert receiver.payload_bytes == 5000


def test_data_after_finish_is_a_protocol_error():
    receiver = ClassicReceiver()
    receiver.feed(b"BYE")
    with pytest.raises(ProtocolError):
        receiver.feed(b"\0")


@settings(max_examples=500)
@given(payload=st.integers(min_value=0, max_value=20_000),
       filler=st.sampled_from([b"\0", b"0"]),
       cuts=st.lists(st.integers(min_value=0, max_value=20_003), max_size=30))
def test_any_split_counts_exactly_the_payload(payload, filler, cuts):
    receiver = feed_in_pieces(filler * payload + b"BYE", cuts)
    assert receiver.finished
    assert receiver.payload_bytes == payload


@pytest.mark.parametrize("reply,ok", [(b"ACK: BYE", True), (b"ACK:BYE", True), (b"ACK", True),
                                      (b"NAK", False), (b"", False)])
def test_acknowledgement_spellings(reply, ok):
    assert is_acknowledgement(reply) is ok
