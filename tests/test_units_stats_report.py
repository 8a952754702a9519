"""Pure pieces: unit parsing and formatting, interval boundaries, fairness, table rows."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from simpleperf.description.transports import TCP, UDP
from simpleperf.engine.clock import IntervalClock
from simpleperf.report import classic as table
from simpleperf.stats import (
    jain_index,
    mean_confidence,
    rates_while_all_ran,
)
from simpleperf.units import format_amount, format_mbps, parse_rate, parse_size


@pytest.mark.parametrize("text,expected", [
    ("10MB", 10_000_000), ("10mb", 10_000_000), ("1KB", 1000), ("5B", 5), ("7", 7),
    ("2.5MB", 2_500_000), ("1G", 10**9), ("64K", 64_000),
])
def test_parse_size_is_decimal(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "MB", "10 XB", "1e3", "-1MB", "10MBB"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError):
        parse_size(text)


def test_parse_rate():
    assert parse_rate("100M") == 100e6
    assert parse_rate("1.5Gbps") == 1.5e9
    assert parse_rate("64k") == 64e3


def test_formatting_matches_the_classic_columns():
    assert format_amount(90_400_000, "MB") == "90 MB"
    assert format_amount(1234, "B") == "1234 B"
    assert format_amount(10_000_000, "KB") == "10000 KB"
    assert format_mbps(88_156_250, 25.0) == "28.21 Mbps"
    assert table.row("10.0.0.2:52326", 0.0, 25.0, 90_000_000, "MB") == (
        "10.0.0.2:52326      0.0 - 25.0          90 MB               28.80 Mbps")
    assert table.header("Received") == (
        "ID                  Interval            Received            Rate")
    assert table.header("Transfer") == (
        "ID                  Interval            Transfer            Bandwidth")
    assert table.server_banner(8088).splitlines() == [
        "-" * 45, "A simpleperf server is listening on port 8088", "-" * 45]
    assert table.client_banner("10.0.5.2", 8088).splitlines() == [
        "-" * 90, "A simpleperf client connecting to server 10.0.5.2, port 8088", "-" * 90]


def test_interval_boundaries():
    assert IntervalClock(5, end=25).closed_by(12.0) == [5, 10]
    assert IntervalClock(5, end=25).closed_by(25.0) == [5, 10, 15, 20, 25]
    assert IntervalClock(5, end=7).closed_by(7.0) == [5, 7]
    assert IntervalClock(0.1).closed_by(0.35) == [0.1, 0.2, 0.3]


def test_the_interval_clock_steps_through_omitting_then_from_its_end():
    clock = IntervalClock(1, omit=2.5, end=5.5)
    assert [clock.mark(i) for i in range(5)] == [1, 2, 2.5, 3.5, 4.5]
    assert [clock.is_omitted(clock.mark(i)) for i in range(4)] == [True, True, True, False]
    assert clock.closed_by(5.5) == [1, 2, 2.5, 3.5, 4.5, 5.5]
    assert clock.is_final(5.5) and not clock.is_final(4.5)


def test_jain_index():
    assert jain_index([10, 10, 10]) == pytest.approx(1.0)
    assert jain_index([1, 0, 0, 0]) == pytest.approx(0.25)
    assert jain_index([12.5, 16.1]) == pytest.approx((28.6 ** 2) / (2 * (12.5**2 + 16.1**2)))
    with pytest.raises(ValueError):
        jain_index([])


@given(st.lists(st.floats(min_value=0, max_value=1e12), min_size=1, max_size=50))
@example([1.4667056381269665e-160] * 2)  # squares subnormal: 1.0000574 before scaling
@example([5e-324, 1e-320, 0.0])
def test_jain_index_is_between_1_over_n_and_1(values):
    index = jain_index(values)
    assert 1 / len(values) - 1e-9 <= index <= 1 + 1e-9


def test_mean_confidence_uses_students_t():
    assert mean_confidence([5.0]) == (5.0, 0.0)
    mean, half = mean_confidence([10.0, 12.0, 11.0])
    assert mean == 11.0 and half == pytest.approx(4.303 * 1.0 / 3 ** 0.5)
    with pytest.raises(ValueError):
        mean_confidence([])


def test_native_udp_row_shows_loss_and_reordering():
    from simpleperf.report import native

    line = native.row("10.0.0.1:5000", 0.0, 1.0, {"bytes": 1_000_000, "packets": 1000,
                                                  "lost": 5, "jitter_ms": 0.25,
                                                  "out_of_order": 3},
                      "MB", UDP, False, "receiver")
    assert "0.250 ms" in line and "5/1000 (0.5%), 3 out of order" in line
    assert line.endswith("receiver")
    assert "out of order" not in native.row("x", 0.0, 1.0, {"bytes": 1, "packets": 1,
                                                            "lost": 0}, "MB", UDP, False)


def test_rates_while_all_ran_count_only_the_common_time():
    # Flow a began 0.5 s before b and had the path alone until then.
    early = [(0.0, 1.0, 1000), (1.0, 2.0, 500), (2.0, 3.0, 500)]
    late = [(0.5, 1.5, 200), (1.5, 2.5, 500), (2.5, 3.5, 400)]
    rates = rates_while_all_ran([early, late])
    # All ran in [0.5, 3]: a has half of its first interval in it, b half of its last.
    assert rates == [pytest.approx((500 + 500 + 500) * 8 / 2.5),
                     pytest.approx((200 + 500 + 200) * 8 / 2.5)]
    assert rates_while_all_ran([[(0.0, 1.0, 10)], [(2.0, 3.0, 10)]]) == [None, None]
    with pytest.raises(ValueError):
        rates_while_all_ran([early, []])


@pytest.mark.parametrize("num_bytes,seconds,unit,amount,rate", [
    (1.68 * 2**30, 1.0, "a", "1.68 GBytes", "14.4 Gbits/sec"),  # iperf3's own figures
    (1.8e9, 1.0, "g", "1.68 GBytes", "14.4 Gbits/sec"),
    (1.8e9, 1.0, "m", "1.68 GBytes", "14400 Mbits/sec"),
    (1.8e9, 1.0, "G", "1.68 GBytes", "1.68 GBytes/sec"),
    (238 * 2**20, 2.0, "k", "238 MBytes", "998244 Kbits/sec"),
    (125_000, 1.0, "", "122 KBytes", "1.00 Mbits/sec"),
    (500, 1.0, "A", "500 Bytes", "500 Bytes/sec"),
])
def test_iperf3_units_scale_as_iperf3_prints_them(num_bytes, seconds, unit, amount, rate):
    from simpleperf.report import native
    from simpleperf.units import format_iperf3_amount, format_iperf3_rate

    assert format_iperf3_amount(num_bytes) == amount
    assert format_iperf3_rate(num_bytes, seconds, unit) == rate
    line = native.row("x", 0.0, seconds, {"bytes": num_bytes}, unit, TCP, False)
    assert amount in line and rate in line


def test_classic_units_keep_the_classic_columns_everywhere():
    from simpleperf.command_line.cli import parse_args
    from simpleperf.report import native

    line = native.row("x", 0.0, 2.0, {"bytes": 3_000_000}, "KB", TCP, False)
    assert "3000 KB" in line and "12.00 Mbps" in line
    assert table.row("x", 0.0, 2.0, 3_000_000, "g") == table.row("x", 0.0, 2.0, 3_000_000, "MB")
    assert parse_args(["-c", "-f", "kb"]).unit == "KB"
    assert parse_args(["-c", "-f", "g"]).unit == "g" and parse_args(["-c"]).unit == ""
    assert parse_args(["-s"]).unit == "MB"
