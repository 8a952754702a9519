"""When a TCP write's last byte reached the receiver (the path's one-way delay of
--trip-times): each segment's arrival from a packet socket filtered to the connection, the
first copy of a segment only; stamped reads without the right to capture."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import subprocess
import threading
import time
from collections import deque

import pytest
from helpers import SIMPLEPERF, free_port, run_simpleperf

from simpleperf.delays import Binning, DelayLog
from simpleperf.engine import timed_writes
from simpleperf.protocol.native import WRITE_HEADER
from simpleperf.transport import segments, tcp

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a packet socket needs root")


def _connected(family: int = socket.AF_INET, host: str = "127.0.0.1"):
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.bind((host, 0))
    listener.listen(1)
    sender = socket.create_connection(listener.getsockname()[:2])
    receiver, _ = listener.accept()
    listener.close()
    return sender, receiver


@pytest.fixture
def stamping_on():
    """The kernel stamping arrivals for the test: it turns its stamping on a
    moment after the first socket asks (from a work queue, later on a busy machine), and a
    packet before that has no stamp. A socket that asks holds it on; a datagram to it that
    comes stamped says it is on."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        holder.bind(("127.0.0.1", 0))
        holder.setsockopt(socket.SOL_SOCKET, tcp.SO_TIMESTAMPING,
                          tcp.SOF_TIMESTAMPING_RX_SOFTWARE | tcp.SOF_TIMESTAMPING_SOFTWARE)
        holder.settimeout(1)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            holder.sendto(b"?", holder.getsockname())
            _, ancillary, _, _ = holder.recvmsg(8, tcp.TIMESTAMPING_CONTROL)
            if tcp.software_stamp(ancillary) is not None:
                break
            time.sleep(0.01)
        else:
            pytest.fail("the kernel never stamped a datagram's arrival")
        yield
    finally:
        holder.close()


@needs_root
@pytest.mark.parametrize("family, host", [(socket.AF_INET, "127.0.0.1"),
                                          (socket.AF_INET6, "::1")])
def test_a_capture_sees_its_own_connection_only_and_where_each_write_begins(family, host,
                                                                           stamping_on):
    sender, receiver = _connected(family, host)
    other_sender, other_receiver = _connected(family, host)
    captured = segments.Segments.open(receiver)
    assert captured is not None
    try:
        payload = bytearray(5000)
        writes = []
        for number in (1, 2, 3):
            writes.append((time.time_ns(), number))
            WRITE_HEADER.pack_into(payload, 0, *writes[-1], len(payload), 0, 0)
            sender.send(payload, socket.MSG_EOR)
            other_sender.send(bytes(7000))
            time.sleep(0.05)
        got = 0
        while got < 15000:
            got += len(receiver.recv(65536))
        time.sleep(0.1)
        captured.drain(WRITE_HEADER)
        starts = [captured.start_of(write) for write in writes]
        first, second, third = starts
        assert first is not None and second is not None and third is not None
        assert (second - first, third - second) == (5000, 5000)
        # each write's end is a segment's end (MSG_EOR), seen once and first time
        for start in (first, second, third):
            seen = captured.arrival(start + 5000)
            assert seen is not None
            arrival, resent = seen
            assert not resent and abs(arrival - time.time()) < 5
        # the other connection's 21,000 bytes end no segment here
        assert captured.arrival(first + 7000) is None
        assert len(captured.ends) == 3  # loopback's segments hold a 5000-byte write whole
    finally:
        captured.close()
        for s in (sender, receiver, other_sender, other_receiver):
            s.close()


@needs_root
def test_a_capture_opened_beside_busy_connections_holds_none_of_their_packets():
    """A packet socket takes in every packet until its filter is attached: what came
    before must be thrown away, or another connection's segments pass for this one's (its
    first write's start among them, which ties the stream to the wrong sequence numbers)."""
    sender, receiver = _connected()
    busy_sender, busy_receiver = _connected()
    done = threading.Event()

    def busy() -> None:  # the other connection's segments, in flight throughout
        with contextlib.suppress(OSError):
            while not done.is_set():
                busy_sender.send(bytes(1000))

    def drained() -> None:
        with contextlib.suppress(OSError):
            while busy_receiver.recv(65536):
                pass

    threads = [threading.Thread(target=busy), threading.Thread(target=drained)]
    for thread in threads:
        thread.start()
    stray = 0
    try:
        for _ in range(200):
            captured = segments.Segments.open(receiver)
            assert captured is not None
            try:
                captured.drain(WRITE_HEADER)
                stray += len(captured.ends) + len(captured.starts)
            finally:
                captured.close()
    finally:
        done.set()
        busy_sender.close()
        for thread in threads:
            thread.join(5)
        for s in (sender, receiver, busy_receiver):
            s.close()
    assert stray == 0


def _packet(sequence: int, length: int, data: bytes = b"") -> bytes:
    body = data.ljust(length, b"\0")[:length]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + 20 + length, 0, 0, 64, 6, 0,
                     bytes(4), bytes(4))
    tcp_header = struct.pack("!HHIIBBHHH", 1, 2, sequence, 0, 5 << 4, 0x18, 1000, 0, 0)
    return ip + tcp_header + body


class _Parsed(segments.Segments):
    """A Segments without a packet socket: the parsing alone."""

    def __init__(self) -> None:
        self.family = socket.AF_INET
        self.fast = self.batch = None
        self.ends = {}
        self.order = deque()
        self.highest = None
        self.starts = {}
        self.start_order = deque()


    def drain(self, header=None) -> None:
        """Nothing to take in: the test gives the segments."""


@needs_root
@pytest.mark.skipif(segments.compiled.module() is None, reason="checked by test_stamping's "
                    "test_the_compiled_fast_path_is_built")
def test_the_compiled_and_pure_captures_take_in_the_same_segments(stamping_on):
    """Two captures of one connection, one read in batches by the compiled path and one a
    packet at a time: the same segments, arrivals and write starts."""
    sender, receiver = _connected()
    batched, single = segments.Segments.open(receiver), segments.Segments.open(receiver)
    assert batched is not None and single is not None and batched.fast is not None
    single.fast = None
    with contextlib.ExitStack() as stack:
        stack.callback(batched.close)
        stack.callback(single.close)
        stack.callback(sender.close)
        stack.callback(receiver.close)
        _compare_captures(sender, receiver, batched, single)


def _compare_captures(sender, receiver, batched, single) -> None:
    """The same 300 writes as each capture takes them in, one in batches, one a packet at a
    time."""
    sender.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    payload = bytearray(3000)
    for number in range(1, 301):  # more packets than one compiled read takes
        WRITE_HEADER.pack_into(payload, 0, time.time_ns(), number, len(payload), 0, 0)
        sender.send(payload, socket.MSG_EOR)
        if number % 50 == 0:
            batched.drain(WRITE_HEADER)  # now and then, as a reader does
    got = 0
    while got < 900_000:
        got += len(receiver.recv(1 << 20))
    time.sleep(0.1)
    batched.drain(WRITE_HEADER)
    single.drain(WRITE_HEADER)
    assert len(batched.ends) >= 300 and len(batched.starts) == 300
    assert batched.starts == single.starts and batched.ends.keys() == single.ends.keys()
    for end, (arrival, resent) in batched.ends.items():
        # the kernel stamps a packet as it reaches the host, once for every capture: the
        # same moment in both, never the time one of them got round to reading it
        assert single.ends[end][1] == resent
        other = single.ends[end][0]
        assert arrival is not None and other is not None
        assert abs(other - arrival) < 100e-6
    assert list(batched.order) == list(single.order)


def test_a_segment_that_comes_after_later_data_was_resent_and_the_first_copy_stands():
    parsed = _Parsed()
    top = 0xFFFFFFFF - 999  # the sequence numbers wrap within these segments
    for sequence, stamp in ((top, 1.0), ((top + 2000) & 0xFFFFFFFF, 1.2),
                            ((top + 1000) & 0xFFFFFFFF, 1.5), (top, 1.7)):
        parsed._segment(memoryview(_packet(sequence, 1000)), stamp, None)
    assert parsed.arrival(top + 1000) == (1.0, False)  # its copy at 1.7 changes nothing
    assert parsed.arrival(top + 3000) == (1.2, False)
    assert parsed.arrival(top + 2000) == (1.5, True)  # the gap filled: resent
    header = WRITE_HEADER.pack(7, 42, 3000, 0, 0)
    parsed._segment(memoryview(_packet(5000, 1000, header)), 2.0, WRITE_HEADER)
    assert parsed.start_of((7, 42)) == 5000
    # a segment in the middle of a write: its payload is no header of the write it names
    parsed._segment(memoryview(_packet(6000, 1000, bytes(8) + header[8:])), 2.0,
                    WRITE_HEADER)
    assert parsed.start_of((7, 42)) == 5000 and parsed.start_of((0, 42)) == 6000
    # a packet cut short or with no data is passed over
    parsed._segment(memoryview(_packet(9000, 1000)[:30]), 2.1, None)
    parsed._segment(memoryview(_packet(9000, 0)), 2.1, None)
    assert parsed.arrival(9000) is None and parsed.arrival(10000) is None
    # a packet the kernel did not stamp is a segment all the same, with no arrival
    parsed._segment(memoryview(_packet(20000, 1000)), None, None)
    assert parsed.arrival(21000) == (None, False)


def test_only_a_stamp_the_kernel_set_on_arrival_is_an_arrival():
    stamp = struct.pack("qq", 1_800_000_000, 250_000_000) + bytes(32)
    kind = (socket.SOL_SOCKET, tcp.SO_TIMESTAMPING)
    assert tcp.software_stamp([(*kind, stamp)]) == pytest.approx(1_800_000_000.25)
    # a zero software stamp (a hardware one only), none at all, another message: none
    assert tcp.software_stamp([(*kind, bytes(48))]) is None
    assert tcp.software_stamp([]) is None
    assert tcp.software_stamp([(socket.SOL_SOCKET, tcp.SO_TIMESTAMPNS, stamp[:16])]) is None


def _timed(source: timed_writes.ArrivalSource) -> tuple[timed_writes.WriteTimes, DelayLog]:
    path = DelayLog(Binning())
    writes = timed_writes.WriteTimes(DelayLog(Binning()), None, path)
    writes.time_arrivals(source)
    return writes, path


def _write(number: int, length: int, departed: int = 0, left_ns: int = 0) -> bytes:
    return WRITE_HEADER.pack(0, number, length, departed, left_ns).ljust(length, b"x")


def test_a_write_whose_last_segment_was_resent_or_unstamped_is_not_timed_the_others_are():
    parsed = _Parsed()

    class Given(timed_writes.CapturedArrivals):
        def read(self, stamp):
            return None

    source = Given(parsed)
    writes, path = _timed(source)
    base = 1_000_000
    parsed._note_start((0, 1), base)
    parsed.ends[(base + 100) & 0xFFFFFFFF] = (10.030, False)  # write 1's last segment
    parsed.ends[(base + 200) & 0xFFFFFFFF] = (10.090, True)  # write 2's: resent
    parsed.ends[(base + 300) & 0xFFFFFFFF] = (10.050, False)
    # write 4's came before the kernel's stamping was on: when it came is not known
    parsed.ends[(base + 400) & 0xFFFFFFFF] = (None, False)
    stream = _write(1, 100) + _write(2, 100) + _write(3, 100) + _write(4, 100) + \
        _write(5, 100, 1, 10_000_000_000) + _write(6, 100, 2, 10_010_000_000) + \
        _write(7, 100, 3, 10_020_000_000) + _write(8, 100, 4, 10_030_000_000)
    writes.feed(memoryview(stream), 11.0)
    total = path.total()
    assert total.count == 2 and source.resent == 1 and source.unstamped == 1
    assert total.minimum == pytest.approx(0.030) and total.maximum == pytest.approx(0.030)
    assert total.arrival == "capture"


def test_stamped_reads_time_a_write_only_when_its_last_segment_was_not_merged():
    source = timed_writes.StampedReads.__new__(timed_writes.StampedReads)
    source.waiting, source.merged = None, 0
    writes, path = _timed(source)
    first, second, third = _write(1, 100), _write(2, 100, 1, 5_000_000_000), \
        _write(3, 100, 2, 5_000_000_000)
    reads = [(first[:WRITE_HEADER.size], 5.001), (first[WRITE_HEADER.size:], 5.010),
             # the next header read has another stamp: write 1's last segment was its own
             (second[:WRITE_HEADER.size], 5.020), (second[WRITE_HEADER.size:], 5.030),
             # ... and the same one: merged with what followed, so write 2 is not timed
             (third[:WRITE_HEADER.size], 5.030)]
    for data, stamp in reads:
        assert len(data) <= writes.wanted(65536)  # reads end where writes and headers do
        writes.feed(memoryview(data), 6.0, stamp)
    total = path.total()
    assert total.count == 1 and total.minimum == pytest.approx(0.010)
    assert source.merged == 1 and total.arrival == "stamped reads"


@needs_root
def test_stamped_reads_say_when_data_arrived_not_when_it_was_read(stamping_on):
    sender, receiver = _connected()
    try:
        reader = tcp.Arrivals.start(receiver)
        assert reader is not None
        sender.send(b"x" * 1000)
        sent = time.time()
        time.sleep(0.3)  # the data waits unread
        count, stamp = reader.read(memoryview(bytearray(4096)))
        assert count == 1000 and stamp is not None
        assert abs(stamp - sent) < 0.1 < time.time() - stamp
    finally:
        sender.close()
        receiver.close()


@pytest.mark.loopback
@needs_root
def test_trip_times_report_how_arrivals_were_timed_with_and_without_the_right_to_capture():
    results = {}
    # root without CAP_NET_RAW cannot open a packet socket, as a user cannot
    for who, prefix in (("root", []), ("without", ["setpriv", "--bounding-set=-net_raw",
                                                   "--inh-caps=-net_raw"])):
        port = free_port()
        server = subprocess.Popen([*prefix, *SIMPLEPERF, "-s", "-p", str(port), "-1"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            time.sleep(1.0)
            client = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "1",
                                    "--trip-times", "-J", "--no-latency", "-l", "64K")
            assert client.returncode == 0, client.stderr
            results[who] = json.loads(client.stdout)["end"]["streams"][0]["receiver"]
        finally:
            server.terminate()
            server.wait(10)
    assert results["root"]["one_way_delay"]["arrival"] == "capture"
    assert results["without"]["one_way_delay"]["arrival"] == "stamped reads"
    for receiver in results.values():
        delay = receiver["one_way_delay"]
        assert delay["count"] > 10 and 0 <= delay["min_ms"] <= delay["p50_ms"] < 5


def test_a_peers_delay_account_names_a_known_way_of_timing_or_is_refused():
    from simpleperf.delays import DelayAccount
    account = DelayAccount()
    account.add(0.01)
    account.arrival = "capture"
    entry = account.to_result()
    assert DelayAccount.from_result(entry, 100).arrival == "capture"
    entry["arrival"] = "guessed"
    with pytest.raises(ValueError, match="unknown way of timing"):
        DelayAccount.from_result(entry, 100)
