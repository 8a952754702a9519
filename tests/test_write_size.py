"""TCP writes of the default length end on a segment boundary (no runt segment per write);
a length the user asked for with -l is written as asked. Real connections on loopback."""

from __future__ import annotations

import socket

import pytest

from simpleperf.command_line.cli import parse_args
from simpleperf.description.options import DEFAULT_LENGTH
from simpleperf.description.testspec import TestSpec as Spec
from simpleperf.errors import ProtocolError
from simpleperf.protocol.native import parse_spec, spec_message
from simpleperf.transport import tcp


def connected_pair(segment: int | None = None) -> tuple[socket.socket, socket.socket]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = socket.socket()
    if segment is not None:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, segment)
    client.connect(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    return client, server


def test_the_default_length_is_rounded_down_to_whole_segments():
    client, server = connected_pair()
    with client, server:
        segment = client.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)
        length = tcp.write_length(client, DEFAULT_LENGTH, whole_segments=True)
    assert segment > 1000  # loopback: one segment is most of a 64 KB packet
    assert length % segment == 0
    assert DEFAULT_LENGTH - segment < length <= DEFAULT_LENGTH


def test_a_small_segment_size_is_followed():
    client, server = connected_pair(segment=1000)
    with client, server:
        segment = client.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)
        length = tcp.write_length(client, 100_000, whole_segments=True)
    assert segment <= 1000
    assert length % segment == 0 and 100_000 - segment < length <= 100_000


def test_a_length_below_one_segment_or_asked_for_is_kept():
    client, server = connected_pair()
    with client, server:
        assert tcp.write_length(client, 1000, whole_segments=True) == 1000
        assert tcp.write_length(client, DEFAULT_LENGTH, whole_segments=False) == DEFAULT_LENGTH


def test_only_a_tcp_test_without_len_asks_for_whole_segments():
    assert parse_args(["-c", "--native"]).test.whole_segments
    assert not parse_args(["-c", "--native", "-l", "128K"]).test.whole_segments
    assert not parse_args(["-c", "--native", "-u"]).test.whole_segments


def test_whole_segments_travels_in_the_test_message_and_is_checked():
    spec = Spec(whole_segments=True)
    assert parse_spec(spec_message(spec)).whole_segments
    with pytest.raises(ProtocolError, match="whole_segments"):
        parse_spec({**spec_message(spec), "whole_segments": 1})
