"""--l4s: UDP marked ECT(1) whose window the receiver's counts of CE marks move (engine/l4s.py).
The response alone on synthetic feedback; the whole exchange between real simpleperf
processes on loopback (where nothing marks CE: the lab's DualPI2 tests do); what it
refuses. CE marks on a real path: test_lab_system.py's DualPI2 test."""

from __future__ import annotations

import json
import socket

import pytest
from helpers import run_simpleperf, start_iperf3_server, start_server
from hypothesis import given, settings
from hypothesis import strategies as st

from simpleperf import ecn
from simpleperf.engine import l4s

SIZE = 1470


def round_of(control: l4s.ScalableWindow, arrived: int, marked: int = 0, lost: int = 0,
             sample: float = 0.010, now: float = 0.0) -> None:
    """One round trip's feedback: `arrived` more datagrams, `marked` of them CE, `lost`
    missing, from a sender with its whole window in flight (window-limited); the round ends
    if these cover what was in flight at its start."""
    received, was_marked, highest = control.counted
    highest += arrived + lost
    sent = highest + int(control.window)
    control.feedback(received + arrived, was_marked + marked, highest, sample, sent, now)


def test_the_start_doubles_the_window_each_round_trip_until_a_mark():
    control = l4s.ScalableWindow(SIZE, 0)
    assert control.window == l4s.INITIAL_WINDOW and control.starting
    round_of(control, 10)
    assert control.window == 20  # a datagram more for each that arrived
    round_of(control, 20)
    assert control.window == 40 and control.starting
    control.feedback(60, 4, 60, 0.010, 100, 0.0)  # marks half-way through the round: at once
    alpha = 1.0
    for fraction in (0, 0, 4 / 30):
        alpha += l4s.GAIN * (fraction - alpha)
    assert control.alpha == pytest.approx(alpha)
    assert not control.starting and control.window == pytest.approx(40 * (1 - alpha / 2))


def test_after_the_start_a_round_without_marks_adds_one_and_one_with_marks_cuts_by_alpha():
    control = l4s.ScalableWindow(SIZE, 0)
    round_of(control, 10, marked=1)
    window = control.window
    for _ in range(5):
        round_of(control, control.window_end - control.counted[2])  # covers its round
    assert control.window == pytest.approx(window + 5)
    before, alpha = control.window, control.alpha
    round_of(control, 20, marked=20)  # every one marked: alpha moves a sixteenth towards 1
    alpha += l4s.GAIN * (1 - alpha)
    assert control.window == pytest.approx(before * (1 - alpha / 2))


def test_a_loss_halves_the_window_as_a_classic_flow_would():
    """In the start, as TCP's slow start: the feedback that shows a loss stops the growth and
    halves the window at once, in the middle of a round trip; after it, a round trip with a
    loss halves it again."""
    control = l4s.ScalableWindow(SIZE, 0)
    round_of(control, 10)
    assert control.window == 20 and control.window_end == 21
    control.feedback(15, 0, 16, 0.010, 25, 0.0)  # number 16 seen, 15 arrived: one missing
    assert control.window == pytest.approx(10) and control.cuts == 1
    assert not control.starting
    round_of(control, 20, lost=2)
    assert control.window == pytest.approx(5) and control.cuts == 2


def sampled_round(control: l4s.ScalableWindow, delay: float) -> None:
    """Feedback with the round trip `delay`, DELAY_SAMPLES times a round, from a
    window-limited sender, until a round trip ends."""
    counted = control.counted
    step = max(1, int(control.window_end - counted[2]) // l4s.DELAY_SAMPLES + 1)
    while control.counted == counted:
        highest = control.acked + step
        control.feedback(highest, 0, highest, delay, highest + int(control.window), 0.0)


@pytest.mark.parametrize("grown,ends", [(0.0039, False), (0.0041, True)])
def test_the_start_ends_without_a_cut_once_a_round_trips_least_delay_has_grown(grown, ends):
    """HyStart++ (RFC 9406): a queue that neither marks nor drops yet (a receiver's deep
    socket buffer) shows as delay; past an eighth of the least, at least 4 ms, the start
    ends where it is, before the buffer overflows."""
    control = l4s.ScalableWindow(SIZE, 0)
    for _ in range(3):
        sampled_round(control, 0.001)
    assert control.starting and control.window > 4 * l4s.INITIAL_WINDOW
    before = control.window
    sampled_round(control, 0.001 + grown)
    assert control.starting is not ends and control.cuts == 0
    assert control.window > 1.5 * before  # the round's growth is kept


def test_a_window_the_sender_does_not_fill_does_not_grow():
    control = l4s.ScalableWindow(SIZE, 0)
    control.feedback(10, 0, 10, 0.010, 12, 0.0)  # 2 in flight of a window of 10
    assert control.window == l4s.INITIAL_WINDOW


def test_silence_takes_the_window_as_lost_and_lets_the_sender_go_on():
    control = l4s.ScalableWindow(SIZE, 0)
    assert control.may_send(9) and not control.may_send(10)
    control.silence(0.1, 10)  # too soon
    assert not control.may_send(10)
    control.silence(l4s.SILENCE_SECONDS + 0.01, 10)
    assert control.may_send(10) and control.window == l4s.INITIAL_WINDOW / 2


def test_the_pace_is_the_window_over_the_round_trip_below_the_ceiling():
    control = l4s.ScalableWindow(SIZE, 0)
    bits = SIZE * 8
    assert control.rate == pytest.approx(2.0 * 10 * bits / l4s.INITIAL_ROUND_TRIP)
    round_of(control, 10, marked=10, sample=0.020)
    assert control.rate == pytest.approx(1.25 * control.window * bits / 0.020)
    capped = l4s.ScalableWindow(SIZE, 1e6)
    assert capped.rate == 1e6


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 200), st.integers(0, 20),
                          st.floats(0, 1)), max_size=60), st.sampled_from([0.0, 5e6]))
def test_the_window_stays_between_its_least_and_what_the_ceiling_needs(rounds, ceiling):
    control = l4s.ScalableWindow(SIZE, ceiling)
    received = marked = highest = sent = 0
    now = 0.0
    for arrived, marks, lost, sample in rounds:
        sent += arrived + lost
        received += arrived
        marked += min(marks, arrived)
        highest += arrived + lost
        now += 0.01
        control.feedback(received, marked, highest, sample, sent, now)
        assert control.window >= l4s.MIN_WINDOW
        assert 0 <= control.alpha <= 1
        assert 0 < control.rate <= (ceiling or l4s.MAX_RATE)
        if ceiling and control.round_trip:
            assert control.window <= max(l4s.INITIAL_WINDOW, 2 * ceiling * max(
                control.round_trip, l4s.MIN_ROUND_TRIP) / (SIZE * 8)) + 1


def test_ecn_is_read_from_either_families_ancillary_data():
    assert l4s.ecn_of([(socket.IPPROTO_IP, socket.IP_TOS, b"\x03")]) == ecn.CE
    assert l4s.ecn_of([(socket.IPPROTO_IPV6, socket.IPV6_TCLASS,
                        (0xB9).to_bytes(4, "little"))]) == ecn.ECT1
    assert ecn.with_field(0xB8, ecn.ECT1) == 0xB9 and ecn.dscp_of(0xB9) == 46
    assert l4s.ecn_of([]) == 0


@pytest.mark.loopback
@pytest.mark.parametrize("direction", [[], ["-R"]])
def test_an_l4s_stream_sends_ect1_and_reports_its_ce_count(server, direction):
    """Nothing on loopback marks CE: the stream grows to what the host carries, loses
    nothing, and the receiver reports 0 CE-marked datagrams in its JSON and text."""
    _, port = server
    done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-u", "--l4s", "-t", "1.5",
                          "-J", "--no-latency", *direction)
    assert done.returncode == 0, done.stderr
    end = json.loads(done.stdout)["end"]
    receiver = end["streams"][0]["receiver"]
    assert receiver["ce_marked"] == 0 and end["sum_received"]["ce_marked"] == 0
    assert receiver["lost_packets"] <= receiver["packets"] // 100
    assert end["sum_received"]["bits_per_second"] > 50e6  # far past the 1 Mbit/s default
    text = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-u", "--udp-l4s", "-b", "5M",
                          "-t", "1", "--no-latency", *direction)
    assert text.returncode == 0, text.stderr
    assert "L4S (receiver): 0 of " in text.stdout
    assert "were CE-marked (0.00%)" in text.stdout


@pytest.mark.loopback
def test_an_l4s_stream_with_a_shared_secret(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("correct horse battery staple\n")
    live, port = start_server("--auth-secret-file", str(secret))
    try:
        done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-u", "--l4s", "-b", "20M",
                              "-t", "1", "-J", "--no-latency", "--auth-secret-file",
                              str(secret))
    finally:
        live.close()
    assert done.returncode == 0, done.stderr
    receiver = json.loads(done.stdout)["end"]["streams"][0]["receiver"]
    assert receiver["ce_marked"] == 0 and receiver["packets"] > 1000


@pytest.mark.loopback
@pytest.mark.parametrize("flags, message", [
    (["--l4s"], "--l4s sets a UDP stream's rate from CE marks: add -u"),
    (["-u", "--l4s", "--iperf3"], "--l4s needs a simpleperf server"),
    (["-u", "--l4s", "-S", "2"], "--l4s sets the ECN field (ECT(1)): -S/--tos 2 must"),
    (["-u", "--l4s", "--isochronous"], "--l4s sets the rate itself"),
])
def test_what_l4s_cannot_do_is_one_line(flags, message):
    done = run_simpleperf("-c", "127.0.0.1", "-p", "5999", *flags)
    assert done.returncode == 2 and message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


@pytest.mark.loopback
def test_an_iperf3_server_is_told_apart_before_l4s_starts():
    process, port = start_iperf3_server("3.12", "-1")
    try:
        done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-u", "--l4s", "-t", "1")
    finally:
        process.kill()
        process.wait()
    assert done.returncode == 1, done.stdout
    assert "is an iperf3 server, which sends no feedback of CE marks" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_the_native_protocol_carries_l4s_and_refuses_it_where_it_means_nothing():
    from simpleperf.description.testspec import TestSpec
    from simpleperf.errors import ProtocolError
    from simpleperf.protocol.native import parse_spec, spec_message

    assert parse_spec(spec_message(TestSpec(protocol="udp", length=1470, l4s=True))).l4s
    for spec in (TestSpec(l4s=True), TestSpec(protocol="udp", length=1470, l4s=True,
                                              frame_rate=30)):
        with pytest.raises(ProtocolError, match="l4s applies to a steady UDP stream"):
            parse_spec(spec_message(spec))
    with pytest.raises(ProtocolError, match="test field 'l4s' has an invalid value"):
        parse_spec({**spec_message(TestSpec(protocol="udp", length=1470)), "l4s": 1})
