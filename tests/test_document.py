"""The one reader of a client's JSON document (report/document.py), which the lab and the
exporter share, against documents our client really writes."""

from __future__ import annotations

import json

import pytest
from helpers import run_simpleperf, start_server

from simpleperf.report.document import BIDIR_REVERSE, receiver_delays, sums


@pytest.fixture(scope="module")
def server():
    live, port = start_server()
    yield port
    live.close()


@pytest.mark.loopback
def test_a_udp_bidir_document_reads_as_both_directions_totals(server):
    done = run_simpleperf("-c", "127.0.0.1", "-p", str(server), "-u", "-b", "20M", "-t", "1",
                          "--bidir", "--trip-times", "-J")
    assert done.returncode == 0, done.stderr
    end = json.loads(done.stdout)["end"]
    for part in ("", BIDIR_REVERSE):
        totals = sums(end, part)
        assert totals.received_bytes == end["sum_received" + part]["bytes"] > 0
        assert totals.sent_bps == end["sum_sent" + part]["bits_per_second"] > 0
        assert totals.packets == end["sum" + part]["packets"] > 0
        assert totals.lost == end["sum" + part]["lost_packets"]
        assert totals.jitter_ms is not None and totals.lost_percent is not None
        assert totals.retransmits is None
    delays = receiver_delays(end["streams"])
    assert len(delays) == 2 and all(d["count"] > 0 and "histogram" in d for d in delays)


@pytest.mark.loopback
def test_a_tcp_document_has_no_datagram_account_and_its_sender_counts_retransmits(server):
    done = run_simpleperf("-c", "127.0.0.1", "-p", str(server), "-t", "0.5", "-J")
    assert done.returncode == 0, done.stderr
    end = json.loads(done.stdout)["end"]
    totals = sums(end)
    assert totals.retransmits == end["sum_sent"]["retransmits"]
    assert totals.received_bps == end["sum_received"]["bits_per_second"] > 0
    assert (totals.jitter_ms, totals.lost, totals.packets) == (None, None, None)
    assert receiver_delays(end["streams"]) == []  # no --trip-times: nothing timed
    with pytest.raises(KeyError):
        sums(end, BIDIR_REVERSE)  # not a --bidir test
