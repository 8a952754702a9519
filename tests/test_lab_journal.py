"""What a running lab keeps beside its record for the console: its journal (every change,
typed or from the page), what its routers' logs say of their neighbours, where its nodes
are drawn; and what the page may ask of it (captures, positions, past runs). Pure parts and
plain files: no lab is built here (test_lab_web.py drives the real thing)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simpleperf.lab.model import topology
from simpleperf.lab.net import journal, ownership
from simpleperf.lab.net.routing import config, daemons
from simpleperf.lab.net.routing import log as routing_log
from simpleperf.lab.web import captures, positions, runs

# FRR 8.4's own lines, as its bgpd and ospfd wrote them in the wan lab (P13 down and up)
BGP_DOWN = ("2026/11/30 00:02:53.138423 BGP: [PXVXG-TFNNT] %ADJCHANGE: neighbor 172.16.13.2(r4)"
            " in vrf default Down Interface down")
BGP_UP = ("2026/11/30 00:03:26.255455 BGP: [N9HHH-F8H1M] %ADJCHANGE: neighbor 172.16.13.2(r4) "
          "in vrf default Up")
OSPF_FULL = ("2026/11/29 23:58:49.000001 OSPF: [Y05P2-YJVXY] AdjChg: Nbr 10.1.12.2, NbrIP "
             "10.1.12.2 (default) on r1-eth1:10.1.12.1: Loading -> Full (LoadingDone)")
OSPF_GONE = ("2026/11/29 23:59:49 OSPF: [Y05P2-YJVXY] AdjChg: Nbr 10.1.12.2, NbrIP 10.1.12.2 "
             "(default) on r1-eth1:10.1.12.1: Full -> Deleted (InactivityTimer)")
OSPF_STEP = ("2026/11/29 23:58:49 OSPF: [Y05P2-YJVXY] AdjChg: Nbr 10.1.1.1, NbrIP 10.1.12.1 "
             "(default) on r2-eth0:10.1.12.2: ExStart -> Exchange (NegotiationDone)")
NOTIFICATION = ("2026/11/29 23:58:49 BGP: [HZN6M-XRM1G] %NOTIFICATION: sent to neighbor "
                "172.16.13.2 6/7 (Cease/Connection Collision Resolution) 0 bytes")


@pytest.fixture
def records(tmp_path, monkeypatch):
    """A record directory of our own, with lab `demo` recorded in it."""
    monkeypatch.setattr(ownership, "RECORD_DIR", tmp_path)
    ownership.new_record("demo", ("own", ""), True, {"pair": {}}).save()
    return tmp_path


def test_the_journal_keeps_each_change_with_who_made_it_in_order(records):
    journal.note("demo", "link h1-h2 down")
    journal.note("demo", "link h1-h2 set bw 5M", "page")
    journal.note("demo", "two\nlines", at=5.0)
    done = journal.read("demo")
    assert [(e.what, e.by) for e in done] == [("link h1-h2 down", "command"),
                                              ("link h1-h2 set bw 5M", "page"),
                                              ("two; lines", "command")]
    assert done[2].at == 5.0 and abs(done[0].at - time.time()) < 5
    assert done[1].line().endswith("link h1-h2 set bw 5M (from the console)")
    assert not done[0].line().endswith(")")
    assert [e.what for e in journal.read("demo", 1)] == ["two; lines"]
    with pytest.raises(ValueError, match="one of command, page"):
        journal.note("demo", "x", "someone")
    # a lab without a record gets no journal: nothing is left behind a lab taken down
    assert journal.note("gone", "flow 1 stopped", "page") is None
    assert not (records / f"gone{ownership.JOURNAL_SUFFIX}").exists()
    assert journal.read("gone") == []


def test_a_damaged_journal_line_is_passed_over():
    text = "\n".join([json.dumps({"at": 1.0, "what": "link L1 down", "by": "command"}),
                      "{not json", json.dumps({"at": "soon", "what": "x", "by": "page"}),
                      json.dumps({"at": 2.0, "what": "x", "by": "intruder"}),
                      json.dumps([1, 2]),
                      json.dumps({"at": 3.0, "what": "link L1 up", "by": "page"})])
    assert [e.what for e in journal.parse(text)] == ["link L1 down", "link L1 up"]


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_any_journal_text_is_read_without_an_error(text: str):
    assert all(entry.by in journal.BY for entry in journal.parse(text))


def test_lab_down_takes_the_journal_and_positions_with_it_and_nothing_else(records):
    journal.note("demo", "link h1-h2 down")
    positions.path("demo").write_text("{}")
    (records / f"demo{ownership.POSITIONS_SUFFIX}.tmp").write_text("{")
    other = records / f"demo2{ownership.JOURNAL_SUFFIX}"
    other.write_text("")
    ownership.tear_down(ownership.load("demo"))
    assert sorted(path.name for path in records.iterdir()) == [other.name]


def test_the_routers_say_what_their_neighbours_did_with_their_own_time():
    down = routing_log.parse("r2", BGP_DOWN)
    assert down is not None and down.router == "r2"
    assert down.what == "BGP session with 172.16.13.2 (r4) down: Interface down"
    assert down.at == time.mktime(time.strptime("2026/11/30 00:02:53", "%Y/%m/%d %H:%M:%S")
                                  ) + 0.138423
    assert routing_log.parse("r2", BGP_UP).what == "BGP session with 172.16.13.2 (r4) up"
    full = routing_log.parse("r1", OSPF_FULL)
    assert full is not None and full.what == "OSPF neighbour 10.1.12.2 on r1-eth1 up (Full)"
    gone = routing_log.parse("r1", OSPF_GONE)
    assert gone is not None and gone.what == ("OSPF neighbour 10.1.12.2 on r1-eth1 down "
                                              "(Deleted: InactivityTimer)")
    for quiet in (OSPF_STEP, NOTIFICATION, "", "garbage", "2026/13/45 99:99:99 %ADJCHANGE: "
                  "neighbor 1.2.3.4 in vrf default Up"):
        assert routing_log.parse("r1", quiet) is None, quiet


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_any_log_line_is_read_without_an_error(line: str):
    routing_log.parse("r1", line)
    routing_log.parse("r1", "2026/11/30 00:02:53 BGP: %ADJCHANGE: neighbor " + line)


def test_the_routers_logs_are_followed_from_where_the_last_reading_stopped(records):
    place = daemons.folder("wan", "r2")
    place.mkdir(parents=True)
    bgp = daemons.events_log("wan", "r2", "bgpd")
    bgp.write_text(BGP_DOWN + "\n" + NOTIFICATION + "\n" + BGP_UP[:40])  # a line half written
    follower = routing_log.LogFollower("wan", ["r2", "r9"])  # r9: no logs at all
    assert [e.what for e in follower.read()] == ["BGP session with 172.16.13.2 (r4) down: "
                                                 "Interface down"]
    with open(bgp, "a") as more:
        more.write(BGP_UP[40:] + "\n")
    assert [e.what for e in follower.read()] == ["BGP session with 172.16.13.2 (r4) up"]
    assert follower.read() == []
    daemons.events_log("wan", "r2", "ospfd").write_text(OSPF_FULL + "\n")
    bgp.write_text(BGP_UP + "\n")  # the lab built anew: a shorter log, read from its start
    assert [e.router for e in follower.read()] == ["r2", "r2"]


def test_routers_are_configured_to_log_their_neighbours():
    model = topology.load("wan")
    router = next(r for r in model.routers() if "ospfd" in config.daemons(model, r))
    texts = config.configs(model, router)
    assert " log-adjacency-changes" in texts["ospfd"].splitlines()
    assert " bgp log-neighbor-changes" in texts["bgpd"].splitlines()


def test_positions_are_kept_only_for_the_lab_s_nodes_as_finite_numbers(records):
    model = topology.pair()
    assert positions.checked(model, {"h1": {"x": 1, "y": -2.5}}) == {"h1": {"x": 1.0,
                                                                             "y": -2.5}}
    for bad, said in (({}, "positions are"), ([], "positions are"),
                      ({"h9": {"x": 1, "y": 2}}, "no node 'h9'"),
                      ({"h1": {"x": 1}}, "a position is"),
                      ({"h1": {"x": 1, "y": 2, "z": 3}}, "a position is"),
                      ({"h1": {"x": math.inf, "y": 2}}, "numbers within"),
                      ({"h1": {"x": True, "y": 2}}, "numbers within"),
                      ({"h1": {"x": "1", "y": 2}}, "numbers within"),
                      ({"h1": {"x": 2e6, "y": 2}}, "numbers within")):
        with pytest.raises(positions.PositionError, match=said):
            positions.checked(model, bad)
    positions.save("demo", model, {"h1": {"x": 1, "y": 2}})
    positions.save("demo", model, {"h2": {"x": 3, "y": 4}})  # merged
    assert positions.read("demo", model) == {"h1": {"x": 1.0, "y": 2.0},
                                             "h2": {"x": 3.0, "y": 4.0}}
    with pytest.raises(positions.PositionError, match="no lab named other is up"):
        positions.save("other", model, {"h1": {"x": 1, "y": 2}})
    positions.path("demo").write_text('{"h1": {"x": "damaged"')
    assert positions.read("demo", model) == {}


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | st.text(),
                    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
                    max_leaves=10))
def test_hostile_positions_are_one_refusal(asked):
    try:
        positions.checked(topology.pair(), asked)
    except positions.PositionError as error:
        assert "\n" not in str(error)


def test_a_capture_from_the_page_is_asked_for_as_lab_capture_takes_one():
    assert captures._asked({"where": " P13 "}) == ("P13", None, captures.DEFAULT_SECONDS)
    assert captures._asked({"where": "h1:h1-eth0", "filter": "tcp", "seconds": "5s"}) == (
        "h1:h1-eth0", "tcp", 5.0)
    for bad, said in (([], "a capture is"), ({"where": ""}, "a capture is"),
                      ({"where": "L1", "write": "/etc/passwd"}, "not write"),
                      ({"where": "L1", "filter": "tcp\nudp"}, "one line"),
                      ({"where": "L1", "filter": "x" * 501}, "one line"),
                      ({"where": "L1", "seconds": 0}, "from 1 to 3600"),
                      ({"where": "L1", "seconds": "forever"}, "from 1 to 3600"),
                      ({"where": "L1", "seconds": math.nan}, "from 1 to 3600"),
                      ({"where": "L1", "seconds": 7200}, "from 1 to 3600")):
        with pytest.raises(captures.PageCaptureError, match=said):
            captures._asked(bad)


def test_past_runs_are_listed_and_only_a_listed_run_s_report_is_served(tmp_path: Path):
    (tmp_path / "broken-1").mkdir()
    (tmp_path / "broken-1" / "results.sqlite").write_bytes(b"not a database")
    (tmp_path / "broken-1" / "report.html").write_text("<p>report</p>")
    (tmp_path / "loose.html").write_text("not a run")
    listed = runs.PastRuns(tmp_path)
    (found,) = listed.listing()
    assert found["name"] == "broken-1" and "holds no readable run" in found["error"]
    assert listed.report("broken-1") == tmp_path / "broken-1" / "report.html"
    for made_up in ("../broken-1", "broken-1/../broken-1", "loose.html", "", "nope"):
        assert listed.report(made_up) is None, made_up
    assert runs.PastRuns(tmp_path / "absent").listing() == []
    # a symbolic link for a report, or for a run's folder, is never followed
    secret = tmp_path / "secret.txt"
    secret.write_text("root's")
    (tmp_path / "linked-1").mkdir()
    (tmp_path / "linked-1" / "results.sqlite").write_bytes(b"")
    (tmp_path / "linked-1" / "report.html").symlink_to(secret)
    (tmp_path / "linked-2").symlink_to(tmp_path / "broken-1")
    assert {run["name"] for run in listed.listing()} == {"broken-1", "linked-1", "linked-2"}
    assert listed.report("linked-1") is None and listed.report("linked-2") is None
    assert listed.report("broken-1") is not None
