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

import pytest
from helpers import SIMPLEPERF, free_port
from hypothesis import given, settings
from hypothesis import strategies as st
from lab_helpers import Ready, lab

from simpleperf.lab.model import topology
from simpleperf.lab.net import build, changes, ownership
from simpleperf.lab.net.shaping import delayline
from simpleperf.lab.web import actions, counters, qdiscs, views
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
    ends = {link.a.node: {link.a.interface: counters.Counters(0, 0, 0, 10, 1, 0)},
            link.b.node: {link.b.interface: counters.Counters(10, 1, 0, 0, 0, 0)}}

    def tbf(backlog: int, drops: int) -> dict[str, dict[str, qdiscs.QdiscStats]]:
        return {"pair-wire": {"w1b": qdiscs.QdiscStats("tbf", 0x10000, qdiscs.ROOT, 0, 0,
                                                       backlog, backlog * 1500, drops, 0)}}

    (rates,) = views.link_rates(model, views.Reading(0.0, ends, tbf(3, 10)),
                                views.Reading(1.0, ends, tbf(40, 25)), egress)
    assert rates["a_to_b"]["queue_packets"] == 40 and rates["a_to_b"]["dropped"] == 15
    assert "queue_packets" not in rates["b_to_a"]  # nothing read at w1a
    own = {"pair": {("h1-h2", "a_to_b"): {"packets": 7, "bytes": 10500, "drops": 4,
                                          "marks": 9}}}
    later = {"pair": {("h1-h2", "a_to_b"): {"packets": 2, "bytes": 3000, "drops": 6,
                                            "marks": 12}}}
    (rates,) = views.link_rates(model, views.Reading(0.0, ends, tbf(3, 10), own),
                                views.Reading(1.0, ends, tbf(40, 25), later), egress)
    assert (rates["a_to_b"]["queue_packets"], rates["a_to_b"]["dropped"],
            rates["a_to_b"]["marked"]) == (2, 2, 3)  # the own discipline's, not tbf's


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
                body: bytes | None = None) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
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
def test_the_console_answers_only_its_token_at_its_own_address():
    console = WebConsole()
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
        browser.execute_script("window.simpleperfConsole.select('P13')")
        browser.find_element("id", "down").click()
        down = _wait(browser, "const t = window.simpleperfConsole.timeline; "
                              "return t.find(e => e.startsWith('P13 down'))", 90.0)
        assert down and "routing: converged" in down, down
        reached = subprocess.run(["ip", "netns", "exec", "h1", "ping", "-c", "2", "-W", "2",
                                  str(topology.load("wan").address_of("h3"))],
                                 capture_output=True, text=True, timeout=30)
        assert reached.returncode == 0, reached.stdout
        browser.find_element("id", "up").click()
        back = _wait(browser, "const t = window.simpleperfConsole.timeline; "
                              "return t.find(e => e.startsWith('P13 up'))", 90.0)
        assert back, browser.execute_script("return window.simpleperfConsole.timeline")
        shown = browser.execute_script("return [...document.querySelectorAll('#timeline li')]"
                                       ".map(e => e.textContent)")
        assert any("P13 down" in line for line in shown) and any("P13 up" in line
                                                                  for line in shown)


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
