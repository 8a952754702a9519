"""One-way delays, histograms and frames as pure values (delays.py), and the TCP write
headers a receiver follows through its byte stream (engine/timed_writes.py)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simpleperf.command_line.cli import parse_args
from simpleperf.delays import Binning, DelayAccount, DelayLog, FrameAccount, pdf_line
from simpleperf.engine.timed_writes import WriteTimes
from simpleperf.errors import ProtocolError, SimpleperfError, UsageError
from simpleperf.protocol.events import Results
from simpleperf.protocol.native import WRITE_HEADER, parse_results

delays = st.floats(min_value=-0.01, max_value=2.0, allow_nan=False)


@given(st.lists(delays, min_size=1, max_size=200))
def test_moments_are_exact_and_every_delay_is_binned_once(values):
    account = DelayAccount()
    for value in values:
        account.add(value)
    assert account.count == len(values)
    assert sum(account.bins.values()) + account.below + account.above == len(values)
    assert account.minimum == min(values) and account.maximum == max(values)
    assert math.isclose(account.mean, sum(values) / len(values), abs_tol=1e-9)
    assert account.below == sum(1 for v in values if v < 0)
    assert account.above == sum(1 for v in values if v >= 1.0)  # 10000 bins of 100 us


@given(st.floats(min_value=-0.005, max_value=1.2), st.floats(min_value=-2e-3, max_value=2e-3),
       st.integers(min_value=1, max_value=300))
def test_a_run_of_evenly_spaced_delays_counts_as_each_one_would(first, step, count):
    run, each = DelayAccount(), DelayAccount()
    run.add_run(first, step, count)
    for i in range(count):
        each.add(first + i * step)
    assert run.count == each.count and run.minimum == pytest.approx(each.minimum)
    assert run.mean == pytest.approx(each.mean, abs=1e-9)
    assert run.stdev == pytest.approx(each.stdev, abs=1e-6)
    assert (run.bins, run.below, run.above) == (each.bins, each.below, each.above)


@given(st.lists(delays, max_size=100), st.lists(delays, max_size=100))
def test_merging_two_accounts_is_adding_both(first, second):
    a, b, both = DelayAccount(), DelayAccount(), DelayAccount()
    for value in first:
        a.add(value)
        both.add(value)
    for value in second:
        b.add(value)
        both.add(value)
    a.merge(b)
    assert a.count == both.count and a.bins == both.bins
    assert (a.below, a.above) == (both.below, both.above)


def test_percentiles_are_within_a_bin_of_the_truth():
    account = DelayAccount(Binning(1e-4, 10000))
    values = [0.010 + i * 1e-5 for i in range(1000)]  # 10 ms to 20 ms
    for value in values:
        account.add(value)
    assert abs(account.percentile(50) - 0.015) <= 1e-4
    assert abs(account.percentile(99) - 0.0199) <= 1e-4
    assert account.percentile(100) <= account.maximum


def test_a_log_closes_intervals_into_its_total():
    log = DelayLog(Binning())
    log.current.add(0.001)
    first = log.close_interval()
    log.current.add(0.003)
    assert first.count == 1 and log.current.count == 1
    assert log.total().count == 2 and log.total().maximum == 0.003
    log.close_interval()
    log.current.add(0.5)
    assert log.close_interval(keep=False).count == 1  # left out (-O): shown, not totalled
    assert log.total().count == 2 and log.total().maximum == 0.003


def test_the_pdf_line_reads_as_iperf2s():
    account = DelayAccount()
    for value in [0.00005] * 850 + [0.00015]:
        account.add(value)
    line = pdf_line(account, "T8")
    assert line.startswith("T8-PDF: bin(w=100us):cnt(851)=1:850,2:1 (5.00/95.00/99.7%=1/1/")
    assert line.endswith("obl/obu=0/0)")
    assert "(0.00/99.99/99.7%=1/2/1," in pdf_line(account, "T8", (0.0, 99.99))


def test_a_peers_account_round_trips_and_a_malformed_one_is_refused():
    account = DelayAccount()
    for value in (0.01, 0.02, 0.03, -0.001, 5.0):
        account.add(value)
    back = DelayAccount.from_result(account.to_result(), 100)
    assert back.summary() == account.summary() and back.bins == account.bins
    without_bins = DelayAccount.from_result(account.to_result(with_bins=False), 100)
    assert without_bins.summary() == pytest.approx(account.summary())
    for broken in ({}, {**account.to_result(), "count": -1},
                   {**account.to_result(), "bins": [[0, 1]]},
                   {**account.to_result(), "bins": [[1, 1]] * 101},
                   {**account.to_result(), "bin_width_ms": float("nan")},
                   {**account.to_result(with_bins=False), "percentiles": "x"}):
        with pytest.raises(ValueError):
            DelayAccount.from_result(broken, 100)


def test_results_carry_accounts_and_refuse_a_malformed_one():
    account = DelayAccount()
    account.add(0.004)
    message = Results(({"stream": 1, "bytes": 10, "seconds": 1.0, "delays": account},)
                      ).to_message()
    parsed = parse_results(message)
    assert parsed[1]["delays"].summary() == account.summary()
    message["streams"][0]["delays"]["bins"] = "many"
    with pytest.raises(ProtocolError, match="delays"):
        parse_results(message)


def test_results_stay_within_a_message_when_histograms_are_wide():
    accounts = []
    for stream in range(1, 9):
        account = DelayAccount(Binning(1e-6, 100000))
        for i in range(3000):
            account.add(i * 3e-5)
        accounts.append({"stream": stream, "bytes": 1, "seconds": 1.0, "delays": account})
    message = Results(tuple(accounts)).to_message()
    parsed = parse_results(message)
    assert all(entry["delays"].count == 3000 for entry in parsed.values())
    assert parsed[1]["delays"].percentile(50) == pytest.approx(accounts[0]["delays"]
                                                              .percentile(50))


def test_frames_whole_lost_and_forged():
    frames = FrameAccount(Binning())
    for index in range(3):
        frames.feed(1, 3, index, 10.0, 10.004)
    frames.feed(2, 3, 0, 10.1, 10.101)  # two of its datagrams never come
    for index in range(2):
        frames.feed(4, 2, index, 10.3, 10.302)  # frame 3 never comes at all
    frames.feed(4, 2, 1, 10.3, 10.303)  # a duplicate of a whole frame
    frames.feed(10**6, 1, 0, 10.4, 10.4)  # forged: far beyond the highest
    frames.feed(5, 2, 2, 10.4, 10.4)  # index beyond its frame's datagrams
    assert (frames.whole, frames.lost, frames.bad, frames.highest) == (2, 2, 2, 4)
    assert frames.log.total().count == 2
    assert frames.log.total().maximum == pytest.approx(0.004)


def test_o_leaves_out_the_first_frames_by_number_whenever_they_arrive():
    """-O's frames are the first ones by number (TestSpec.omitted_frames), as the sender
    counts them: frame 2, left out, is neither whole nor lost however late it completes;
    frame 3 is measured even if it came before either end's clock closed the omitted
    seconds."""
    frames = FrameAccount(Binning(), left_out=2)
    for frame in (1, 3):
        frames.feed(frame, 1, 0, 10.0, 10.001)
    frames.feed(2, 2, 0, 10.1, 10.101)
    frames.feed(4, 2, 0, 10.2, 10.201)  # never completes: lost
    frames.feed(2, 2, 1, 10.1, 10.302)
    frames.feed(6, 1, 0, 10.3, 10.304)  # 5 never came: lost
    assert (frames.whole, frames.lost) == (2, 2)
    assert frames.log.total().count == 2


@settings(max_examples=80)
@given(st.lists(st.tuples(st.integers(1, 40), st.integers(0, 2)), max_size=120),
       st.integers(0, 45))
def test_frames_left_out_and_measured_add_up(arrivals, left_out):
    """Whatever the order and loss, the measured part's frames whole and lost are counts
    (never negative) of the frames numbered after the left out ones, and add up to them."""
    frames = FrameAccount(Binning(), left_out)
    for frame, index in arrivals:
        frames.feed(frame, 3, index, 1.0, 1.001)
    assert frames.whole >= 0 and frames.lost >= 0
    assert frames.whole <= len({f for f, _ in arrivals if f > left_out})
    assert frames.whole + frames.lost == max(0, frames.highest - left_out)
    assert frames.log.total().count == frames.whole


def _stamped_stream(lengths: list[int], sent_ns: int, left_ns: int) -> bytes:
    """Each write reports that the one before it left the sender's kernel at `left_ns`."""
    stream = b""
    for number, length in enumerate(lengths, 1):
        departed = (number - 1, left_ns) if number > 1 else (0, 0)
        stream += (WRITE_HEADER.pack(sent_ns, number, length, *departed)
                   + bytes(length - WRITE_HEADER.size))
    return stream


@settings(max_examples=60)
@given(st.lists(st.integers(min_value=WRITE_HEADER.size, max_value=3000), min_size=1,
                max_size=20),
       st.lists(st.integers(min_value=1, max_value=5000), max_size=30))
def test_writes_are_followed_through_reads_split_anywhere(lengths, cuts):
    """Write to read for every write; the path's delay (from the kernel's departure, which a
    later header reports) for every write but the last, whose departure nobody reports."""
    data = _stamped_stream(lengths, 1_000_000_000, 1_100_000_000)
    log, frames, path = DelayLog(Binning()), FrameAccount(Binning()), DelayLog(Binning())
    follower = WriteTimes(log, frames, path)
    position = 0
    for cut in cuts + [len(data)]:
        piece = data[position:position + cut]
        follower.feed(memoryview(piece), 1.25)
        position += len(piece)
    assert log.total().count == len(lengths)
    assert log.total().maximum == pytest.approx(0.25)
    assert frames.whole == len(lengths) and frames.lost == 0
    assert path.total().count == len(lengths) - 1
    if len(lengths) > 1:
        assert path.total().maximum == pytest.approx(0.15)
        assert path.total().minimum == pytest.approx(0.15)


def test_a_departure_of_a_write_no_longer_kept_or_not_yet_read_is_passed_over():
    """A header may name a write whose arrival was dropped from the bounded memory (or a
    forged number): no delay is made up, and the next real one still counts."""
    path = DelayLog(Binning())
    follower = WriteTimes(DelayLog(Binning()), None, path)
    size = WRITE_HEADER.size
    follower.feed(memoryview(WRITE_HEADER.pack(0, 1, size, 0, 0)), 1.0)
    follower.feed(memoryview(WRITE_HEADER.pack(0, 2, size, 7, 500_000_000)), 2.0)
    assert path.total().count == 0  # write 7 has not arrived
    follower.feed(memoryview(WRITE_HEADER.pack(0, 3, size, 2, 1_500_000_000)), 3.0)
    assert path.total().count == 1 and path.total().maximum == pytest.approx(0.5)


def test_a_write_header_that_lies_ends_the_stream_with_one_line():
    follower = WriteTimes(DelayLog(Binning()))
    with pytest.raises(SimpleperfError, match="not a simpleperf sender"):
        follower.feed(memoryview(WRITE_HEADER.pack(0, 1, 3, 0, 0)), 1.0)


@pytest.mark.parametrize("argv, words", [
    (["--histograms"], "add --trip-times or --isochronous"),
    (["--trip-times", "--histograms=abc"], "--histograms must be"),
    (["--trip-times", "--histograms=0u,10"], "bin width"),
    (["--trip-times", "--histograms=1m,0"], "bins must be"),
    (["--trip-times", "--histograms=1m,10,90,10"], "LOWER < UPPER"),
    (["--isochronous=0:20M"], "frames a second"),
    (["--isochronous=60:-5"], "--isochronous must be"),
    (["--isochronous=60:20M", "-b", "5M"], "leave out -b"),
    (["--isochronous", "-u", "-l", "20"], "at least 32 bytes"),
    (["--trip-times", "-l", "8"], f"at least {WRITE_HEADER.size} bytes"),
    (["--trip-times", "--iperf3"], "--trip-times needs a simpleperf server: an iperf3 server "
     "measures no one-way delay"),
    (["--isochronous", "-R", "--iperf3"], "--trip-times and --isochronous need a simpleperf"),
    (["--trip-times", "--histograms=1m,500", "--iperf3"],
     "--trip-times and --histograms need a simpleperf server"),
    (["--trip-times", "-Z"], "cannot be combined with -Z"),
])
def test_latency_flags_refuse_what_cannot_be_done_in_one_line(argv, words):
    with pytest.raises(UsageError, match=words.replace("(", r"\(")):
        parse_args(["-c", "127.0.0.1", *argv])


def test_latency_flags_take_iperf2s_forms():
    options = parse_args(["-c", "127.0.0.1", "--isochronous=30:10M,1M", "--histograms=1m,500"])
    test = options.test
    assert (test.frame_rate, test.frame_load, test.frame_stdev) == (30, 10e6, 1e6)
    assert (test.histogram_bin_width, test.histogram_bins) == (1e-3, 500)
    assert options.needs_native
    default = parse_args(["-c", "127.0.0.1", "--isochronous"])
    assert (default.test.frame_rate, default.test.frame_load) == (60, 20e6)
    with pytest.raises(UsageError, match="is a client option"):
        parse_args(["-s", "--trip-times"])


def test_frame_sizes_are_log_normal_with_the_asked_mean_and_deviation():
    import statistics
    import threading

    from simpleperf.description.testspec import TestSpec
    from simpleperf.engine.frames import FrameClock

    spec = TestSpec(protocol="udp", frame_rate=50.0, frame_load=20e6, frame_stdev=4e6)
    clock = FrameClock(spec, start=0.0, seed=7)
    sizes = [clock.size() for _ in range(20000)]
    assert statistics.fmean(sizes) == pytest.approx(20e6 / 8 / 50, rel=0.03)
    assert statistics.stdev(sizes) == pytest.approx(4e6 / 8 / 50, rel=0.1)
    steady = FrameClock(TestSpec(protocol="udp", frame_rate=50.0, frame_load=20e6), 0.0)
    assert {steady.size() for _ in range(10)} == {50000}
    # slots every 20 ms: at 50 ms the slots of 20 and 40 ms have passed, so the frame goes
    # in the latest (40 ms) and the one of 20 ms slips; frame numbers have no gaps
    late = FrameClock(spec, start=0.0)
    never = threading.Event()
    assert late.next_size(0.0, never) is not None and late.sent == 1
    assert late.next_size(0.05, never) is not None
    assert (late.sent, late.slipped, late.slot) == (2, 1, 3)
