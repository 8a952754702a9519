"""UDP loss, reordering and jitter accounting: iperf3's and RFC 1889's definitions."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simpleperf.stats import UdpReceiveAccount, percentile, summarise_rtt


def test_gaps_are_lost_and_late_packets_take_one_back():
    account = UdpReceiveAccount()
    for number in (1, 2, 5, 3, 6):
        account.feed(number, 0.0, 0.0)
    # 3 and 4 went missing at 5; 3 came late: out of order, and no longer lost.
    assert (account.lost, account.out_of_order, account.packets, account.received) == (
        1, 1, 6, 5)


def test_jitter_is_rfc1889_smoothing_of_transit_differences():
    account = UdpReceiveAccount()
    account.feed(1, 0.000, 0.010)  # transit 10 ms: only sets the reference
    account.feed(2, 0.020, 0.034)  # transit 14 ms: D = 4 ms
    account.feed(3, 0.040, 0.050)  # transit 10 ms: D = 4 ms
    first = 0.004 / 16
    assert abs(account.jitter - (first + (0.004 - first) / 16)) < 1e-12


def test_a_clock_offset_between_hosts_never_enters_jitter():
    account = UdpReceiveAccount()
    for number in range(1, 100):
        account.feed(number, number * 0.001, 1000.0 + number * 0.001)
    assert account.jitter < 1e-9


def test_queue_growth_follows_the_one_way_delay():
    account = UdpReceiveAccount()
    for number in range(1, 321):  # delay grows 0.1 ms per packet: 32 ms over 320 packets
        account.feed(number, number * 0.001, number * 0.001 + number * 0.0001)
    # the least delay of the last 0.1 s (from packet 225 on) against the first packet's
    assert account.queue_growth == pytest.approx(0.0224, abs=1e-4)


def test_a_burst_that_drains_is_no_standing_queue():
    """A sender stalled near the end, then catching up: its last packets wait 4 to 8 ms in
    a queue that is draining, not growing; the least delay of the last 0.1 s is where it
    started."""
    account = UdpReceiveAccount()
    for number in range(1, 1001):  # 1 ms apart, 5 ms base delay
        sent = number * 0.001
        backlog = 0.008 - 0.1 * (sent - 0.96) if sent >= 0.96 else 0.0
        account.feed(number, sent, sent + 0.005 + backlog)
    growth = account.queue_growth
    assert growth is not None and abs(growth) < 1e-9


runs = st.lists(st.tuples(st.integers(1, 300), st.integers(1, 70),
                          st.floats(0, 10), st.floats(0, 1)), min_size=1, max_size=30)


@settings(max_examples=500, deadline=None)
@given(runs)
def test_a_batch_at_once_equals_packet_by_packet(batches):
    fast, slow = UdpReceiveAccount(), UdpReceiveAccount()
    for first, count, sent, delay in batches:
        fast.feed_run(first, count, sent, sent + delay)
        slow.feed_many([(first + i, sent) for i in range(count)], sent + delay)
    for name in ("highest", "lost", "out_of_order", "received"):
        assert getattr(fast, name) == getattr(slow, name), name
    for name in ("first_window_min", "last_window_min"):
        assert getattr(fast.growth, name) == getattr(slow.growth, name), name
    assert abs(fast.jitter - slow.jitter) < 1e-9


spaced_runs = st.lists(st.tuples(st.integers(1, 300), st.integers(1, 70), st.floats(0, 10),
                                 st.floats(0, 1), st.floats(0, 1e-4)), min_size=1, max_size=30)


@settings(max_examples=500, deadline=None)
@given(spaced_runs)
def test_a_batch_stamped_in_order_equals_packet_by_packet(batches):
    """iperf3 3.21's --gsro stamps each datagram of one send as it fills it: a run of evenly
    spaced send times, arriving together, is accounted in one step."""
    fast, slow = UdpReceiveAccount(), UdpReceiveAccount()
    for first, count, sent, delay, spacing in batches:
        last = sent + (count - 1) * spacing
        fast.feed_run(first, count, sent, last + delay, last)
        slow.feed_many([(first + i, sent + i * spacing) for i in range(count)], last + delay)
    for name in ("highest", "lost", "out_of_order", "received"):
        assert getattr(fast, name) == getattr(slow, name), name
    for name in ("first_window_min", "last_window_min"):
        a, b = getattr(fast.growth, name), getattr(slow.growth, name)
        assert (a is None and b is None) or abs(a - b) < 1e-9, name
    assert abs(fast.jitter - slow.jitter) < 1e-9


def test_percentiles_and_rtt_summary():
    assert percentile([1, 2, 3, 4], 0.5) == 2.5
    assert percentile([5], 0.99) == 5
    summary = summarise_rtt([10.0, 20.0, 30.0, 40.0])
    assert (summary.minimum, summary.average, summary.maximum) == (10.0, 25.0, 40.0)
    assert abs(summary.mdev - 11.180339887) < 1e-6  # ping's mdev: population deviation
    assert summary.trimmed == 20.0  # the highest 5 % left out: int(4 x 0.95) = 3 kept
    assert summary.rpm == 60000 / 20.0
    assert summarise_rtt([]) is None


def test_rate_search_converges_just_under_a_path_it_does_not_know():
    from simpleperf.native.rate_probe import best, search

    capacity = 37.3e6

    def path(rate: float) -> tuple[float, float, float]:
        # Above capacity the queue grows (2 s trials, ms) and, past the queue, packets drop.
        excess = max(0.0, rate - capacity)
        return min(rate, capacity), 100 * excess / rate, 2000 * excess / capacity

    trials = search(path, threshold=1.0)
    found = best(trials)
    assert found is not None and 0.95 * capacity <= found.offered <= capacity
    assert len(trials) <= 16
    assert best(search(lambda rate: (0.0, 100.0, None), threshold=1.0)) is None


def test_one_unlucky_trial_below_the_path_rate_does_not_settle_the_search_low():
    from simpleperf.native.rate_probe import best, search

    capacity, unlucky = 19.4e6, [True]

    def path(rate: float) -> tuple[float, float, float]:
        if rate < capacity and rate > 0.8 * capacity and unlucky:  # a busy moment, once
            unlucky.clear()
            return 0.85 * rate, 5.0, 20.0
        excess = max(0.0, rate - capacity)
        return min(rate, capacity), 100 * excess / rate, 700 * excess / capacity

    trials = search(path, threshold=1.0)
    found = best(trials)
    assert not unlucky and found is not None and 0.95 * capacity <= found.offered < capacity
    assert [t.offered for t in trials].count(trials[-1].offered) <= 2


def _fed(numbers):
    account = UdpReceiveAccount()
    for number in numbers:
        account.feed(number, 0.0, 0.001)
    return account


def test_one_forged_far_datagram_is_one_bad_datagram_not_millions_lost():
    forged = _fed([*range(1, 101), 2**40, *range(101, 201)])
    assert (forged.packets, forged.settled_lost, forged.bad) == (200, 0, 1)
    real_gap = _fed([*range(1, 101), *range(5000, 5101)])
    assert (real_gap.packets, real_gap.settled_lost, real_gap.bad) == (5100, 4899, 0)
    unconfirmed = _fed([*range(1, 101), 2**40])
    assert (unconfirmed.packets, unconfirmed.settled_lost) == (100, 0)


@given(st.lists(st.integers(-20, 50), min_size=2, max_size=300), st.integers(0, 300),
       st.integers(1, 2**62))
def test_a_stray_far_number_anywhere_changes_nothing_but_bad(steps, where, jump):
    """Honest numbers move by small steps (reordering, small losses); one stray far
    number inserted anywhere leaves packets and loss as they were."""
    numbers = [max(1, 1 + sum(steps[:i + 1])) for i in range(len(steps))]
    honest = _fed(numbers)
    at = where % (len(numbers) + 1)
    stray = honest.highest + UdpReceiveAccount.JUMP_LIMIT + jump
    # The stray is followed by a datagram carrying on from before (or nothing, at the end).
    tainted = _fed([*numbers[:at], stray, *numbers[at:]])
    assert (tainted.packets, tainted.settled_lost) == (honest.packets, honest.settled_lost)


def test_the_gap_before_a_message_the_socket_queued_after_dropping_is_the_hosts():
    account = UdpReceiveAccount()
    account.feed_many(((n, 1.0) for n in range(1, 11)), 1.001)
    assert account.host_gap_begins(0) is None  # no drops yet: nothing to tell
    account.feed_many(((n, 1.0) for n in range(14, 21)), 1.001)  # 11-13: the network's
    before = account.host_gap_begins(2)  # the socket dropped 2 messages before this one
    assert before == 3
    account.feed_many(((n, 1.0) for n in range(30, 41)), 1.001)  # 21-29: the host's
    account.host_gap_ends(before)
    assert account.host_gap_begins(2) is None  # the same count: no new drops
    account.feed(45, 1.0, 1.001)  # 41-44: the network's again
    assert (account.lost, account.host_dropped) == (3 + 9 + 4, 9)
