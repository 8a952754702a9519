"""The compiled paths (transport/compiled.py) against the pure-Python ones: the same UDP
account from the same reads whatever the datagrams (in order, lost, reordered, far jumps,
coalesced, short), and real sockets on loopback for sending and reading, UDP and TCP."""

from __future__ import annotations

import errno
import json
import os
import socket
import struct
import subprocess
import time

import pytest
from helpers import run_simpleperf
from hypothesis import given, settings
from hypothesis import strategies as st

from simpleperf.engine import udp_receive
from simpleperf.protocol import iperf2, iperf3
from simpleperf.protocol.classic import FINISH, ClassicReceiver
from simpleperf.protocol.native import DATAGRAM_HEADER
from simpleperf.stats import UdpReceiveAccount
from simpleperf.transport import compiled, tcp, udp
from simpleperf.transport.buffers import aligned

fastpath = compiled.fastpath
pytestmark = pytest.mark.skipif(fastpath is None, reason="checked by test_stamping's "
                                "test_the_compiled_fast_path_is_built")
HEADERS = [DATAGRAM_HEADER, iperf3.HEADER_32, iperf3.HEADER_64, iperf2.LAYOUT]
SLOT = 4096

# One message: ("short",) | ("one", step) | ("run", steps of each datagram, last length)
STEPS = st.sampled_from([1, 1, 1, 1, 2, 5, 0, -1, -7, 1500, -1500])
MESSAGE = st.one_of(
    st.tuples(st.just("one"), STEPS),
    st.tuples(st.just("run"), st.lists(st.sampled_from([1, 1, 1, 1, 1, 1, 2, -3, 0, 1500]),
                                       min_size=1, max_size=12), st.integers(0, 40)),
    st.tuples(st.just("short")))


def write_reads(header: struct.Struct, segment: int, messages: list, start: int,
                first_number: int, slot: int = SLOT, drops: list[int] | None = None,
                arrivals: float | None = None) -> tuple[memoryview, bytearray]:
    """The buffer and table a compiled read would leave: each message at i * slot, each
    queued when the socket had dropped drops[i], arriving from `arrivals` (else start +
    0.5 s)."""
    arrivals = start + 0.5 if arrivals is None else arrivals
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
                                  arrivals + index * 1e-4 + (index % 3) * 3e-5,
                                  drops[index] if drops else 0)
    return buffer, table


def account_fields(account: UdpReceiveAccount) -> tuple:
    return (account.highest, account.lost, account.out_of_order, account.jitter,
            account._transit, account.received, account.bad, account._undo,
            account._block_min, account._block_count, account.growth.first_window_min,
            account.growth.first_window_end, list(account.growth.recent), account.socket_drops,
            account.host_dropped)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(HEADERS), st.integers(0, 60), st.lists(MESSAGE, max_size=64),
       st.lists(MESSAGE, max_size=64), st.integers(1, 2**31),
       st.lists(st.sampled_from([0, 0, 0, 0, 1, 3]), min_size=128, max_size=128),
       st.sampled_from([0.003, 0.097, 1.0]))
def test_compiled_and_pure_accounts_agree(header, spare, first_read, second_read, number,
                                          drop_steps, gap):
    """... and where the socket dropped datagrams (the drops its messages carry rise), the
    gap before the message is the receiving host's in both. The second read comes `gap`
    seconds after the first: within the first window of the queue-growth estimate, or
    after it (where the compiled path leaves out blocks a later one makes useless)."""
    segment = header.size + spare
    compiled_account, pure_account = UdpReceiveAccount(), UdpReceiveAccount()
    compiled_bytes = pure_bytes = 0
    drops = [sum(drop_steps[:i + 1]) for i in range(len(drop_steps))]
    for reads, messages in enumerate((first_read, second_read)):
        counts = drops[64 * reads:64 * reads + len(messages)]
        buffer, table = write_reads(header, segment, messages, 1_700_000_000 + reads, number,
                                    drops=counts, arrivals=1_700_000_000.5 + reads * gap)
        compiled_bytes += udp_receive.account_read(compiled_account, header, buffer, SLOT,
                                                   table, len(messages), fastpath)
        for index in range(len(messages)):
            length, size, arrival, dropped = udp_receive.ROW.unpack_from(
                table, index * udp_receive.ROW.size)
            lost_before = pure_account.host_gap_begins(dropped)
            if length >= header.size:
                udp_receive.account_message(pure_account, buffer, index * SLOT, length, size,
                                            header.unpack_from, header.size, arrival)
                pure_bytes += length
            pure_account.host_gap_ends(lost_before)
        number = pure_account.highest
    assert account_fields(compiled_account) == account_fields(pure_account)
    assert compiled_bytes == pure_bytes


@pytest.mark.parametrize("gap", [0.003, 0.097, 1.0])
def test_blocks_the_compiled_path_leaves_out_change_neither_window(gap):
    """Two long reads whose delays fall (each block below the one before): the second
    within the first window, across its end, or after it. The compiled path leaves out
    blocks a later one makes useless, never one of the first window: both windows' least
    delays are Python's."""
    header, segment = DATAGRAM_HEADER, DATAGRAM_HEADER.size + 10
    compiled_account, pure_account = UdpReceiveAccount(), UdpReceiveAccount()
    number = 1
    for reads in range(2):
        buffer, table = write_reads(header, segment, [("run", [1] * 12, 40)] * 64,
                                    1_700_000_000 + reads, number,
                                    arrivals=1_700_000_000.5 + reads * gap)
        udp_receive.account_read(compiled_account, header, buffer, SLOT, table, 64, fastpath)
        for index in range(64):
            length, size, arrival, _ = udp_receive.ROW.unpack_from(
                table, index * udp_receive.ROW.size)
            udp_receive.account_message(pure_account, buffer, index * SLOT, length, size,
                                        header.unpack_from, header.size, arrival)
        number = pure_account.highest
    assert account_fields(compiled_account) == account_fields(pure_account)
    assert len(pure_account.growth.recent) == 1  # falling: only the latest is of use


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
            length, segment, arrival, drops = udp_receive.ROW.unpack_from(
                table, index * udp_receive.ROW.size)
            assert drops == 0
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
    assert fastpath.receive(receiver.fileno(), aligned(65536), 65536, 1,
                            bytearray(udp_receive.ROW.size)) == 0
    assert time.monotonic() - began < 1


def read_all(reader: udp_receive.CompiledReader, account: UdpReceiveAccount,
             header: struct.Struct) -> int:
    """What the receivers do: the compiled loop, and Python from the message it leaves, until
    a read times out with nothing."""
    moved = 0
    while True:
        got, index, accounted = reader.read(account)
        if index < got:
            accounted += udp_receive.account_read(account, header, reader.buffer, reader.SLOT,
                                                  reader.table, got, fastpath, index)
        if not got and not accounted:
            return moved
        moved += accounted


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(HEADERS), st.lists(STEPS, min_size=1, max_size=300),
       st.integers(1, 2**31), st.sampled_from([1, 2, 8192]))
def test_the_compiled_loop_hands_over_what_it_cannot_account(header, steps, first, room):
    """Datagrams sent on loopback (in order, lost, reordered, far jumps) and read by the
    compiled loop, which leaves a message it cannot account to Python (and hands over when
    its room for closed blocks is full): the account Python's path gives the same numbers,
    whatever the arrival times."""
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    udp.enable_receive_offload(receiver)
    udp.tcp.set_wake_up(receiver, 0.05)
    sender = udp.open_connected(socket.AF_INET, None, receiver.getsockname())
    expected = UdpReceiveAccount()
    number, size = first, header.size + 8
    with sender, receiver:
        for position, step in enumerate(steps):
            number = max(1, number + step)
            wrapped = number % (1 << 8 * (header.size - 8))
            datagram = bytearray(size)
            header.pack_into(datagram, 0, 1_700_000_000, position, wrapped)
            sender.send(datagram)
            expected.feed(header.unpack_from(datagram)[2], 1_700_000_000 + position * 1e-6,
                          1_700_000_001.0)
        account = UdpReceiveAccount()
        reader = udp_receive.CompiledReader(receiver, header, fastpath, blocks=room)
        moved = read_all(reader, account, header)
    fields = ("highest", "lost", "out_of_order", "received", "bad", "_undo", "_block_count")
    assert [getattr(account, f) for f in fields] == [getattr(expected, f) for f in fields]
    assert moved == size * len(steps)  # a bad one's bytes too, as every path counts them


def test_the_compiled_loop_never_waits_on_the_socket_holding_what_it_accounted():
    """Only a call's first read waits: once datagrams are accounted the loop returns when
    the socket is empty, not at the socket's receive timeout (a test's end would
    otherwise be reported without its last datagrams)."""
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    udp.enable_receive_offload(receiver)
    udp.tcp.set_wake_up(receiver, 5.0)
    sender = udp.open_connected(socket.AF_INET, None, receiver.getsockname())
    header, datagram = DATAGRAM_HEADER, bytearray(100)
    with sender, receiver:
        for number in (1, 2, 3):
            header.pack_into(datagram, 0, 1_700_000_000, 0, number)
            sender.send(datagram)
        account = UdpReceiveAccount()
        reader = udp_receive.CompiledReader(receiver, header, fastpath)
        began = time.monotonic()
        got, index, moved = reader.read(account)
        assert time.monotonic() - began < 2.5  # half the socket's timeout
    assert (got, index, moved, account.highest) == (0, 0, 300, 3)


def test_what_the_socket_dropped_is_the_receiving_hosts_loss_in_the_compiled_loop():
    """A socket too small for a burst drops the burst's end; the next datagram is queued
    with the socket's drops risen, and the gap before it is the host's."""
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    udp.enable_receive_offload(receiver)
    receiver.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    udp.tcp.set_wake_up(receiver, 0.05)
    sender = udp.open_connected(socket.AF_INET, None, receiver.getsockname())
    header = DATAGRAM_HEADER
    datagram = bytearray(1000)

    def send(numbers: range) -> None:
        for number in numbers:
            header.pack_into(datagram, 0, 1_700_000_000, 0, number)
            sender.send(datagram)
    with sender, receiver:
        account = UdpReceiveAccount()
        reader = udp_receive.CompiledReader(receiver, header, fastpath)
        send(range(1, 201))
        kept = read_all(reader, account, header) // 1000
        assert 0 < kept < 200 and (account.lost, account.host_dropped) == (0, 0)
        send(range(201, 202))
        read_all(reader, account, header)
    assert account.highest == 201 and account.lost == 200 - kept
    assert account.host_dropped == account.lost and account.socket_drops == 200 - kept


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


@pytest.fixture
def tcp_pair():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    yield client, server
    client.close()
    server.close()


def test_tcp_writes_up_to_the_limit_and_reads_to_the_end(tcp_pair):
    client, server = tcp_pair
    payload = aligned(10_000, repeating=True)
    sent, error = fastpath.tcp_send(client.fileno(), payload, 10_000, 123_457, -1.0, 5.0, -1)
    assert (sent, error) == (123_457, 0)
    client.shutdown(socket.SHUT_WR)
    buffer = aligned(65536)
    received, pattern = 0, b""
    udp.tcp.set_wake_up(server, 0.5)
    while True:
        count, ended, error, _, _ = fastpath.tcp_receive(server.fileno(), buffer, 0.0)
        assert error == 0
        pattern = pattern or bytes(buffer[:20])
        received += count
        if ended:
            break
    assert received == 123_457 and pattern == b"01234567890123456789"


def test_the_timed_receivers_reads_land_in_order_each_with_its_end_and_times(tcp_pair):
    """tcp_receive_reads: every read after the one before it in the buffer, its end and its
    wall and monotonic times in the table; it stops at `most` reads, at a full buffer and at
    the peer's end, and loses no byte."""
    client, server = tcp_pair
    row = compiled.TCP_READ_ROW
    table = bytearray(row.size * 4)
    udp.tcp.set_wake_up(server, 0.5)
    stream = bytes(range(256)) * 40  # 10,240 bytes
    got = b""
    client.sendall(stream)
    client.shutdown(socket.SHUT_WR)
    ended = False
    calls = 0
    while not ended:
        buffer = aligned(2048)
        before_wall, before = time.time(), time.monotonic()
        reads, ended, error = fastpath.tcp_receive_reads(server.fileno(), buffer, 0.05,
                                                         table, 3)
        calls += 1
        assert error == 0 and 0 <= reads <= 3
        start = 0
        for index in range(reads):
            end, wall, monotonic = row.unpack_from(table, index * row.size)
            assert start < end <= len(buffer)
            assert before_wall - 0.01 <= wall <= time.time() + 0.01
            assert before <= monotonic <= time.monotonic()
            start = end
        got += bytes(buffer[:start])
    assert got == stream and calls >= 5  # no call reads past its buffer
    with pytest.raises(ValueError, match="do not fit"):
        fastpath.tcp_receive_reads(server.fileno(), aligned(100), 0.0, bytearray(47), 2)


def test_tcp_zero_copy_sends_the_files_bytes(tcp_pair):
    client, server = tcp_pair
    source = os.memfd_create("test-payload")
    try:
        os.write(source, b"z" * 5000)
        sent, error = fastpath.tcp_send(client.fileno(), aligned(5000), 5000, 12_000, -1.0, 5.0,
                                        source)
    finally:
        os.close(source)
    assert (sent, error) == (12_000, 0)
    client.shutdown(socket.SHUT_WR)
    data = b""
    while chunk := server.recv(65536):
        data += chunk
    assert data == b"z" * 12_000


def test_tcp_stops_at_the_deadline_and_reports_a_reset(tcp_pair):
    client, server = tcp_pair
    udp.tcp.set_wake_up(client, 0.1)
    began = time.monotonic()
    sent, error = fastpath.tcp_send(client.fileno(), aligned(65536), 65536, -1, began + 0.3,
                                    30.0, -1)  # nobody reads: the buffers fill, then wait
    assert error == 0 and sent > 0 and 0.3 <= time.monotonic() - began < 3
    server.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    server.close()  # unread data and linger 0: a reset
    time.sleep(0.05)
    error = 0
    for _ in range(100):
        _, error = fastpath.tcp_send(client.fileno(), aligned(65536), 65536, -1, -1.0, 0.01, -1)
        if error:
            break
    assert error in (errno.ECONNRESET, errno.EPIPE)
    _, _, error, _, _ = fastpath.tcp_receive(client.fileno(), aligned(100), 0.0)
    assert error in (0, errno.ECONNRESET)  # the reset was reported once, to the writer
    with pytest.raises(ValueError, match="does not fit"):
        fastpath.tcp_send(client.fileno(), aligned(100), 101, -1, -1.0, 0.0, -1)


@pytest.mark.loopback
@pytest.mark.parametrize("pure", ["0", "1"])
@pytest.mark.parametrize("flags", [[], ["-R"], ["-Z"], ["-R", "-Z"]])
def test_tcp_runs_on_either_path(server, pure, flags):
    """The client's path (compiled or pure) writes, or with -R reads; exactly -n bytes."""
    _, port = server
    os.environ[compiled.PURE_PYTHON_VARIABLE] = pure
    try:
        done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-J", "--no-latency",
                              "-n", "7777777", "-l", "100000", *flags)
    finally:
        del os.environ[compiled.PURE_PYTHON_VARIABLE]
    assert done.returncode == 0, done.stderr
    end = json.loads(done.stdout)["end"]
    assert end["sum_sent"]["bytes"] == end["sum_received"]["bytes"] == 7777777


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text("BYEx", min_size=1, max_size=9).map(str.encode), min_size=1,
                max_size=12), st.integers(1, 7))
def test_the_compiled_read_keeps_the_streams_tail_as_the_classic_receiver(chunks, size):
    """Read by read (buffers of 1-7 bytes split the stream anywhere), the compiled loop's
    tail and its stop at BYE agree with ClassicReceiver.feed on the same reads."""
    left, right = socket.socketpair()
    with left, right:
        left.sendall(b"".join(chunks))
        left.shutdown(socket.SHUT_WR)
        buffer, expected, tail = aligned(size), ClassicReceiver(), b""
        while not expected.finished:
            count, ended, error, tail, _ = fastpath.tcp_receive(right.fileno(), buffer, 0.0,
                                                                FINISH, tail)
            assert error == 0
            if ended:
                break
            expected.feed(buffer[:count])
            assert tail == expected.tail
        assert (tail == FINISH) == expected.finished


@pytest.mark.root
def test_a_udp_receiver_buffer_goes_past_rmem_max_for_root_and_a_window_still_decides():
    """What a receiving host's hiccup would otherwise lose is absorbed (root may pass
    net.core.rmem_max); a test's -w, set afterwards as the servers do, is what it asked."""
    with open("/proc/sys/net/core/rmem_max") as limit:
        rmem_max = int(limit.read())
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as receiver:
        udp.enable_receive_offload(receiver)
        got = receiver.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        assert got == 2 * udp.FORCED_RECEIVE_BUFFER > 2 * min(rmem_max, udp.RECEIVE_BUFFER)
        receiver.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 * 1024)
        assert receiver.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) == 2 * min(256 * 1024,
                                                                              rmem_max)


@pytest.mark.root
@pytest.mark.loopback
def test_verbose_says_the_receive_buffer_a_udp_receiver_got(server):
    """-V names the buffer of the socket we receive on (and only when we receive UDP):
    what the kernel gave, and why that size."""
    _, port = server
    base = ["-c", "127.0.0.1", "-p", str(port), "-u", "-b", "10M", "-t", "1", "-V"]
    said = {}
    for name, extra in (("reverse", ["-R"]), ("window", ["-R", "-w", "200K"]),
                        ("forward", [])):
        done = run_simpleperf(*base, *extra)
        assert done.returncode == 0, done.stderr
        said[name] = [line for line in done.stdout.splitlines()
                      if line.startswith("UDP receive buffer")]
    assert said["reverse"] == [
        f"UDP receive buffer: {2 * udp.FORCED_RECEIVE_BUFFER} bytes a socket (the kernel's "
        f"count, double what was asked: {udp.FORCED_RECEIVE_BUFFER >> 20} MB past "
        f"net.core.rmem_max where the kernel lets us (root), else up to "
        f"{udp.RECEIVE_BUFFER >> 20} MB)"]
    assert said["window"] == ["UDP receive buffer: 400000 bytes a socket (the kernel's count, "
                              "double what was asked: -w 200000)"]
    assert said["forward"] == []  # the client sends: its buffer is not the one that counts


def _receiver_seconds(pure: bool, client: str, amount: list[str]) -> float:
    """A server in one path, one -n or -k test from `client`: the receiver's seconds."""
    from helpers import IPERF3_BINARIES, SIMPLEPERF, free_port

    port = free_port()
    environment = dict(os.environ, SIMPLEPERF_PURE_PYTHON="1") if pure else None
    server = subprocess.Popen([*SIMPLEPERF, "-s", "-p", str(port)], env=environment,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.8)
        command = ([*SIMPLEPERF, "-c", "127.0.0.1", "--native"] if client == "simpleperf"
                   else [IPERF3_BINARIES[client], "-c", "127.0.0.1"])
        done = subprocess.run([*command, "-p", str(port), *amount, "-J"],
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)["end"]["sum_received"]["seconds"]
    finally:
        server.kill()
        server.wait(5)


@pytest.mark.loopback
@pytest.mark.iperf3
@pytest.mark.parametrize("client", ["simpleperf", "3.12", "3.21"])
@pytest.mark.parametrize("amount", [["-n", "20M"], ["-k", "80", "-l", "256K"]])
def test_the_receivers_seconds_are_the_datas_in_both_paths(client, amount):
    """As iperf3 3.12 reports it: a -n or -k test's receiver counts from its first byte
    to its last, stamped when the data arrived. The compiled read loop stamped its last
    read when the loop returned, half a second later (0.51 s against 0.01 s)."""
    compiled_seconds = _receiver_seconds(False, client, amount)
    pure_seconds = _receiver_seconds(True, client, amount)
    wake_up = tcp.WAKE_UP_SECONDS  # a read loop waiting on an idle socket returns after it
    for seconds in (compiled_seconds, pure_seconds):
        assert 0 < seconds < wake_up / 2, (compiled_seconds, pure_seconds)
    assert abs(compiled_seconds - pure_seconds) < wake_up / 4


def test_a_fast_stream_ended_by_its_peer_reads_in_larger_wake_ups_and_loses_nothing():
    """low_water (iperf2's TCP streams, which their sender's close ends): past 4 Gbit/s the
    reads wait for LOW_WATER bytes (SO_RCVLOWAT), back to one byte when the data slows;
    every byte is counted, the last ones at the close."""
    import threading

    from simpleperf.description.testspec import TestSpec
    from simpleperf.engine import tcp_stream
    from simpleperf.engine.records import Stream

    if compiled.module() is None:
        pytest.skip("the compiled path is not built here")
    listener = socket.create_server(("127.0.0.1", 0))
    sender = socket.create_connection(listener.getsockname())
    receiver, _ = listener.accept()
    listener.close()
    tcp.set_wake_up(receiver)
    stream = Stream(1, False, "tcp", receiver, "test", low_water=True)
    seen: list[int] = []

    def send() -> None:
        chunk = bytes(1 << 20)
        for _ in range(2000):  # 2 GB, as fast as it goes
            sender.sendall(chunk)
        seen.append(receiver.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT))
        for _ in range(20):  # then slowly: 1 KB every 10 ms
            sender.sendall(chunk[:1024])
            time.sleep(0.01)
        seen.append(receiver.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT))
        sender.sendall(chunk[:777])
        sender.close()

    thread = threading.Thread(target=send)
    thread.start()
    tcp_stream.receive(stream, TestSpec(protocol="tcp"), threading.Event())
    thread.join()
    receiver.close()
    assert stream.num_bytes == 2000 * (1 << 20) + 20 * 1024 + 777
    assert seen == [tcp_stream.LOW_WATER, 1]
