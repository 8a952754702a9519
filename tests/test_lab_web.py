"""simpleperf lab web: what the page draws (pure), the console's guard (a real server:
token, Host, limits), and the page itself in Debian's Chromium driven by Selenium across
real labs."""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import SIMPLEPERF, free_port
from hypothesis import given, settings
from hypothesis import strategies as st
from lab_helpers import Ready, lab

from simpleperf.lab.model import topology
from simpleperf.lab.net import build, changes, journal, ownership
from simpleperf.lab.net.shaping import delayline
from simpleperf.lab.web import actions, captures, counters, positions, qdiscs, views
from simpleperf.lab.web.vendored import VENDORED

STATIC = Path(views.__file__).parent / "static"
DEV = "\n".join((  # /proc/net/dev as the kernel writes it (its two heading lines)
    "Inter-|   Receive                                                |  Transmit",
    " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs "
    "drop fifo colls carrier compressed",
    "    lo:    1000      10    0    0    0     0          0         0     1000      10    0 "
    "   0    0     0       0          0",
    "h1-eth0: 5000000   4000    0    3    0     0          0         0 90000000   60000    0 "
    "   7    0     0       0          0", ""))


def test_proc_net_dev_is_read_as_the_kernel_writes_it():
    found = counters.parse_dev(DEV)
    assert found["h1-eth0"] == counters.Counters(5000000, 4000, 3, 90000000, 60000, 7)
    assert set(found) == {"lo", "h1-eth0"}
    assert counters.parse_dev("garbage\n\nx: 1 2 3\n") == {}


def test_link_rates_are_what_the_sending_interface_sent_each_way():
    model = topology.pair(rate="100M")
    link = model.links[0]

    def at(seconds: float, sent: int, back: int, dropped: int = 0) -> views.Reading:
        return views.Reading(seconds, {
            link.a.node: {link.a.interface: counters.Counters(back, 0, 0, sent, 100, dropped)},
            link.b.node: {link.b.interface: counters.Counters(sent, 100, 0, back, 0, 0)}})

    (rates,) = views.link_rates(model, at(10.0, 0, 0), at(12.0, 25_000_000, 250_000, 4))
    assert rates["a_to_b"]["bits_per_second"] == 100e6
    assert rates["b_to_a"]["bits_per_second"] == 1e6
    assert rates["a_to_b"]["dropped"] == 4
    (restarted,) = views.link_rates(model, at(10.0, 5000, 5000), at(11.0, 10, 10))
    assert restarted["a_to_b"] is None  # an interface made anew: no rate, not a negative one
    (missing,) = views.link_rates(model, views.Reading(1.0, {}), at(2.0, 1, 1))
    assert missing["a_to_b"] is None and missing["b_to_a"] is None


def test_a_direction_s_queue_is_read_where_it_sits():
    """The kernel's queue where the direction leaves the wire namespace (build's ports),
    or the own shaper's discipline (its delay line's statistics) where that runs it."""
    model = topology.pair(rate="20M", delay="5ms")
    link = model.links[0]
    egress = build.wire_egress(model)
    assert egress == {("h1-h2", "a_to_b"): ("pair-wire", "w1b"),
                      ("h1-h2", "b_to_a"): ("pair-wire", "w1a")}
    # the kernel's CAKE comes first on the ifb behind the port a direction enters by
    cake = topology.pair(rate="20M", delay="5ms", qdisc="cake")
    assert build.wire_egress(cake) == {("h1-h2", "a_to_b"): ("pair-wire", "ifb1a"),
                                       ("h1-h2", "b_to_a"): ("pair-wire", "ifb1b")}
    ends = {link.a.node: {link.a.interface: counters.Counters(0, 0, 0, 10, 1, 0)},
            link.b.node: {link.b.interface: counters.Counters(10, 1, 0, 0, 0, 0)}}

    def tbf(backlog: int, drops: int) -> dict[str, dict[str, qdiscs.QdiscStats]]:
        return {"pair-wire": {"w1b": qdiscs.QdiscStats("tbf", 0x10000, qdiscs.ROOT, 0, 0,
                                                       backlog, backlog * 1500, drops, 0)}}

    (rates,) = views.link_rates(model, views.Reading(0.0, ends, tbf(3, 10)),
                                views.Reading(1.0, ends, tbf(40, 25)), egress)
    assert rates["a_to_b"]["queue_packets"] == 40 and rates["a_to_b"]["dropped"] == 15
    # 60,000 bytes queued drain in 24 ms at 20 Mbit/s
    assert rates["a_to_b"]["queue_delay"] == pytest.approx(0.024)
    assert "queue_packets" not in rates["b_to_a"]  # nothing read at w1a
    assert "queue_delay" not in rates["b_to_a"]
    own = {"pair": {("h1-h2", "a_to_b"): {"packets": 7, "bytes": 10500, "drops": 4,
                                          "marks": 9}}}
    later = {"pair": {("h1-h2", "a_to_b"): {"packets": 2, "bytes": 3000, "drops": 6,
                                            "marks": 12}}}
    (rates,) = views.link_rates(model, views.Reading(0.0, ends, tbf(3, 10), own),
                                views.Reading(1.0, ends, tbf(40, 25), later), egress)
    assert (rates["a_to_b"]["queue_packets"], rates["a_to_b"]["dropped"],
            rates["a_to_b"]["marked"]) == (2, 2, 3)  # the own discipline's, not tbf's
    assert rates["a_to_b"]["queue_delay"] == pytest.approx(3000 * 8 / 20e6)
    unlimited = topology.pair(delay="5ms")  # no rate: nothing to drain at
    (rates,) = views.link_rates(unlimited, views.Reading(0.0, ends, tbf(3, 10)),
                                views.Reading(1.0, ends, tbf(40, 25)), egress)
    assert rates["a_to_b"]["queue_packets"] == 40 and "queue_delay" not in rates["a_to_b"]


def test_a_switch_s_port_queue_is_read_in_the_switch_s_namespace(tmp_path):
    """A shaped link to a switch has no wire: each direction's queue is its sending end's
    root qdisc, the switch's own port for what the switch sends (its namespace is a node's,
    read as every node's is)."""
    spec = tmp_path / "lan.toml"
    spec.write_text('name = "lan"\n[hosts]\nh1 = {}\nh2 = {}\n[switches]\ns1 = {}\n'
                    + "".join(f'[[links]]\na = "h{i}"\na_address = "10.9.0.{i}/24"\n'
                              'b = "s1"\nbw = "10M"\n' for i in (1, 2)))
    model = topology.load(str(spec))
    link = model.links[0]
    assert (link.name, "b_to_a") not in build.wire_egress(model)
    ends = {link.a.node: {link.a.interface: counters.Counters(0, 0, 0, 10, 1, 0)},
            link.b.node: {link.b.interface: counters.Counters(10, 1, 0, 0, 0, 0)}}

    def port(backlog: int) -> dict[str, dict[str, qdiscs.QdiscStats]]:
        return {link.b.node: {link.b.interface: qdiscs.QdiscStats(
            "tbf", 0x10000, qdiscs.ROOT, 0, 0, backlog, backlog * 1500, 0, 0)}}

    rates = {row["name"]: row for row in views.link_rates(
        model, views.Reading(0.0, ends, port(1)), views.Reading(1.0, ends, port(12)),
        build.wire_egress(model))}
    assert rates[link.name]["b_to_a"]["queue_packets"] == 12
    assert rates[link.name]["b_to_a"]["queue_delay"] == pytest.approx(
        12 * 1500 * 8 / link.b_to_a.rate)
    assert "queue_packets" not in rates[link.name]["a_to_b"]  # nothing read at the host


def test_the_portfolio_is_drawn_with_its_15_nodes_14_links_and_every_property():
    model = topology.load("portfolio")
    view = views.topology_view("portfolio", model, "own", ["L3"])
    assert len(view["nodes"]) == 15 and len(view["links"]) == 14
    assert {node["kind"] for node in view["nodes"]} == {"host", "router", "switch"}
    down = [link["name"] for link in view["links"] if link["down"]]
    assert down == ["L3"]
    from simpleperf.lab.model import link_properties
    for link in view["links"]:
        for way in ("a_to_b", "b_to_a"):
            assert set(link[way]["properties"]) == set(link_properties.NAMES)
            assert link[way]["described"]
    json.dumps(view)  # what the page reads


def _qdisc_message(index: int, kind: bytes, parent: int, sent: int, backlog: tuple[int, int],
                   drops: int) -> bytes:
    """One RTM_NEWQDISC as the kernel sends it (its attributes 4-byte aligned)."""
    def attribute(kind_: int, payload: bytes) -> bytes:
        padded = payload + b"\0" * (-len(payload) % 4)
        return qdiscs.ATTRIBUTE.pack(qdiscs.ATTRIBUTE.size + len(payload), kind_) + padded

    stats = attribute(qdiscs.TCA_STATS_BASIC, qdiscs.BASIC.pack(sent, sent // 1500)) + \
        attribute(qdiscs.TCA_STATS_QUEUE, qdiscs.QUEUE.pack(backlog[0], backlog[1], drops,
                                                             0, 7))
    body = qdiscs.TCMSG.pack(0, index, 0x10000, parent, 1) + attribute(
        qdiscs.TCA_KIND, kind + b"\0") + attribute(qdiscs.TCA_STATS2, stats)
    return qdiscs.HEADER.pack(qdiscs.HEADER.size + len(body), qdiscs.RTM_NEWQDISC, 2, 1,
                              0) + body


def test_a_qdisc_dump_is_read_as_tc_s_qdisc_shows_it():
    root = _qdisc_message(3, b"htb", qdiscs.ROOT, 150_000, (45, 67_500), 12)
    leaf = _qdisc_message(3, b"pfifo", 0x10001, 150_000, (45, 67_500), 12)
    done = qdiscs.HEADER.pack(20, qdiscs.NLMSG_DONE, 2, 1, 0) + b"\0" * 4
    found, ended = qdiscs.parse(root + leaf + done)
    assert ended and [index for index, _ in found] == [3, 3]
    top = qdiscs.root_of([stats for _, stats in found])
    assert top == qdiscs.QdiscStats("htb", 0x10000, qdiscs.ROOT, 150_000, 100, 45, 67_500,
                                    12, 7)
    assert qdiscs.parse(root[:30]) == ([], False)  # cut short: nothing, no error


@settings(max_examples=300)
@given(st.binary(max_size=400))
def test_hostile_netlink_bytes_are_never_an_error(data: bytes):
    found, _ = qdiscs.parse(data)
    assert all(isinstance(stats, qdiscs.QdiscStats) for _, stats in found)
    qdiscs.attributes(data)


@pytest.mark.root
def test_the_own_shaper_s_queues_are_read_by_link_direction():
    """A delay line's statistics file, by kernel queue, read as the link directions the
    lab numbered those queues for (build.delay_queue_directions); a broken file is none."""
    model = topology.pair(rate="20M", delay="5ms")
    lab_name = f"webtest{os.getpid()}"
    files = [ownership.RECORD_DIR / f"{lab_name}.delayline{n}{delayline.QUEUES_SUFFIX}"
             for n in (1, 2, 3)]
    ownership.RECORD_DIR.mkdir(parents=True, exist_ok=True)
    try:
        files[0].write_text(json.dumps({"1": {"packets": 7, "bytes": 10500, "drops": 4,
                                              "marks": 0}}))
        files[1].write_text(json.dumps({"2": {"packets": 0, "bytes": 0, "drops": 1,
                                              "marks": 2}, "9": {"packets": 5}}))
        files[2].write_text("{not json")
        assert counters.own_queues(lab_name, model) == {
            ("h1-h2", "a_to_b"): {"packets": 7, "bytes": 10500, "drops": 4, "marks": 0},
            ("h1-h2", "b_to_a"): {"packets": 0, "bytes": 0, "drops": 1, "marks": 2}}
    finally:
        for path in files:
            path.unlink(missing_ok=True)


def test_a_change_from_the_page_is_what_lab_link_would_make():
    made = actions.change_of("links", "L2", {"action": "set", "set": {
        "rate": "5M", "delay": "30ms", "qdisc": "fq_codel"}})
    assert made == changes.Change("L2", "set", {"bw": "5M", "delay": "30ms",
                                                 "qdisc": "fq_codel"})
    assert actions.change_of("nodes", "r2", {"action": "down"}) == changes.Change("r2", "down")
    for kind, asked, says in (
            ("links", {"action": "explode"}, "one of down, up, set"),
            ("links", [], "one of down, up, set"),
            ("links", {"action": "set"}, "set needs at least one of rate"),
            ("links", {"action": "down", "set": {"rate": "5M"}}, "go with 'set'"),
            ("links", {"action": "set", "set": {"cost": 5}}, "not a property a running"),
            ("links", {"action": "set", "set": {"ecn": True}}, "not a property a running"),
            ("links", {"action": "set", "set": {"rate": "fast"}}, "is not a rate"),
            ("links", {"action": "set", "set": {"delay": "99s"}}, "longer than"),
            ("nodes", {"action": "set", "set": {"rate": "5M"}}, "a node is taken down")):
        with pytest.raises(actions.ActionError, match=re.escape(says)):
            actions.change_of(kind, "L2", asked)


def test_the_vendored_libraries_are_the_pinned_ones_with_their_licences():
    for name, (package, version, licence, digest) in VENDORED.items():
        data = (STATIC / "vendor" / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest, (name, package, version)
        licence_file = re.search(r"\((.+)\)", licence)
        assert licence_file and "Permission is hereby granted" in (
            STATIC / "vendor" / licence_file[1]).read_text()
    page = (STATIC / "index.html").read_text()
    assert not re.search(r"""(src|href)=["']https?:""", page)  # no CDN


# -- a real console ---------------------------------------------------------------------

class WebConsole:
    """`simpleperf lab web` on a free port: its address and token as it printed them."""

    def __init__(self, *args: str) -> None:
        self.port = free_port()
        self.process = subprocess.Popen([*SIMPLEPERF, "lab", "web", "--port", str(self.port),
                                         *args], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        found = re.search(r"(http://\S+/)\?token=(\S+)", line)
        assert found, (line, self.process.stderr.read() if self.process.stderr else "")
        self.base, self.token = found[1], found[2]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                self.request("GET", f"/?token={self.token}")
                break
            except OSError:
                time.sleep(0.1)

    def request(self, method: str, path: str, headers: dict[str, str] | None = None,
                body: bytes | None = None, seconds: float = 10.0) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=seconds)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            answer = connection.getresponse()
            return answer.status, answer.read()
        finally:
            connection.close()

    def close(self) -> str:
        self.process.terminate()
        _, errors = self.process.communicate(timeout=20)
        return errors


@pytest.mark.root
def test_the_console_answers_only_its_token_at_its_own_address(tmp_path):
    console = WebConsole("--results", str(tmp_path))
    try:
        status, page = console.request("GET", f"/?token={console.token}")
        assert status == 200 and b"cytoscape.min.js" in page
        assert console.token.encode() in page  # the page's requests carry it
        for path, headers in ((f"/?token={console.token}x", {}), ("/", {}),
                              ("/api/labs", {"X-Simpleperf-Token": "nope"}),
                              ("/static/console.js", {}),
                              (f"/api/labs?token={console.token}",
                               {"Host": f"evil.example:{console.port}"})):
            status, body = console.request("GET", path, headers)
            assert status == 403 and body.count(b"\n") == 1, (path, body)
        token = {"X-Simpleperf-Token": console.token}
        status, labs = console.request("GET", "/api/labs", token)
        assert status == 200 and isinstance(json.loads(labs)["labs"], list)
        assert console.request("GET", "/static/../app.py", token)[0] == 404
        assert console.request("POST", "/api/labs", {
            "Cookie": f"token={console.token}"})[0] == 403  # a cookie is not the token
        assert console.request("POST", "/api/labs", token, b"x" * 100_000)[0] in (405, 413)
        change = "/api/labs/no-such-lab/links/L1"
        assert console.request("POST", change, {}, b'{"action": "down"}')[0] == 403
        status, said = console.request("POST", change, token, b"{not json")
        assert status == 400 and said.count(b"\n") == 1, said
        status, said = console.request("POST", change, token, b'{"action": "explode"}')
        assert status == 400 and b"one of down, up, set" in said
        status, said = console.request("POST", change, token, b'{"action": "down"}')
        assert status == 409 and b"no-such-lab" in said and said.count(b"\n") == 1, said
        assert console.request("POST", change, token, b"x" * 100_000)[0] == 413
        assert console.request("GET", "/api/labs", {**token, "X-Big": "y" * 10_000})[0] == 400
        # the page's other requests: one line and a status each, never a traceback
        for method, path, body, expected in (
                ("POST", "/api/labs/no-such-lab/positions", b'{"h1": {"x": 1, "y": 2}}', 409),
                ("POST", "/api/labs/no-such-lab/positions", b"[", 400),
                ("POST", "/api/labs/no-such-lab/captures", b'{"where": "L1"}', 409),
                ("POST", "/api/labs/no-such-lab/captures", b"nope", 400),
                ("POST", "/api/labs/no-such-lab/captures/1/stop", b"", 404),
                ("POST", "/api/labs/no-such-lab/captures/x/stop", b"", 404),
                ("GET", "/api/labs/no-such-lab/captures/1/pcap", None, 404),
                ("POST", "/api/labs/no-such-lab/flows", b'{"kind": "tcp"}', 409),
                ("POST", "/api/labs/no-such-lab/flows/1/stop", b"", 404),
                ("GET", "/runs/nope/report.html", None, 404),
                ("GET", "/runs/..%2F..%2Fetc/report.html", None, 404)):
            status, said = console.request(method, path, token, body)
            assert status == expected and said.count(b"\n") == 1, (path, status, said)
        assert console.request("GET", "/runs/nope/report.html")[0] == 403
        status, listed = console.request("GET", "/api/runs", token)
        assert status == 200 and json.loads(listed)["runs"] == []
    finally:
        errors = console.close()
    assert "Traceback" not in errors


@pytest.mark.root
def test_a_bad_port_or_a_port_taken_is_one_line():
    done = subprocess.run([*SIMPLEPERF, "lab", "web", "--port", "99999"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "1 to 65535" in done.stderr
    console = WebConsole()
    try:
        taken = subprocess.run([*SIMPLEPERF, "lab", "web", "--port", str(console.port)],
                               capture_output=True, text=True, timeout=30)
    finally:
        console.close()
    assert taken.returncode == 1 and "cannot listen" in taken.stderr
    assert taken.stderr.count("\n") == 1 and "Traceback" not in taken.stderr


def _live(console: WebConsole, lab: str, until, seconds: float) -> tuple[Any, list]:
    """The console's live updates of `lab`, read as a page reads them, until `until(update)`
    is truthy (its value) or `seconds` pass (None); and every update read."""
    connection = http.client.HTTPConnection("127.0.0.1", console.port, timeout=seconds + 5)
    seen: list = []
    try:
        connection.request("GET", f"/api/live?token={console.token}")
        answer = connection.getresponse()
        assert answer.status == 200
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            line = answer.fp.readline()
            if not line.startswith(b"data: "):
                continue
            update = json.loads(line[6:])["labs"].get(lab)
            if update is None:
                continue
            seen.append(update)
            found = until(update)
            if found:
                return found, seen
        return None, seen
    finally:
        connection.close()


def _forward(update: dict) -> dict:
    (link,) = update["links"] or [{"a_to_b": None}]
    return link["a_to_b"] or {}


@pytest.mark.lab
@pytest.mark.root
@pytest.mark.guest
def test_the_console_reads_the_shaper_s_rate_and_queue_and_reshapes_its_link():
    """With the own shaper and with netem (in the guest; Chromium is too slow under its
    emulated processor, so this drives the page's requests itself): a TCP flow started
    through the console across a 20 Mbit/s pair reads as the link's goodput within 10 %,
    its queue where the shaper keeps it; the link set to 5 Mbit/s through the console
    shows in `lab status` and the live rate follows; the flow stopped, the link falls
    quiet; the lab's journal has each step."""
    lab("up", "pair", "--rate", "20M", "--delay", "5ms")
    console = WebConsole()
    token = {"X-Simpleperf-Token": console.token}
    # (the guest's emulated processor takes seconds to start a Python process: the flow's
    # server, then its client, before the link carries anything)
    try:
        status, said = console.request("POST", "/api/labs/pair/flows", token, json.dumps(
            {"kind": "tcp", "from": "h1", "to": "h2", "duration": "90s",
             "congestion": "cubic"}).encode(), seconds=60.0)
        assert status == 200, said
        flow = json.loads(said)["id"]
        full, seen = _live(console, "pair", lambda u: 18e6 <= (_forward(u).get(
            "bits_per_second") or 0) <= 22e6 and _forward(u), 60.0)
        assert full, [_forward(u) for u in seen]
        queued, seen = _live(console, "pair", lambda u: (_forward(u).get("queue_packets") or
                                                         0) > 0 and _forward(u), 10.0)
        assert queued and queued["queue_delay"] > 0, [_forward(u) for u in seen]
        status, said = console.request("POST", "/api/labs/pair/links/h1-h2", token,
                                       b'{"action": "set", "set": {"rate": "5M"}}',
                                       seconds=60.0)
        assert status == 200 and json.loads(said)["done"] == "h1-h2 set bw 5M", said
        assert re.search(r"^  h1-h2 .* 5 Mbit/s", lab("status", "pair").stdout, re.M)
        slow, seen = _live(console, "pair", lambda u: 4.5e6 <= (_forward(u).get(
            "bits_per_second") or 0) <= 5.5e6 and _forward(u), 15.0)
        assert slow, [_forward(u) for u in seen]
        # CAKE set through the console: its queue is read where it runs (with netem, the
        # kernel's CAKE on the ifb before netem; with the own shaper, the own CAKE)
        status, said = console.request("POST", "/api/labs/pair/links/h1-h2", token,
                                       b'{"action": "set", "set": {"qdisc": "cake"}}',
                                       seconds=60.0)
        assert status == 200, said
        cake, seen = _live(console, "pair", lambda u: _forward(u).get("qdisc") == "cake" and
                           (_forward(u).get("bits_per_second") or 0) > 4e6 and
                           _forward(u), 15.0)
        assert cake and "queue_packets" in cake, [_forward(u) for u in seen]
        status, said = console.request("POST", f"/api/labs/pair/flows/{flow}/stop", token,
                                       seconds=60.0)
        assert status == 200 and json.loads(said)["state"] == "stopped", said
        quiet, seen = _live(console, "pair", lambda u: (_forward(u).get(
            "bits_per_second") or 0) < 1e6 and not [f for f in u["flows"] if f["state"] ==
                                                    "running"], 10.0)
        assert quiet, [_forward(u) for u in seen]
        done = lab("status", "pair").stdout
        for line in (f"flow {flow} started: tcp h1 -> h2 for 90 s (from the console)",
                     "link h1-h2 set bw 5M (from the console)",
                     "link h1-h2 set qdisc cake (from the console)",
                     f"flow {flow} stopped (from the console)"):
            assert line in done, done
    finally:
        errors = console.close()
        lab("down", "pair", check=False, timeout=120)
    assert "Traceback" not in errors


# -- in Chromium ------------------------------------------------------------------------

@contextlib.contextmanager
def _watching(name: str, *up: str, up_seconds: float = 60):
    """Lab `name` up (`lab up NAME *up`), `lab web` and Chromium on it; afterwards,
    whatever happened, the browser quit, the console ended and the lab down, and the
    console said no traceback."""
    lab("up", name, *up, timeout=up_seconds)
    console = WebConsole()
    browser = _browser()
    try:
        yield console, browser
    finally:
        browser.quit()
        errors = console.close()
        lab("down", name, check=False, timeout=120)
    assert "Traceback" not in errors
    # what the page kept with the lab went with it
    for kept in (positions.path(name), journal.path(name), captures.folder(name)):
        assert not kept.exists(), kept


LAST_RATE = ("const s = window.simpleperfConsole.series['h1-h2']; "
             "const last = s && s.ab[s.ab.length - 1]; ")


def _browser():
    from selenium import webdriver

    chromium = shutil.which("chromium")
    driver = shutil.which("chromedriver")
    assert chromium and driver, "Debian's chromium and chromium-driver: run bash scripts/test"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--window-size=1280,800"):
        options.add_argument(argument)
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(driver))


def _wait(browser, script: str, seconds: float = 10.0):
    """The page's state (window.simpleperfConsole) read by `script` until it is truthy."""
    deadline = time.monotonic() + seconds
    while True:
        value = browser.execute_script(script)
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


@pytest.mark.lab
@pytest.mark.root
def test_the_page_draws_the_pair_shows_a_flow_live_and_sets_its_link():
    """A TCP flow across a 20 Mbit/s pair shows on the page as the link's live goodput,
    within 10 % of the link, within 5 s; the link set to 5 Mbit/s from the page shows in
    `lab status` and on the page; when the flow stops, the page's rate falls."""
    with _watching("pair", "--rate", "20M", "--delay", "5ms") as (console, browser), \
            contextlib.ExitStack() as later:
        browser.get(f"{console.base}?token={console.token}")
        assert _wait(browser, "const s = window.simpleperfConsole; return s && s.drawn && "
                              "s.drawn.nodes === 2 && s.drawn.links === 1")
        port = str(free_port())
        server = Ready("h2", *SIMPLEPERF, "-s", "-p", port, ready="listening")
        later.callback(server.stop)
        flow = subprocess.Popen(["ip", "netns", "exec", "h1", *SIMPLEPERF, "-c", "10.0.0.2",
                                 "-p", port, "-t", "14"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        began = time.monotonic()
        rate = _wait(browser, LAST_RATE + "return last > 18e6 ? last : null", seconds=5.0)
        seen = time.monotonic() - began
        assert rate and 18e6 <= rate <= 22e6, rate
        assert seen <= 5.0
        # the link's queue, where the 20 Mbit/s limit holds the flow back, on the page too
        queued = _wait(browser, "const s = window.simpleperfConsole.series['h1-h2']; "
                                "return Math.max(...s.queue_ab.filter(q => q !== null))", 3.0)
        assert queued and queued > 0, queued
        # the link set to 5 Mbit/s from the page's form: lab status says so, and the
        # flow's rate on the page follows
        browser.execute_script("window.simpleperfConsole.select('h1-h2')")
        browser.find_element("name", "rate").send_keys("5M")
        browser.find_element("id", "set").click()
        done = _wait(browser, "return window.simpleperfConsole.lastAction")
        assert done and done["ok"] and "h1-h2 set bw 5M" in done["said"], done
        assert re.search(r"^  h1-h2 .* 5 Mbit/s", lab("status", "pair").stdout, re.M)
        slowed = _wait(browser, LAST_RATE + "return last < 5.5e6 && last > 4.5e6", 6.0)
        assert slowed, browser.execute_script(LAST_RATE + "return s.ab.slice(-5)")
        flow.wait(20)
        quiet = _wait(browser, LAST_RATE + "return last < 1e6", seconds=5.0)
        assert quiet
        drawn = browser.execute_script("return document.querySelectorAll('#graph canvas')"
                                       ".length")
        assert drawn >= 1


@pytest.mark.lab
@pytest.mark.root
def test_the_page_draws_the_portfolio_s_15_nodes_and_14_links_and_a_link_taken_down():
    with _watching("portfolio", up_seconds=180) as (console, browser):
        browser.get(f"{console.base}?token=not-the-token")
        assert "a wrong or missing token" in browser.page_source
        assert browser.execute_script("return window.simpleperfConsole") is None
        began = time.monotonic()
        browser.get(f"{console.base}?token={console.token}")
        assert _wait(browser, "const s = window.simpleperfConsole; return s && s.drawn && "
                              "s.drawn.nodes === 15 && s.drawn.links === 14")
        loaded = time.monotonic() - began
        # the first layout is kept with the lab: a page opened again draws it the same way
        assert _wait(browser, "return window.simpleperfConsole.positionsSaved === 'saved'")
        placed = browser.execute_script("return window.simpleperfConsole.positions()")
        kept = json.loads(positions.path("portfolio").read_text())
        assert set(kept) == set(placed) and len(kept) == 15
        browser.get(f"{console.base}?token={console.token}")
        assert _wait(browser, "const s = window.simpleperfConsole; return s && s.drawn && "
                              "s.drawn.nodes === 15")
        again = browser.execute_script("return window.simpleperfConsole.positions()")
        assert all(abs(again[n]["x"] - kept[n]["x"]) < 0.5 and
                   abs(again[n]["y"] - kept[n]["y"]) < 0.5 for n in kept), (again, kept)
        kinds = browser.execute_script("return window.simpleperfConsole.lab.nodes"
                                       ".map(n => n.kind)")
        assert sorted(set(kinds)) == ["host", "router", "switch"]
        link = browser.execute_script("return window.simpleperfConsole.lab.links[0].name")
        browser.execute_script(f"window.simpleperfConsole.select({json.dumps(link)})")
        browser.find_element("id", "down").click()
        done = _wait(browser, "return window.simpleperfConsole.lastAction")
        assert done and done["ok"] and done["said"] == f"{link} down", done
        shown = _wait(browser, "return window.simpleperfConsole.lab.links.find("
                               f"l => l.name === {json.dumps(link)}).down")
        assert shown
        status = lab("status", "portfolio").stdout
        assert re.search(rf"^  {re.escape(link)} .* DOWN  ", status, re.M), status
        print(f"portfolio page loaded and drawn in {loaded:.2f} s")


@pytest.mark.lab
@pytest.mark.root
def test_a_peering_taken_down_from_the_page_reroutes_and_the_timeline_shows_it():
    """wan's preferred peering P13 taken down from the page: the lab's routing converges
    on the transit path (the change's answer says so), the timeline shows the outage and
    the return, and a host across still reaches the other AS."""
    with _watching("wan", up_seconds=180) as (console, browser):
        browser.get(f"{console.base}?token={console.token}")
        assert _wait(browser, "const s = window.simpleperfConsole; return s && s.drawn && "
                              "s.lab.lab === 'wan'", 15.0)
        # a flow from the page crosses the preferred peering, its path drawn on the graph
        flow = browser.execute_script(
            "return window.simpleperfConsole.startFlow({kind: 'ping', from: 'h1', to: 'h3', "
            "duration: '60s'})")
        assert flow and "P13" in flow["path"] and "P12" not in flow["path"], flow
        assert _wait(browser, "return (window.simpleperfConsole.highlighted || [])"
                              ".includes('P13')")
        browser.execute_script("window.simpleperfConsole.select('P13')")
        browser.find_element("id", "down").click()
        timeline = "const t = window.simpleperfConsole.timeline; "
        down = _wait(browser, timeline + "return t.find(e => e === 'link P13 down (page)')",
                     90.0)
        assert down, browser.execute_script(timeline + "return t")
        # what routing did after it, from the lab's journal, and what the routers
        # themselves logged: the peering's two BGP sessions closed as its interface went
        routed = _wait(browser, timeline + "return t.find(e => e.startsWith('routing: "
                                "converged') && e.includes('(after link P13 down)'))", 30.0)
        assert routed, browser.execute_script(timeline + "return t")
        said = _wait(browser, timeline + "const d = t.filter(e => e.startsWith('router ') "
                              "&& / BGP session with \\S+ \\(r[24]\\) down/.test(e)); "
                              "return d.length >= 2 ? d : null", 15.0)
        assert said, browser.execute_script(timeline + "return t")
        assert "link P13 down (from the console)" in lab("status", "wan").stdout
        # the flow's path now: through the transit AS
        moved = _wait(browser, "const h = window.simpleperfConsole.highlighted || []; "
                               "return h.includes('P12') && h.includes('P23') && "
                               "!h.includes('P13') && h", 10.0)
        assert moved, browser.execute_script("return window.simpleperfConsole.highlighted")
        reached = subprocess.run(["ip", "netns", "exec", "h1", "ping", "-c", "2", "-W", "2",
                                  str(topology.load("wan").address_of("h3"))],
                                 capture_output=True, text=True, timeout=30)
        assert reached.returncode == 0, reached.stdout
        browser.find_element("id", "up").click()
        back = _wait(browser, timeline + "return t.find(e => e === 'link P13 up (page)')",
                     90.0)
        assert back, browser.execute_script(timeline + "return t")
        again = _wait(browser, timeline + "return t.filter(e => e.startsWith('router ') && "
                               "/ BGP session with \\S+ \\(r[24]\\) up$/.test(e)).length", 30.0)
        assert again and again >= 2, browser.execute_script(timeline + "return t")
        shown = browser.execute_script("return [...document.querySelectorAll('#timeline li')]"
                                       ".map(e => e.textContent)")
        assert any("link P13 down" in line for line in shown) and any(
            "link P13 up" in line for line in shown)
        # newest first: the return above the outage
        assert [i for i, line in enumerate(shown) if "link P13 up (page)" in line][0] < \
            [i for i, line in enumerate(shown) if "link P13 down (page)" in line][0]


@pytest.mark.lab
@pytest.mark.root
def test_a_capture_from_the_page_downloads_as_pcapng_and_an_rpm_flow_gives_its_result():
    """A capture of the selected link started from the page's form while a TCP flow from
    the page crosses it, stopped from its row: the pcapng it downloads (with the token) holds
    the flow's packets, and `lab analyze`'s table beside it says so; an rpm flow started
    from the page ends with its RPM; the lab's journal has each, marked as the page's."""
    with _watching("pair", "--rate", "20M", "--delay", "10ms") as (console, browser):
        browser.get(f"{console.base}?token={console.token}")
        assert _wait(browser, "const s = window.simpleperfConsole; return s && s.drawn")
        browser.execute_script("window.simpleperfConsole.select('h1-h2')")
        browser.find_element("id", "start-capture").click()
        started = _wait(browser, "return window.simpleperfConsole.lastCapture")
        assert started and started["ok"] and started["said"]["where"] == "h1-h2", started
        assert "lab web capture 1 of h1-h2: pid" in lab("status", "pair").stdout
        flow = browser.execute_script(
            "return window.simpleperfConsole.startFlow({kind: 'tcp', from: 'h1', to: 'h2', "
            "duration: '3s'})")
        assert flow and flow["path"] == ["h1-h2"], flow
        assert _wait(browser, "const f = window.simpleperfConsole.flows; "
                              "return f && f.length && f[0].state === 'ended'", 15.0)
        browser.find_element("css selector", "#captures button.stop-capture").click()
        ended = _wait(browser, "const c = window.simpleperfConsole.captures; "
                               "return c && c[0].state === 'ended' && c[0]", 15.0)
        assert ended and ended["packets"] > 1000, ended
        assert any("10.0.0.1" in line and "10.0.0.2" in line for line in ended["analysis"])
        link = browser.find_element("css selector", "#captures a.pcap").get_attribute("href")
        assert link.endswith(f"/api/labs/pair/captures/1/pcap?token={console.token}")
        status, data = console.request("GET", link.split(str(console.port), 1)[1])
        assert status == 200 and data[:4] == b"\x0a\x0d\x0d\x0a"  # pcapng's first block
        assert len(data) == ended["bytes"]
        assert console.request("GET", "/api/labs/pair/captures/1/pcap")[0] == 403
        rpm = browser.execute_script(
            "return window.simpleperfConsole.startFlow({kind: 'rpm', from: 'h1', to: 'h2', "
            "duration: '4s'})")
        assert rpm and rpm["kind"] == "rpm", browser.execute_script(
            "return window.simpleperfConsole.lastFlow")
        measured = _wait(browser, "const f = (window.simpleperfConsole.flows || []).find("
                                  f"f => f.id === {rpm['id']}); return f && f.rpm", 40.0)
        assert measured and measured > 0, browser.execute_script(
            "return window.simpleperfConsole.flows")
        status_text = lab("status", "pair").stdout
        for said in ("capture 1 of h1-h2 started (from the console)",
                     "capture 1 of h1-h2 ended: ", f"flow {rpm['id']} started: rpm h1 -> h2"):
            assert said in status_text, status_text
        assert captures.folder("pair").is_dir()


@pytest.mark.lab
@pytest.mark.root
def test_past_runs_are_listed_with_their_verdicts_and_open_their_report(tmp_path):
    """A run of a small experiment, then the console on its results folder: the page lists
    it with its case's verdict, and its report opens from the list."""
    plan = tmp_path / "tiny.toml"
    plan.write_text(TINY)
    lab("run", str(plan), "--quick", "--results", str(tmp_path / "runs"), timeout=300)
    (folder,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    console = WebConsole("--results", str(tmp_path / "runs"))
    browser = _browser()
    try:
        browser.get(f"{console.base}?token={console.token}")
        runs = _wait(browser, "const s = window.simpleperfConsole; "
                              "return s && s.runs.length && s.runs", 15.0)
        assert runs and runs[0]["name"] == folder.name and runs[0]["experiment"] == "tiny"
        (case,) = runs[0]["verdicts"]
        assert case["case"] == "1" and case["within"] in (True, False), case
        row = browser.find_element("css selector", "#runs tbody tr").text
        assert "tiny" in row and ("1 within" in row or "1 outside" in row), row
        report = browser.find_element("css selector", "#runs a.report").get_attribute("href")
        browser.get(report)
        assert "simpleperf lab run: tiny" in browser.find_element("tag name", "h1").text
        assert browser.find_elements("css selector", "table.verdicts")
    finally:
        browser.quit()
        errors = console.close()
    assert "Traceback" not in errors


@pytest.mark.lab
@pytest.mark.root
def test_the_bufferbloat_tutorial_s_live_steps_show_the_queue_and_its_cure():
    """docs/tutorials/bufferbloat.md, "Watch it live": across a 20 Mbit/s link with a
    1000-packet drop-tail queue, a CUBIC flow and a ping started from the page; the ping's
    RTT climbs past 300 ms (1000 frames take 606 ms to drain) while the queue holds hundreds
    of packets; fq_codel set from the page brings it to the path's 20 ms, the link still
    full."""
    with _watching("pair", "--rate", "20M", "--delay", "10ms", "--queue", "1000") as (
            console, browser):
        browser.get(f"{console.base}?token={console.token}")
        assert _wait(browser, "const s = window.simpleperfConsole; return s && s.drawn")
        start = "return window.simpleperfConsole.startFlow(%s)"
        bulk = browser.execute_script(start % json.dumps(
            {"kind": "tcp", "from": "h1", "to": "h2", "duration": "70s",
             "congestion": "cubic"}))
        ping = browser.execute_script(start % json.dumps(
            {"kind": "ping", "from": "h1", "to": "h2", "duration": "70s"}))
        assert bulk and ping, browser.execute_script("return window.simpleperfConsole.lastFlow")
        last_rtt = ("const f = (window.simpleperfConsole.flows || []).find(f => f.id === "
                    f"{ping['id']}); const s = f && f.samples[f.samples.length - 1]; "
                    "return s && s.rtt_ms; ")
        bloated = _wait(browser, last_rtt.replace("return s && s.rtt_ms; ",
                                                  "return s && s.rtt_ms > 300 && s.rtt_ms;"),
                        30.0)
        assert bloated, browser.execute_script(last_rtt)
        queued = browser.execute_script("const s = window.simpleperfConsole.series['h1-h2']; "
                                        "return Math.max(...s.queue_ab.slice(-5))")
        assert queued > 300, queued
        browser.execute_script("window.simpleperfConsole.select('h1-h2')")
        browser.find_element("name", "qdisc").send_keys("fq_codel")
        browser.find_element("id", "set").click()
        done = _wait(browser, "return window.simpleperfConsole.lastAction")
        assert done and done["ok"] and "qdisc fq_codel" in done["said"], done
        cured = _wait(browser, last_rtt.replace("return s && s.rtt_ms; ",
                                                "return s && s.rtt_ms < 40 && s.rtt_ms;"), 20.0)
        assert cured and cured >= 20, browser.execute_script(last_rtt)
        full = _wait(browser, LAST_RATE + "return last > 17e6 && last", 5.0)
        assert full and full <= 21e6, browser.execute_script(LAST_RATE + "return s.ab")


TINY = """
name = "tiny"
topology = "pair"
[pair]
rate = "20M"
delay = "5ms"
[quick]
duration = "3s"
[cases]
1 = "one flow"
[[steps]]
case = "1"
name = "tcp"
flows = [{ kind = "tcp", from = "h1", to = "h2" }]
"""


@pytest.mark.lab
@pytest.mark.root
def test_a_flow_started_from_the_page_runs_live_beside_theory_and_ends_when_stopped():
    """A TCP flow started from the page's form across a 20 Mbit/s pair: its goodput on the
    page within 10 % of the link within 5 s, theory's beside it, its RTT and window; the
    stop button ends its processes, which the lab's record no longer lists."""
    with _watching("pair", "--rate", "20M", "--delay", "10ms") as (console, browser):
        browser.get(f"{console.base}?token={console.token}")
        assert _wait(browser, "const s = window.simpleperfConsole; return s && s.drawn")
        before = len(ownership.load("pair").processes)
        browser.find_element("name", "duration").send_keys("60s")
        began = time.monotonic()
        browser.find_element("id", "start").click()
        # (its first second can read above the link: what the sender wrote while its
        # window opened, queued before the bottleneck)
        flow = _wait(browser, "const f = (window.simpleperfConsole.flows || [])[0]; "
                              "const s = f && f.samples[f.samples.length - 1]; "
                              "return s && s.bits_per_second >= 18e6 && "
                              "s.bits_per_second <= 22e6 ? f : null", 8.0)
        assert flow, browser.execute_script("return [window.simpleperfConsole.lastFlow, "
                                            "window.simpleperfConsole.flows]")
        assert time.monotonic() - began <= 8.0  # its server's start, then within 5 s
        last = flow["samples"][-1]
        assert 18e6 <= flow["predicted_bits_per_second"] <= 21e6
        assert last["rtt_ms"] >= 20 and last["cwnd_bytes"] > 0  # 10 ms each way, a window
        assert len(ownership.load("pair").processes) == before + 2  # its server and client
        browser.find_element("css selector", "#flows button.stop").click()
        stopped = _wait(browser, "const f = window.simpleperfConsole.flows[0]; "
                                 "return f.state === 'stopped'", 5.0)
        assert stopped
        assert len(ownership.load("pair").processes) == before
        refused = browser.execute_script(
            "return window.simpleperfConsole.startFlow({kind: 'tcp', from: 'h1', to: 'h9'})"
            ".then(() => window.simpleperfConsole.lastFlow)")
        assert not refused["ok"] and "no node h9" in refused["said"]
