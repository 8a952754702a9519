"""An unlimited UDP sender paced by its receiver's drops (engine/udp_pace.py): the rule
alone, and the feedback over real sockets on loopback."""

from __future__ import annotations

import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simpleperf.engine import udp_pace
from simpleperf.engine.udp_pace import BACK_OFF, PROBE, ReceiverPace
from simpleperf.protocol.native import PACE_FEEDBACK, PACE_FEEDBACK_MAGIC

MS = 1_000_000  # nanoseconds


def test_unpaced_until_the_receiver_drops_then_paced_below_what_it_read():
    pace = ReceiverPace(1000)
    for tick in range(5):
        pace.feedback(0, tick * 10_000_000, tick * 10 * MS)  # 8 Gbit/s read, no drops
    assert pace.rate is None and pace.due(1.0, 640) == 640
    pace.feedback(3, 50_000_000, 50 * MS)
    assert pace.rate == pytest.approx(BACK_OFF * 8e9)
    pace.feedback(3, 60_000_000, 60 * MS)  # no new drops: it speeds up
    assert pace.rate == pytest.approx(BACK_OFF * 8e9 * PROBE)
    pace.feedback(3, 55_000_000, 70 * MS)  # fewer bytes than before: not this test's
    pace.feedback(9, 70_000_000, 55 * MS)  # older than the last: UDP reordered it
    assert pace.rate == pytest.approx(BACK_OFF * 8e9 * PROBE) and pace.cuts == 1


def test_the_pace_follows_the_last_tenth_of_a_second_of_reading():
    pace = ReceiverPace(1000)
    read = 0
    for tick in range(30):  # 8 Gbit/s for 0.2 s, then 2 Gbit/s for 0.1 s
        read += 10_000_000 if tick < 20 else 2_500_000
        pace.feedback(0, read, (tick + 1) * 10 * MS)
    pace.feedback(1, read + 2_500_000, 310 * MS)
    assert pace.rate == pytest.approx(BACK_OFF * 2e9, rel=0.01)


def test_a_paced_sender_sends_what_the_rate_allows_in_whole_batches():
    pace = ReceiverPace(1000)
    pace.feedback(0, 0, 0)
    pace.feedback(1, 10_000_000, 10 * MS)  # read 8 Gbit/s: paced at 7.2, 900 per ms
    assert pace.due(100.0, 5000) == 0  # nothing owed yet
    assert pace.due(100.00025, 5000) in (224, 225)  # a quarter millisecond, floating point
    pace.sent(224, 100.00025)
    assert pace.due(101.0, 5000) == 450  # a long pause owes half a millisecond's, no more
    assert pace.due(101.0, 100) == 100  # and never more than is asked


def test_one_cut_a_read_window_and_unpaced_again_after_a_quiet_half_second():
    pace = ReceiverPace(1000)
    read = 0
    for tick in range(1, 80):
        read += 10_000_000
        dropped = 0 if tick < 10 else 1 if tick < 12 else 2
        pace.feedback(dropped, read, tick * 10 * MS)
        if tick == 12:  # drops 20 ms after the cut: the same window, no second cut
            assert pace.cuts == 1
        if tick == 55:
            assert pace.rate is not None
    assert pace.rate is None  # 0.5 s after the cut without a drop


@settings(max_examples=100)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 20_000_000),
                          st.integers(1, 30 * MS)), max_size=60))
def test_the_pace_is_never_below_the_least_nor_grows_without_feedback(steps):
    pace = ReceiverPace(1470)
    dropped = read = clock = 0
    for more_drops, more_read, later in steps:
        dropped, read, clock = dropped + more_drops, read + more_read, clock + later
        before = pace.rate
        pace.feedback(dropped, read, clock)
        assert pace.rate is None or pace.rate >= udp_pace.MIN_RATE
        if before is not None and more_drops == 0 and pace.rate is not None:
            assert pace.rate == pytest.approx(before * PROBE)


def test_feedback_crosses_loopback_and_strangers_are_ignored():
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sender.bind(("127.0.0.1", 0))
        receiver.bind(("127.0.0.1", 0))
        sender.connect(receiver.getsockname())
        receiver.connect(sender.getsockname())
        key = b"K" * 8
        teller = udp_pace.Teller(receiver, key)
        teller.tell_if_due(1.0, 10_000_000, 0)
        teller.tell_if_due(1.001, 20_000_000, 5)  # not due yet: not sent
        teller.tell_if_due(1.02, 20_000_000, 5)
        receiver.send(PACE_FEEDBACK.pack(b"XXXX", 99, 1, 1) + key)  # not feedback
        receiver.send(PACE_FEEDBACK.pack(PACE_FEEDBACK_MAGIC, 99, 1, 1))  # without the key
        stranger.sendto(PACE_FEEDBACK.pack(PACE_FEEDBACK_MAGIC, 99, 1, 1) + key,
                        sender.getsockname())  # another address: the kernel drops it
        pace = ReceiverPace(1000)
        udp_pace.hear(sender, pace, key)
        assert pace.dropped == 5 and pace.cuts == 1 and pace.rate is not None
        udp_pace.hear(sender, pace, key)  # nothing more waits: returns at once
    finally:
        for sock in (sender, receiver, stranger):
            sock.close()


def test_a_receiver_that_was_not_scheduled_halves_the_pace_at_most():
    pace = ReceiverPace(1000)
    for tick in range(11):  # the sender sends 8 Gbit/s (a million datagrams a second)
        pace.sent(10_000, tick * 0.01)
    pace.feedback(0, 0, 0)
    pace.feedback(5, 1_000_000, 100 * MS)  # it read 80 Mbit/s's worth, and dropped
    assert pace.rate == pytest.approx(udp_pace.MAX_CUT * 8e9)


def _steady(pace: ReceiverPace, ticks: range, dropped: int = 0) -> None:
    """The sender sends 8 Gbit/s of 1000-byte datagrams and its receiver reports every
    10 ms (its clock 5 s apart from ours), reading all of it and `dropped` so far."""
    for tick in ticks:
        pace.sent(10_000, tick * 0.01)
        pace.feedback(dropped, tick * 10_000_000, (5000 + tick * 10) * MS, tick * 0.01)


def test_a_forged_report_with_its_clock_far_ahead_does_not_silence_the_receiver():
    """One 28-byte report from the receiver's address, its clock at 2**64 - 1, made every
    real report look older: the sender never heard a drop again and ran unpaced."""
    pace = ReceiverPace(1000)
    _steady(pace, range(1, 10))
    pace.feedback(0, 90_000_000, (1 << 64) - 1, 0.095)
    _steady(pace, range(10, 20), dropped=5)
    assert pace.dropped == 5 and pace.cuts == 1 and pace.rate is not None


def test_a_forged_first_report_is_forgotten_within_a_quarter_second():
    pace = ReceiverPace(1000)
    pace.sent(10, 0.0)
    pace.feedback(0, 5000, (1 << 64) - 1, 0.0)  # before any real one: nothing to judge by
    _steady(pace, range(1, 60), dropped=0)
    _steady(pace, range(60, 70), dropped=3)
    assert pace.dropped == 3 and pace.cuts == 1


def test_reports_of_more_than_was_sent_are_not_the_receivers():
    pace = ReceiverPace(1000)
    _steady(pace, range(1, 5))
    pace.feedback(10**9, 10**15, 5045 * MS, 0.045)  # drops and bytes never sent
    assert pace.dropped == 0 and pace.rate is None
