"""--rpm: responsiveness under working conditions (draft-ietf-ippm-responsiveness). The
draft's algorithm on synthetic intervals (engine/responsiveness.py), the load connections'
records and requests (protocol/load.py), then real runs against a real server on loopback:
upload and download, with a shared secret, against the server's limits and hostile
peers. Through a bufferbloated lab link: test_lab_system.py."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import socket
import subprocess
import time

import pytest
from helpers import SIMPLEPERF, free_port, proc_status, run_simpleperf, start_server
from hypothesis import given, settings
from hypothesis import strategies as st

from simpleperf.engine.responsiveness import (
    CONNECT,
    FOREIGN,
    FOREIGN_PROBE_BYTES,
    HIGH,
    INITIAL_UNSENT,
    LOADED,
    LOW,
    MAX_RECORD,
    MEDIUM,
    SELF_PROBE_BYTES,
    LoadUnsentLimit,
    ResponsivenessRun,
    RpmParameters,
)
from simpleperf.engine.unsent import MIN_UNSENT
from simpleperf.errors import ProtocolError
from simpleperf.protocol import load
from simpleperf.protocol.native import ECHO_PROBE, LOAD, echo_probe, preface
from simpleperf.stats import responsiveness, rpm, rpm_rating, summarise_rtt, trimmed_mean


def feed(run: ResponsivenessRun, moved: int, connections: int, connect=1.0, foreign=2.0,
         loaded=10.0, probes: int = 10) -> int:
    for _ in range(probes):
        run.add_probe(CONNECT, connect)
        run.add_probe(FOREIGN, foreign)
        run.add_probe(LOADED, loaded)
    return run.end_interval(moved, connections)


# The statistics: one definition of RPM ------------------------------------------------------

def test_the_trimmed_mean_drops_the_highest_five_percent_only():
    values = [float(v) for v in range(1, 101)]  # 1..100: the top 5 (96..100) go
    assert trimmed_mean(values) == sum(range(1, 96)) / 95
    assert trimmed_mean([7.0]) == 7.0  # at least one is kept
    assert trimmed_mean([1.0, 1000.0]) == 1.0  # int(2 x 0.95) = 1: the high one goes


@given(st.lists(st.floats(0.001, 1e5), min_size=1, max_size=300))
def test_the_trimmed_mean_lies_between_the_least_and_the_mean(values):
    mean = sum(values) / len(values)
    assert min(values) - 1e-9 <= trimmed_mean(values) <= mean + 1e-6 * mean


def test_the_drafts_weighted_formula_and_its_classes():
    # 60000 / (1/6 (TM(tcp_f) + TM(tls_f) + TM(http_f)) + 1/2 TM(http_l)): the foreign
    # probe's round trips averaged, then weighed equally with the loaded one (the mean of
    # the times, not of the RPMs: 1000 here, where the RPMs' mean would be 1800)
    foreign, loaded, total = responsiveness([10.0, 20.0, 30.0], 100.0)
    assert foreign == 60000 / 20 and loaded == 600
    assert total == pytest.approx(60000 / ((10 + 20 + 30) / 6 + 100 / 2)) == 1000
    # without TLS the foreign probe has two round trips: the handshake and the request
    assert responsiveness([10.0, 30.0], 100.0) == (3000, 600, pytest.approx(1000))
    assert rpm(60.0) == 1000 and rpm(0.0) == 0.0
    assert [rpm_rating(v) for v in (299, 300, 999, 1000, 5999, 6000)] == [
        "Poor", "Fair", "Fair", "Good", "Good", "Excellent"]


def test_a_tests_latency_block_uses_the_same_rpm():
    summary = summarise_rtt([10.0, 20.0, 30.0, 40.0])
    assert summary.trimmed == 20.0 and summary.rpm == rpm(20.0) == 3000


# The algorithm, sans IO -------------------------------------------------------------------

def test_steady_goodput_saturates_after_mad_intervals_then_responsiveness_does():
    run = ResponsivenessRun(RpmParameters(interval=1.0))
    adds = [feed(run, 1_000_000, index + 1) for index in range(3)]
    assert adds == [1, 1, 1] and not run.goodput_saturated
    assert all(record.rpm is None for record in run.intervals)
    feed(run, 1_000_000, 4)
    assert run.goodput_saturated and not run.done  # 4 moving averages, all the same
    for index in range(4, 7):
        feed(run, 1_000_000, index + 1)
    assert run.done  # four equal responsiveness values
    result = run.result()
    assert result.goodput == 8e6 and result.goodput_confidence == HIGH
    assert result.confidence == HIGH and result.connections == 7
    assert result.trimmed_ms == {CONNECT: 1.0, FOREIGN: 2.0, LOADED: 10.0}
    assert result.rpm == 60000 / ((1.5 + 10) / 2) and result.rating == "Excellent"
    assert result.probes == {CONNECT: 40, FOREIGN: 40, LOADED: 40}  # the last MAD intervals


def test_a_run_both_ways_keeps_each_directions_goodput_over_the_drafts_window():
    run = ResponsivenessRun(RpmParameters(interval=0.5))
    for index, (up, down) in enumerate([(100, 300), (200, 600), (300, 900), (400, 1200),
                                        (500, 1500)]):
        run.end_interval(up + down, index + 1, (up, down))
    last = run.intervals[-1]
    assert (last.uplink, last.downlink, last.goodput) == (8000, 24000, 32000)  # bits/s
    result = run.result()
    assert result.uplink_goodput == (200 + 300 + 400 + 500) * 8 / 0.5 / 4  # the last MAD
    assert result.downlink_goodput == 3 * result.uplink_goodput
    assert result.uplink_goodput + result.downlink_goodput == result.goodput
    one_way = ResponsivenessRun(RpmParameters())
    one_way.end_interval(1000, 1)
    assert one_way.result().uplink_goodput is None and one_way.intervals[0].uplink is None


def test_a_run_both_ways_names_a_direction_that_moved_nothing():
    """A server that loads one way only (one before --rpm --bidir) ends the run: the
    direction that moved nothing in the first intervals is named; one that moved at all,
    or a one-way run, is not."""
    for split, idle in [((0, 500), "up"), ((500, 0), "down"), ((1, 500), None)]:
        run = ResponsivenessRun(RpmParameters())
        run.end_interval(sum(split), 1, split)
        assert run.idle_direction() is None  # one interval is not enough to tell
        run.end_interval(sum(split), 2, split)
        assert run.idle_direction() == idle
    late = ResponsivenessRun(RpmParameters())
    for split in [(0, 500), (0, 500), (10, 500)]:
        late.end_interval(sum(split), 1, split)
    assert late.idle_direction() is None  # it moved up in the third
    one_way = ResponsivenessRun(RpmParameters())
    for _ in range(3):
        one_way.end_interval(500, 1)
    assert one_way.idle_direction() is None


def test_growing_goodput_is_not_saturated_and_a_short_run_has_low_confidence():
    run = ResponsivenessRun(RpmParameters())
    for index in range(6):
        feed(run, 1_000_000 * (index + 1), index + 1)  # each interval moves more
    result = run.result()
    assert not run.goodput_saturated
    assert result.goodput_confidence == MEDIUM and result.confidence == LOW
    assert result.rpm is not None  # the latest probes, reported with their confidence
    short = ResponsivenessRun(RpmParameters())
    feed(short, 1000, 1)
    assert short.result().goodput_confidence == LOW


def test_responsiveness_that_keeps_falling_stays_at_medium_confidence():
    run = ResponsivenessRun(RpmParameters())
    for index in range(12):
        delay = 10.0 * 2 ** index  # a queue that grows, for every probe
        feed(run, 1_000_000, index + 1, connect=delay, foreign=delay, loaded=delay)
    assert run.goodput_saturated and not run.done
    assert run.result().confidence == MEDIUM


def test_connections_are_added_up_to_the_drafts_maximum():
    run = ResponsivenessRun(RpmParameters(max_connections=3, increment=2))
    assert feed(run, 1, 1) == 2 and feed(run, 1, 2) == 1 and feed(run, 1, 3) == 0


@settings(max_examples=200)
@given(st.lists(st.integers(0, 10**10), min_size=1, max_size=20))
def test_probes_never_take_more_than_the_drafts_share_nor_exceed_its_rate(moved):
    p = RpmParameters()
    run = ResponsivenessRun(p)
    assert run.probe_rate() == 1.0
    for amount in moved:
        run.end_interval(amount, 1)
        rate = run.probe_rate()
        assert 1.0 <= rate <= p.max_probes
        share = p.capacity_share * run.intervals[-1].moving_goodput / 8
        if rate > 1.0:
            assert rate * (FOREIGN_PROBE_BYTES + SELF_PROBE_BYTES) <= share * (1 + 1e-9)


# The load connection's bytes --------------------------------------------------------------

@settings(deadline=None)
@given(st.lists(st.one_of(st.integers(0, 3000), st.integers(2**32, 2**63)), max_size=12),
       st.integers(1, 5000))
def test_records_come_out_whole_however_the_stream_is_cut(items, cut):
    stream = b""
    expected = []
    bulk = 0
    for item in items:
        if item <= 3000:
            stream += load.RECORD.pack(load.BULK, item) + bytes(item)
            bulk += item
        else:
            payload = ECHO_PROBE.pack(item, item // 3)
            stream += load.record(load.PROBE, payload)
            expected.append((load.PROBE, payload))
    reader = load.RecordReader()
    found = []
    for start in range(0, len(stream), cut):
        found += reader.feed(stream[start:start + cut])
    assert found == expected and reader.bulk_bytes == bulk


@pytest.mark.parametrize("stream, message", [
    (load.RECORD.pack(b"Z", 4) + b"abcd", "kind b'Z'"),
    (load.RECORD.pack(load.PROBE, 17) + bytes(17), "kind b'P' and 17 bytes"),
    (load.RECORD.pack(load.BULK, load.MAX_BULK + 1), "a bulk record of"),
    (load.RECORD.pack(load.REFUSED, load.MAX_REFUSAL + 1), "kind b'X'"),
])
def test_a_record_no_peer_of_ours_sends_is_a_protocol_error(stream, message):
    with pytest.raises(ProtocolError, match=message):
        load.RecordReader().feed(stream)


def test_a_request_is_checked_and_with_a_secret_must_carry_its_tag():
    token = bytes(range(16))
    asked = load.parse_request(load.request(token, True, 20, 16, None), None)
    assert (asked.token, asked.download, asked.seconds, asked.connections) == (
        token, True, 20, 16)
    tagged = load.request(token, False, 5, 2, b"secret")
    assert not load.parse_request(tagged, b"secret").download
    with pytest.raises(ProtocolError, match="without the shared secret"):
        load.parse_request(load.request(token, False, 5, 2, b"other") , b"secret")
    with pytest.raises(ProtocolError, match="without the shared secret"):
        load.parse_request(load.request(token, False, 5, 2, None) + bytes(16), b"secret")
    assert load.parse_request(load.request(token, True, 20, 16, None, "cubic"),
                              None).congestion == "cubic"
    bad = [load.REQUEST.pack(token, 2, 5, 2, b""), load.REQUEST.pack(token, 0, 0, 2, b""),
           load.REQUEST.pack(token, 0, 5, load.MAX_CONNECTIONS + 1, b""),
           load.REQUEST.pack(token, 0, 5, 2, b"no such;name")]
    for body in bad:
        with pytest.raises(ProtocolError):
            load.parse_request(body, None)
    with pytest.raises(ProtocolError, match="cut short"):
        load.parse_request(b"\0" * 5, None)


# Real runs on loopback ----------------------------------------------------------------------

def rpm_run(port: int, *flags: str, timeout: float = 40):
    return run_simpleperf("-c", "127.0.0.1", "-p", str(port), "--rpm", "--rpm-interval",
                          "0.25", *flags, timeout=timeout)


@pytest.mark.loopback
@pytest.mark.parametrize("direction, name", [([], "upload"), (["-R"], "download")])
def test_an_rpm_run_ramps_connections_and_reports_the_drafts_numbers(server, direction, name):
    _, port = server
    done = rpm_run(port, "-t", "4", "-J", *direction)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    start = document["start"]["responsiveness"]
    assert start["direction"] == name and start["parameters"]["mad"] == 4
    intervals = document["intervals"]
    assert 8 <= len(intervals) <= 16  # 0.25 s each, ending when stable or at 4 s
    assert [i["connections"] for i in intervals[:4]] == [1, 2, 3, 4]  # one more each
    assert all(i["goodput"] > 100e6 for i in intervals)  # loopback carries gigabits
    end = document["end"]["responsiveness"]
    assert end["goodput_confidence"] in (MEDIUM, HIGH)
    trimmed = end["trimmed_ms"]
    assert end["foreign_rpm"] == pytest.approx(rpm((trimmed[CONNECT] + trimmed[FOREIGN]) / 2))
    assert end["loaded_rpm"] == pytest.approx(rpm(trimmed[LOADED]))
    foreign_ms = (trimmed[CONNECT] + trimmed[FOREIGN]) / 2
    assert end["rpm"] == pytest.approx(rpm((foreign_ms + trimmed[LOADED]) / 2))
    assert end["rpm"] > 300 and end["rating"] in ("Fair", "Good", "Excellent")
    assert end["probes"][LOADED] >= 8 and end["probes"][FOREIGN] >= 8
    assert end["idle_ms"][CONNECT] > 0 and end["idle_ms"][FOREIGN] > 0
    text = rpm_run(port, "-t", "2", *direction)
    assert text.returncode == 0, text.stderr
    assert f": {name}, intervals of 0.25 s, at most 2 s" in text.stdout
    assert "Responsiveness: " in text.stdout and " RPM, " in text.stdout
    assert "load-generating connections (confidence " in text.stdout


@pytest.mark.loopback
def test_an_rpm_run_with_bidir_loads_both_ways_at_once(server):
    """--rpm --bidir (networkQuality's default): a connection each way at each step, both
    directions' goodput in every interval and in the result, their sum the goodput."""
    _, port = server
    done = rpm_run(port, "-t", "3", "-J", "--bidir")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["start"]["responsiveness"]["direction"] == "both"
    intervals = document["intervals"]
    assert [i["connections"] for i in intervals[:3]] == [1, 2, 3]  # each way
    for interval in intervals:
        assert interval["uplink"] > 50e6 and interval["downlink"] > 50e6, interval
        assert interval["uplink"] + interval["downlink"] == pytest.approx(interval["goodput"])
    end = document["end"]["responsiveness"]
    assert end["uplink_goodput"] > 50e6 and end["downlink_goodput"] > 50e6
    assert end["uplink_goodput"] + end["downlink_goodput"] == pytest.approx(end["goodput"])
    assert end["probes"][LOADED] >= 4 and end["rpm"] > 0
    text = rpm_run(port, "-t", "2", "--bidir")
    assert text.returncode == 0, text.stderr
    assert ": upload and download at once, intervals of 0.25 s" in text.stdout
    assert re.search(r"Goodput: .* \(up .*, down .*\) over \d+ load-generating connections "
                     r"each way", text.stdout), text.stdout
    one_way = json.loads(rpm_run(port, "-t", "2", "-J").stdout)
    assert "uplink_goodput" not in one_way["end"]["responsiveness"]
    assert "uplink" not in one_way["intervals"][0]


@pytest.mark.loopback
def test_an_rpm_run_with_a_shared_secret_and_one_without_it(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("correct horse battery staple\n")
    live, port = start_server("--auth-secret-file", str(secret))
    try:
        done = rpm_run(port, "-t", "1", "-J", "--auth-secret-file", str(secret))
        refused = rpm_run(port, "-t", "1")
    finally:
        live.close()
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["end"]["responsiveness"]["probes"][LOADED] > 0
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "shared secret" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


@pytest.mark.loopback
@pytest.mark.parametrize("limit, flags, message", [
    (["--max-duration", "2"], ["-t", "5"], "a 5 s test asked, this server allows at most 2 s "
                                           "(--max-duration)"),
    # --max-parallel 4 is below the draft's 16 connections: refused as a 16-stream test.
    (["--max-parallel", "4"], ["-t", "2", "-J"], "16 parallel streams asked, this server "
                                                 "allows at most 4 (--max-parallel)"),
])
def test_the_servers_limits_apply_to_an_rpm_run_as_to_one_test(limit, flags, message):
    live, port = start_server(*limit)
    try:
        refused = rpm_run(port, *flags)
    finally:
        live.close()
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.strip() == f"simpleperf: error: the server refused the run: {message}"
    if "-J" in flags:
        assert json.loads(refused.stdout)["error"] == f"the server refused the run: {message}"


@pytest.mark.loopback
def test_hostile_load_connections_end_alone_and_leave_nothing_behind(server):
    live, port = server
    before = proc_status(live.process.pid)
    token = bytes(16)
    hostile = [
        preface(LOAD) + load.REQUEST.pack(token, 7, 5, 1, b""),  # no such direction
        preface(LOAD) + load.request(token, False, 5, 1, None, "nosuchcc"),  # refused
        preface(LOAD) + load.request(token, False, 5, 1, None)
        + load.RECORD.pack(b"Q", 3) + b"abc",  # no such record
        preface(LOAD) + load.request(token, False, 5, 1, None)
        + load.RECORD.pack(load.BULK, 2**31),  # a bulk record past the cap
        preface(LOAD) + b"\1\2",  # a request cut short, then silence
    ]
    for data in hostile:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(data)
            if data.endswith(b"\1\2"):
                continue
            sock.settimeout(5)
            with contextlib.suppress(ConnectionResetError):
                while sock.recv(4096):
                    pass  # the server answers a refusal, or nothing, and closes
    # A second connection over what the run asked for is refused; the first is served.
    with socket.create_connection(("127.0.0.1", port)) as first, \
            socket.create_connection(("127.0.0.1", port)) as second:
        first.sendall(preface(LOAD) + load.request(token, False, 5, 1, None)
                      + load.record(load.PROBE, echo_probe(9, 1, None)))
        first.settimeout(5)
        answer = load.ACCEPT + load.record(load.PROBE, echo_probe(9, 1, None))
        received = b""
        while len(received) < len(answer):
            received += first.recv(64)
        assert received == answer
        second.sendall(preface(LOAD) + load.request(token, False, 5, 1, None))
        second.settimeout(5)
        assert b"already opened its 1 connections" in second.recv(4096)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and proc_status(live.process.pid) != before:
        time.sleep(0.2)
    assert proc_status(live.process.pid) == before
    assert live.process.poll() is None


@pytest.mark.loopback
@pytest.mark.parametrize("flags, message", [
    (["--rpm", "-u"], "--rpm runs the draft's own TCP load and probes: it cannot be "
                      "combined with -u"),
    (["--rpm", "-P", "2", "--bidir"], "combined with -P"),
    (["--rpm", "--iperf3"], "combined with --iperf3"),
    (["--rpm", "-t", "1", "--rpm-interval", "0.6"], "--rpm needs at least two intervals"),
    (["--rpm-interval", "1"], "--rpm-interval is an --rpm option"),
    (["--rpm", "--rpm-interval", "0.01"], "--rpm-interval must be a number of seconds at "
                                          "least 0.1"),
])
def test_what_rpm_cannot_do_is_one_line(flags, message):
    done = run_simpleperf("-c", "127.0.0.1", "-p", "5999", *flags)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


@pytest.mark.loopback
def test_rpm_against_no_server_is_one_line():
    port = free_port()
    done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "--rpm", "-t", "2")
    assert done.returncode == 1
    assert f"cannot connect to 127.0.0.1 port {port}: connection refused" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_load_sender_keeps_five_milliseconds_of_its_own_rate_unsent():
    unsent = LoadUnsentLimit()
    assert unsent.limit == INITIAL_UNSENT and not unsent.update(0.0, 0)
    assert not unsent.update(0.01, 10**6)  # within one sample: no new rate yet
    assert unsent.update(0.1, 1_250_000)  # 100 Mbit/s: 12.5 MB/s x 5 ms = 62.5 kB
    assert unsent.limit == 62_500 // MIN_UNSENT * MIN_UNSENT and unsent.record == unsent.limit
    assert unsent.update(0.2, 1_250_000 + 125_000)  # 10 Mbit/s: 6250 B, in 1500s
    assert unsent.limit == 6000
    unsent.update(0.3, 1_375_000)  # nothing delivered: at least about a segment
    assert unsent.limit == MIN_UNSENT
    unsent.update(0.4, 1_375_000 + 10**9)  # 80 Gbit/s: the limit grows, a record does not
    assert unsent.limit > 10**7 and unsent.record == MAX_RECORD


@pytest.mark.loopback
def test_an_interrupted_rpm_run_prints_what_it_measured_and_exits_130(server):
    _, port = server
    process = subprocess.Popen([*SIMPLEPERF, "-c", "127.0.0.1", "-p", str(port), "--rpm",
                                "-t", "20", "--rpm-interval", "0.25", "-J"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(2)
    process.send_signal(signal.SIGTERM)  # as Ctrl-C
    out, err = process.communicate(timeout=20)
    assert process.returncode == 130, err
    document = json.loads(out)
    assert document["error"] == "interrupted" and document["intervals"]
    assert "Traceback" not in err


@pytest.mark.loopback
def test_a_one_off_server_exits_after_one_rpm_run():
    live, port = start_server("-1")
    try:
        done = rpm_run(port, "-t", "1")
        assert done.returncode == 0, done.stderr
        assert live.process.wait(15) == 0  # the run was its one test
    finally:
        live.close()
