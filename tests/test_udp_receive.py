"""The compiled UDP paths (transport/compiled.py) against the pure-Python ones: the same
account from the same reads whatever the datagrams (in order, lost, reordered, far jumps,
coalesced, short), and real sockets on loopback for sending and reading."""

from __future__ import annotations

import errno
import socket
import struct
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simpleperf.engine import udp_receive
from simpleperf.protocol import iperf3
from simpleperf.protocol.native import DATAGRAM_HEADER
from simpleperf.stats import UdpReceiveAccount
from simpleperf.transport import compiled, udp
from simpleperf.transport.buffers import aligned

fastpath = compiled.fastpath
pytestmark = pytest.mark.skipif(fastpath is None, reason="checked by test_stamping's "
                                "test_the_compiled_fast_path_is_built")
HEADERS = [DATAGRAM_HEADER, iperf3.HEADER_32, iperf3.HEADER_64]
SLOT = 4096

# One message: ("short",) | ("one", step) | ("run", steps of each datagram, last length)
STEPS = st.sampled_from([1, 1, 1, 1, 2, 5, 0, -1, -7, 1500, -1500])
MESSAGE = st.one_of(
    st.tuples(st.just("one"), STEPS),
    st.tuples(st.just("run"), st.lists(st.sampled_from([1, 1, 1, 1, 1, 1, 2, -3, 0, 1500]),
                                       min_size=1, max_size=12), st.integers(0, 40)),
    st.tuples(st.just("short")))


def write_reads(header: struct.Struct, segment: int, messages: list, start: int,
                first_number: int, slot: int = SLOT) -> tuple[memoryview, bytearray]:
    """The buffer and table a compiled read would leave: each message at i * slot."""
    buffer = aligned(slot * len(messages))
    table = bytearray(udp_receive.ROW.size * len(messages))
    number, micros = first_number, 0
    for index, message in enumerate(messages):
        base = index * slot
        if message[0] == "short":
            length, size = header.size - 1, header.size - 1
        else:
            steps = [message[1]] if message[0] == "one" else message[1]
            for position, step in enumerate(steps):
                number = max(1, number + step)
                micros += 7 * (position + 1)
                header.pack_into(buffer, base + position * segment, start + micros // 10**6,
                                 micros % 10**6, number % (1 << 8 * (header.size - 8)))
            last = segment if message[0] == "one" else header.size + message[2] % (
                segment - header.size + 1)
            length = (len(steps) - 1) * segment + last
            size = length if message[0] == "one" else segment
        udp_receive.ROW.pack_into(table, index * udp_receive.ROW.size, length, size,
                                  start + 0.5 + index * 1e-4 + (index % 3) * 3e-5)
    return buffer, table


def account_fields(account: UdpReceiveAccount) -> tuple:
    return (account.highest, account.lost, account.out_of_order, account.jitter,
            account._transit, account.received, account.bad, account._undo,
            account._block_min, account._block_count, account.first_window_min,
            account._first_window_end, list(account._recent_blocks))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(HEADERS), st.integers(0, 60), st.lists(MESSAGE, max_size=64),
       st.lists(MESSAGE, max_size=64), st.integers(1, 2**31))
def test_compiled_and_pure_accounts_agree(header, spare, first_read, second_read, number):
    segment = header.size + spare
    compiled_account, pure_account = UdpReceiveAccount(), UdpReceiveAccount()
    compiled_bytes = pure_bytes = 0
    for reads, messages in enumerate((first_read, second_read)):
        buffer, table = write_reads(header, segment, messages, 1_700_000_000 + reads, number)
        compiled_bytes += udp_receive.account_read(compiled_account, header, buffer, SLOT,
                                                   table, len(messages), fastpath)
        for index in range(len(messages)):
            length, size, arrival = udp_receive.ROW.unpack_from(
                table, index * udp_receive.ROW.size)
            if length >= header.size:
                udp_receive.account_message(pure_account, buffer, index * SLOT, length, size,
                                            header.unpack_from, header.size, arrival)
                pure_bytes += length
        number = pure_account.highest
    assert account_fields(compiled_account) == account_fields(pure_account)
    assert compiled_bytes == pure_bytes


def test_a_long_in_order_read_is_accounted_whole_in_c():
    header, slot = DATAGRAM_HEADER, 65536
    buffer, table = write_reads(header, 1470, [("run", [1] * 44, 1454)] * 64, 1_700_000_000,
                                0, slot)
    account = UdpReceiveAccount()
    state, index, moved, closed = fastpath.account_runs(
        account.run_state(), buffer, slot, table, 0, 64, header.size, 8, 32, 1000)
    assert (index, state[0], state[1]) == (64, 64 * 44, 0)  # every run, nothing lost
    assert moved == 64 * 44 * 1470 and len(closed) == 64 * 44 // 32


def test_bad_layouts_are_refused():
    account = UdpReceiveAccount()
    with pytest.raises(ValueError, match="do not fit"):
        fastpath.account_runs(account.run_state(), bytearray(100), 100, bytearray(24), 0, 1,
                              16, 5, 32, 1000)
    with pytest.raises(ValueError, match="do not fit"):  # the table is one row short
        fastpath.account_runs(account.run_state(), bytearray(200), 100, bytearray(24), 0, 2,
                              16, 8, 32, 1000)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for count in (0, 65):
            with pytest.raises(ValueError, match="do not fit"):
                fastpath.receive(sock.fileno(), bytearray(65536 * 65), 65536, count,
                                 bytearray(24 * 65))
        with pytest.raises(TypeError):
            fastpath.receive(sock.fileno(), b"read-only", 4, 1, bytearray(24))


@pytest.fixture
def pair():
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    udp.enable_receive_offload(receiver)
    sender = udp.open_connected(socket.AF_INET, None, receiver.getsockname())
    yield sender, receiver
    sender.close()
    receiver.close()


def test_sent_batches_are_read_numbered_and_stamped(pair):
    sender, receiver = pair
    size = 1000
    batch = udp.enable_segmentation(sender, size)
    assert batch > 1
    before = time.time()
    sent, error = fastpath.send_batches(sender.fileno(), aligned(size * batch), size, batch,
                                        150, 1, 8, None, -1.0)
    assert (sent, error) == (150, 0)
    buffer, table = aligned(65536 * 64), bytearray(udp_receive.ROW.size * 64)
    account = UdpReceiveAccount()
    moved = 0
    udp.tcp.set_wake_up(receiver, 0.2)
    while moved < 150 * size:
        got = fastpath.receive(receiver.fileno(), buffer, 65536, 64, table)
        assert got > 0, "the datagrams sent were not read"
        for index in range(got):
            length, segment, arrival = udp_receive.ROW.unpack_from(
                table, index * udp_receive.ROW.size)
            assert segment == size and length % size == 0
            assert before - 1 < arrival < time.time() + 1
        moved += udp_receive.account_read(account, DATAGRAM_HEADER, buffer, 65536, table, got,
                                          fastpath)
    assert (account.highest, account.lost, account.out_of_order) == (150, 0, 0)
    assert 0 <= account._transit < 1  # stamped when sent, on the same clock


def test_a_read_times_out_with_nothing(pair):
    _, receiver = pair
    udp.tcp.set_wake_up(receiver, 0.05)
    began = time.monotonic()
    assert fastpath.receive(receiver.fileno(), aligned(65536), 65536, 1, bytearray(24)) == 0
    assert time.monotonic() - began < 1


def test_sending_stops_at_the_deadline_and_at_a_closed_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as closed:
        closed.bind(("127.0.0.1", 0))
        address = closed.getsockname()
    with udp.open_connected(socket.AF_INET, None, address) as sender:
        sent, error = fastpath.send_batches(sender.fileno(), aligned(100), 100, 1, 10**9, 1, 8,
                                            None, time.monotonic() + 5)
        assert error == errno.ECONNREFUSED and sent >= 1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink:
        sink.bind(("127.0.0.1", 0))
        with udp.open_connected(socket.AF_INET, None, sink.getsockname()) as sender:
            began = time.monotonic()
            sent, error = fastpath.send_batches(sender.fileno(), aligned(100), 100, 1, 10**12,
                                                1, 8, b"k3y-8byt", began + 0.2)
            assert error == 0 and sent > 0
            assert 0.2 <= time.monotonic() - began < 2
            first = sink.recv(100)
            assert DATAGRAM_HEADER.unpack_from(first)[2] == 1 and first[16:24] == b"k3y-8byt"
