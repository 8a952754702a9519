"""iperf2's formats, bytes in and values out (protocol/iperf2.py), and that telling iperf2
apart never takes another protocol's connection (protocol/detect.py)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simpleperf.description.testspec import TestSpec
from simpleperf.errors import ProtocolError
from simpleperf.protocol import iperf2
from simpleperf.protocol.detect import CLASSIC, IPERF2, IPERF3, NATIVE, detect
from simpleperf.protocol.iperf3 import COOKIE_ALPHABET, COOKIE_SIZE
from simpleperf.protocol.native import CONTROL, preface

# What iperf 2.1.8's client wrote at the start of a TCP test (-t 1, port 5999), and with -R.
V1 = "000000010000176f0000000000000000ffffff9c"  # 1 thread, port 5999, 1.00 s
EXTENSION = "0000000000000000{upper}0000" "0002000100080003" + "00" * 16  # 2.1.8
IPERF2_TCP = bytes.fromhex("40010078" + V1 + EXTENSION.format(upper="0000"))
IPERF2_TCP_REVERSE = bytes.fromhex("44010078" + V1 + EXTENSION.format(upper="0400"))
# ... and after a UDP datagram's first 16 bytes (-u -t 1, its default 1048576 bit/s): plain,
# with --trip-times (its start at 1795764104.259681), and with --isochronous as well; the
# length states the frame fields (32 bytes of zeros here) but not the start after them
UDP_EXTENSION = "0000000000000000{upper}0000" "0002000100080003" "00000000" "00100000" + \
    "00" * 8
UDP_START = "00" * 32 + "00000000" "6b092f88" "0003f661" + "00" * 8
IPERF2_UDP = {(False, False): "48010098" + V1 + UDP_EXTENSION.format(upper="0000"),
              (True, False): "680100d8" + V1 + UDP_EXTENSION.format(upper="0010") + UDP_START,
              (True, True): "680100d8" + V1 + UDP_EXTENSION.format(upper="0011") + UDP_START}


def test_a_real_iperf2_header_reads_as_iperf2_wrote_it():
    header = iperf2.parse_header(IPERF2_TCP)
    assert (header.threads, header.port, header.duration, header.num_bytes) == (1, 5999, 1.0,
                                                                                None)
    assert header.peer_version == "2.1.8" and not header.reverse
    assert iperf2.tcp_header_length(header.flags) == len(IPERF2_TCP) == 60
    assert iperf2.parse_header(IPERF2_TCP_REVERSE).reverse


def test_our_header_is_byte_for_byte_the_one_iperf2_writes():
    for direction, expected in (("forward", IPERF2_TCP), ("reverse", IPERF2_TCP_REVERSE)):
        spec = TestSpec(direction=direction, duration=1.0)
        header = iperf2.header_from_spec(spec, 5999, (0, 0), length_given=False)
        assert iperf2.encode_header(header, udp=False) == expected


@pytest.mark.parametrize(("trip_times", "isochronous"), list(IPERF2_UDP))
def test_our_udp_header_is_byte_for_byte_the_one_iperf2_writes(trip_times, isochronous):
    spec = TestSpec(protocol="udp", duration=1.0, rate=1048576.0, trip_times=trip_times,
                    frame_rate=30.0 if isochronous else 0.0, frame_load=1e6)
    header = iperf2.header_from_spec(spec, 5999, (0x6B092F88, 0x3F661), length_given=False)
    assert iperf2.encode_header(header, udp=True).hex() == IPERF2_UDP[trip_times, isochronous]


@given(st.booleans(), st.sampled_from(["forward", "reverse"]), st.booleans(),
       st.integers(1, 128), st.one_of(st.none(), st.integers(0, 2**31 - 1)),
       st.integers(0, 10**12), st.integers(0, 255))
def test_headers_we_write_read_back(udp, direction, trip_times, parallel, num_bytes, rate,
                                    tos):
    spec = TestSpec(protocol="udp" if udp else "tcp", direction=direction, parallel=parallel,
                    duration=None if num_bytes is not None else 7.5, num_bytes=num_bytes,
                    rate=float(rate), tos=tos, trip_times=trip_times)
    written = iperf2.header_from_spec(spec, 5001, (1_700_000_000, 123456))
    data = iperf2.encode_header(written, udp)
    if udp:
        data = iperf2.DATAGRAM.pack(1, 0, 0, 0) + data
    read = iperf2.parse_header(data, iperf2.DATAGRAM.size if udp else 0)
    assert (read.threads, read.duration, read.num_bytes, read.reverse, read.tos) == (
        parallel, written.duration, num_bytes, direction == "reverse", tos)
    assert read.trip_times == trip_times and read.start == (
        (1_700_000_000, 123456) if trip_times else (0, 0))
    # -b: for UDP, and for a sending server (TCP -R) as 2.1.8's client states it
    assert read.rate == (rate if udp or direction == "reverse" else 0)
    stated = (struct.unpack_from("!I", data, iperf2.DATAGRAM.size if udp else 0)[0]
              & iperf2.LEN_MASK) >> 1
    # the length the flags state is what was written (over UDP, up to the start)
    assert stated == len(data) - (iperf2.START_FQ.size if udp and trip_times else 0)


@given(st.binary(max_size=300), st.integers(0, 16))
def test_any_bytes_read_as_a_header_or_a_protocol_error(data, offset):
    try:
        header = iperf2.parse_header(data, offset)
    except ProtocolError:
        return
    assert 1 <= header.threads <= 128 and header.buffer_length >= 0


@given(st.integers(0, 2**40), st.floats(0, 1e6), st.integers(0, 2**40),
       st.integers(0, 2**40), st.integers(0, 2**40), st.floats(0, 10))
def test_server_reports_read_back(num_bytes, seconds, lost, out_of_order, datagrams, jitter):
    report = iperf2.ServerReport(num_bytes, seconds, lost, out_of_order, datagrams, jitter)
    echo = iperf2.datagram_header(-5, 1.5)
    read = iperf2.parse_report(iperf2.encode_report(report, echo))
    assert (read.num_bytes, read.lost, read.out_of_order, read.datagrams) == (
        num_bytes, lost, out_of_order, datagrams)
    assert read.seconds == pytest.approx(seconds, abs=2e-6)
    assert read.jitter == pytest.approx(jitter, abs=2e-6)


@given(st.integers(-(2**63) + 1, 2**63 - 1), st.floats(0, 2**32 - 1))
def test_datagram_numbers_both_widths(number, sent):
    data = iperf2.datagram_header(number, sent)
    assert iperf2.sequence(data, 0, wide=True)[0] == number
    assert iperf2.LAYOUT.unpack_from(data, 0)[2] == number & (2**64 - 1)


def test_a_tcp_stream_without_a_header_is_told_by_iperf2s_digits():
    digits = bytes(0x30 + i % 10 for i in range(40))
    assert [detect(digits[:n]) for n in (1, 9, 10, 40)] == [None, None, IPERF2, IPERF2]
    assert detect(digits[:9] + b"x") == CLASSIC and detect(bytes(40)) == CLASSIC
    assert detect(b"234567" * 6 + b"\0") == IPERF3  # a cookie has no 0 or 1


def test_a_bare_datagram_is_told_by_its_digits_and_its_number_width():
    """2.1.8 -C's first datagram (as iperf 2.0.10 on send them: 64-bit numbers), a 2.0.5
    one (12 bytes, then the digits), and what other clients send, which is not one."""
    now = 1795765639.0
    digits = bytes(0x30 + i % 10 for i in range(1470))
    wide = struct.pack("!iIIi", 1, int(now), 729556, 0) + digits[16:]
    narrow = struct.pack("!iII", 1, int(now), 729556) + digits[12:]
    assert iperf2.bare_header(wide, now) == iperf2.ClientHeader(flags=iperf2.SEQNO64B,
                                                                bare=True)
    assert iperf2.bare_header(narrow, now + 3600) == iperf2.ClientHeader(flags=0, bare=True)
    header = iperf2.bare_header(wide, now)
    assert header is not None and header.duration is None and header.num_bytes is None
    iperf3_data = struct.pack("!III", int(now), 729556, 1) + digits[12:]  # repeating payload
    for other in (iperf3_data, wide[:31], struct.pack("!i", -5) + wide[4:],
                  wide[:4] + struct.pack("!I", int(now) - 2 * 86_400) + wide[8:],
                  wide[:40] + b"x" + wide[41:], preface(CONTROL)[:64].ljust(64, b"\0")):
        assert iperf2.bare_header(other, now) is None


@given(st.text(COOKIE_ALPHABET, min_size=COOKIE_SIZE - 1, max_size=COOKIE_SIZE - 1))
def test_an_iperf3_cookie_is_never_taken_for_iperf2(cookie):
    data = cookie.encode() + b"\0"
    for end in range(1, len(data) + 1):
        assert detect(data[:end]) in (None, IPERF3)
    assert detect(data) == IPERF3


def test_other_clients_first_bytes_are_never_taken_for_iperf2():
    assert detect(bytes(64)) == CLASSIC  # a classic client's zeros
    assert detect(preface(CONTROL)) == NATIVE
    assert detect(IPERF2_TCP[:3]) is None and detect(IPERF2_TCP) == IPERF2
    assert detect(IPERF2_TCP_REVERSE) == IPERF2
    assert detect(struct.pack("!I", iperf2.VERSION1 | iperf2.RUN_NOW)) == IPERF2  # 2.0's -d


@given(st.integers(iperf2.BOUNCE_MIN, iperf2.BOUNCE_MAX), st.integers(0, 2**32 - 1),
       st.integers(0, 255), st.integers(0, iperf2.BOUNCE_HOLD_MAX),
       st.floats(1e9, 4e9), st.floats(0, 1e6), st.floats(0, 1e6))
def test_bounceback_messages_read_back_with_the_servers_times(size, number, tos, hold, sent,
                                                               read_after, held):
    message = iperf2.encode_bounce(iperf2.Bounce(size, 0, 0, tos, hold, 0.0))
    iperf2.renumber_bounce(message, number, sent)
    bounce = iperf2.parse_bounce(message)
    assert (bounce.size, bounce.number, bounce.tos, bounce.hold) == (size, number, tos, hold)
    assert len(message) == size and abs(bounce.sent - sent) < 2e-6
    iperf2.stamp_bounce(message, sent + read_after, sent + read_after + held)
    read_at, wrote_at = iperf2.bounce_server_times(message)
    assert abs(read_at - (sent + read_after)) < 2e-6
    assert abs(wrote_at - read_at - held) < 4e-6
    assert not iperf2.bounce_stops(message)


def test_a_bounceback_opening_is_iperf2s_and_a_classic_ones_zeros_are_not():
    message = bytes(iperf2.encode_bounce(iperf2.Bounce(100, 1, 0, 0, 0, 1.0)))
    assert [detect(message[:n]) for n in (1, 2, 3, 4, 40)] == [None, None, None, IPERF2,
                                                               IPERF2]
    assert detect(bytes(37)) == CLASSIC and detect(b"\x00\x00") == CLASSIC
    for bad in (63, iperf2.BOUNCE_MAX + 1):
        with pytest.raises(ProtocolError):
            iperf2.parse_bounce(message[:4] + struct.pack("!I", bad) + message[8:])


def _isoch_datagram(frame: int, size: int, remaining: int, length: int) -> bytes:
    data = bytearray(length)
    iperf2.ISOCH.pack_into(data, iperf2.ISOCH_OFFSET, 16666, 0, 0, max(0, frame - 1), frame,
                           size, remaining, 0)
    return bytes(data)


@given(st.lists(st.tuples(st.integers(1, 9000), st.booleans()), min_size=1, max_size=20),
       st.integers(200, 1470))
def test_isochronous_frames_by_bytes_are_whole_only_when_every_part_came(frames, length):
    """iperf2's frames: each datagram's (number, size, where it begins) read back from its
    fields; a frame is whole exactly when every part arrived; the one the sender stopped
    inside is neither whole nor lost."""
    from simpleperf.delays import Binning, FrameAccount

    account = FrameAccount(Binning())
    expected_whole = 0
    for number, (size, drop_one) in enumerate(frames, start=1):
        parts = [(begin, min(length, size - begin)) for begin in range(0, size, length)]
        dropped = 1 if drop_one and len(parts) > 1 else None  # the first part always comes
        for index, (begin, carried) in enumerate(parts):
            data = _isoch_datagram(number, size, size - begin, max(carried, 108))
            assert iperf2.frame_of(data, 0) == (number, size, begin)
            if index != dropped:
                account.feed(number, size, begin, 0.0, 0.001, carried)
        expected_whole += dropped is None
    assert account.counts() == (expected_whole, len(frames))
    cut = len(frames) + 1
    account.feed(cut, 5000, 0, 0.0, 0.001, min(length, 1000))
    account.cut_by_sender(cut)
    assert account.counts() == (expected_whole, len(frames))
    assert iperf2.frame_of(_isoch_datagram(0, 0, 0, 200), 0) is None  # the header's own
    assert iperf2.frame_of(bytes(100), 0) is None  # too short to say


@given(st.integers(1, 200_000), st.integers(iperf2.FRAME_DATAGRAM, 9000))
def test_our_frames_split_so_every_datagram_holds_the_frame_fields(drawn, length):
    """Our --isochronous frames to iperf2: datagrams of at most -l that each hold the frame
    fields, carrying the whole frame (grown only where -l leaves no other way), and each
    datagram's fields read back as where in the frame it begins."""
    size, parts = iperf2.frame_parts(drawn, length)
    assert sum(parts) == size >= drawn
    assert all(iperf2.FRAME_DATAGRAM <= part <= length for part in parts)
    assert size == max(drawn, iperf2.FRAME_DATAGRAM) or length < 2 * iperf2.FRAME_DATAGRAM
    begin = 0
    for part in parts:
        data = bytearray(part)
        iperf2.stamp_frame(data, 1 / 30, 1_700_000_000.25, 6, 7, size, size - begin)
        assert iperf2.frame_of(data, 0) == (7, size, begin)
        begin += part


def _burst(sent: float, size: int) -> bytes:
    data = bytearray(size)
    iperf2.stamp_burst(data, 0.0, sent, 1, size, 0)
    return bytes(data)


@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(56, 5000)), min_size=1,
                max_size=12), st.lists(st.integers(1, 4000), min_size=1, max_size=30))
def test_tcp_bursts_are_timed_once_each_whatever_the_reads(bursts, cuts):
    """TCP --trip-times: each burst's delay from its write time to the read that held its
    last byte, exactly one per burst however the stream is cut into reads."""
    stream = b"".join(_burst(1000.0 + micros / 1e6, size) for micros, size in bursts)
    reader, delays, at, turn = iperf2.BurstTimes(), [], 0, 0
    while at < len(stream):
        step = cuts[turn % len(cuts)]
        delays += reader.feed(stream[at:at + step], 2000.0)
        at, turn = at + step, turn + 1
    assert len(delays) == len(bursts) and not reader.broken
    for delay, (micros, _) in zip(delays, bursts, strict=True):
        assert delay == pytest.approx(1000.0 - micros / 1e6, abs=2e-6)
    broken = iperf2.BurstTimes()
    assert broken.feed(_burst(1.0, 56)[:48] + (10**9).to_bytes(4, "big"), 2.0) == []
    assert broken.broken  # a burst of a GB: no longer followed
