"""Routed labs with real FRR daemons in real namespaces: convergence, paths chosen by OSPF
and BGP, failover when a link goes down, changes on a running lab, cleanup of daemons.

CI installs frr (scripts/setup). Tolerances on RTTs are wide: the paths differ by tens of
milliseconds, a shared machine's noise is far below that.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import time

import pytest
from helpers import SIMPLEPERF
from lab_helpers import Ready, assert_gone, in_node, lab, needs_lab, ping_rtts

from simpleperf.lab.model import theory, topology
from simpleperf.lab.net import lifecycle, ownership
from simpleperf.lab.net.routing import tables
from simpleperf.lab.net.system import existing_namespaces, is_running

pytestmark = needs_lab

CAMPUS = {"h1", "h2", "h3", "h4", "h5", "r1", "r2", "r3", "s1", "s2", "campus-wire"}
WAN = {"h1", "h2", "h3", "h4", "r1", "r2", "r3", "r4", "r5", "s1", "s2", "wan-wire"}


def frr_processes(lab_name: str) -> set[int]:
    """FRR daemons whose files are in the lab's folder (zebra, ospfd, bgpd, ...)."""
    marker = str(ownership.RECORD_DIR / f"{lab_name}.frr").encode()
    found = set()
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if marker in cmdline.read():
                    found.add(int(entry))
        except (OSError, ValueError):
            continue
    return found


def next_hop(node: str, address: str) -> str:
    done = in_node(node, "ip", "route", "get", address)
    match = re.search(r" via (\S+)", done.stdout)
    return match.group(1) if match else "direct"


def median_rtt(node: str, address: str, count: int = 5) -> float:
    rtts = ping_rtts(node, address, count, interval=0.05)
    assert rtts, f"{node} cannot ping {address}"
    return statistics.median(rtts)


@pytest.fixture
def campus():
    done = lab("up", "campus", timeout=120)
    assert re.search(r"routing: FRR daemons started on 3 routers in [\d.]+ s; converged "
                     r"[\d.]+ s later", done.stdout), done.stdout
    yield
    lab("down", "campus")
    assert_gone(CAMPUS)
    assert not frr_processes("campus")


def test_ospf_converges_and_fails_over_to_the_backup_link_and_back(campus):
    """Every host reaches every other through r2 (cost 20), the backup r1-r3 (cost 30)
    carries traffic while C2 is down, and r2's path returns when it comes back."""
    for source, target in (("h1", "10.10.2.11"), ("h5", "10.10.1.13"), ("h3", "10.10.2.12")):
        assert ping_rtts(source, target, 2), (source, target)
    assert next_hop("r1", "10.10.2.11") == "10.10.12.2"
    primary = median_rtt("h1", "10.10.2.11")
    down = lab("link", "C2", "down")
    assert re.search(r"routing: converged [\d.]+ s after the change", down.stdout), down.stdout
    assert next_hop("r1", "10.10.2.11") == "10.10.13.2"
    backup = median_rtt("h1", "10.10.2.11")
    # 2 x (1+1) ms, then 2 x 5 ms: what the machine adds (more in an emulated guest) is
    # the same on both paths.
    assert 4 < backup - primary < 8, (primary, backup)
    assert "C2" in lab("status", "campus").stdout.split("DOWN")[0].splitlines()[-1]
    lab("link", "C2", "up")
    assert next_hop("r1", "10.10.2.11") == "10.10.12.2"
    assert median_rtt("h1", "10.10.2.11") < backup - 4


def test_status_and_vtysh_show_what_the_daemons_know(campus):
    status = lab("status", "campus").stdout
    assert "routing: ospf (FRR; OSPF hello 1 s, dead 4 s" in status
    assert re.search(r"ospf 10\.10\.12\.2 \(router \S+\) Full on r1-eth1", status), status
    assert "route 10.10.2.0/24 via 10.10.12.2" in status
    shown = lab("exec", "r2", "--", "vtysh", "-c", "show ip ospf neighbor").stdout
    assert shown.count("Full/") == 2, shown  # r1 and r3
    assert "10.10.2.0/24" in lab("exec", "r1", "--", "vtysh", "-c", "show ip route").stdout


def test_node_down_takes_every_link_and_routing_goes_around(campus):
    lab("node", "r2", "down")
    assert next_hop("r1", "10.10.2.11") == "10.10.13.2"
    assert ping_rtts("h1", "10.10.2.11", 2)
    lab("node", "r2", "up")
    assert next_hop("r1", "10.10.2.11") == "10.10.12.2"


def test_bgp_prefers_the_shorter_as_path_and_moves_when_it_fails():
    # not in the emulated netem guest: BGP does not see how links are shaped, and five
    # routers' FRR take that guest four minutes to start (OSPF's test is routing's there)
    done = lab("up", "wan", timeout=120)
    try:
        assert "routing: FRR daemons started on 5 routers" in done.stdout, done.stdout
        best = lab("exec", "r2", "--", "vtysh", "-c", "show bgp ipv4 unicast 10.3.1.0/24").stdout
        assert "65003" in best and next_hop("r2", "10.3.1.11") == "172.16.13.2"
        direct = median_rtt("h1", "10.3.1.11")
        lab("link", "P13", "down")
        assert next_hop("r2", "10.3.1.11") == "172.16.12.2"  # through AS 65002
        assert next_hop("r4", "10.1.1.11") == "172.16.23.1"  # and back the same way
        transit = median_rtt("h1", "10.3.1.11")
        # 2 x 20 ms, then 2 x 60 ms: traffic crosses the transit links. A busy machine only
        # adds (the emulated netem guest once measured 258 ms), so the bound is the lower one.
        assert transit - direct > 70, (direct, transit)
        lab("link", "P13", "up")
        assert next_hop("r2", "10.3.1.11") == "172.16.13.2"
    finally:
        lab("down", "wan")
    assert_gone(WAN)
    assert not frr_processes("wan")


def test_static_and_ospf_portfolio_take_the_same_paths():
    """Theory along the routes OSPF installed equals theory along the static file's."""
    static = topology.load("portfolio")
    lab("up", "portfolio-ospf", timeout=120)
    try:
        ospf = topology.load("portfolio-ospf")
        nodes = [n.name for n in ospf.nodes.values() if n.kind != "switch"]
        routed = tables.installed(ospf, tables.read(nodes))
        for source in static.hosts():
            for target in static.hosts():
                if source == target:
                    continue
                by_file = [(link.name, node) for link, node in
                           theory.path(static, source, target).hops]
                by_ospf = [(link.name, node) for link, node in
                           theory.path(routed, source, target).hops]
                assert by_file == by_ospf, (source, target)
        assert ping_rtts("h1", "10.0.7.2", 2)  # and packets do go: h1 to h9
    finally:
        lab("down", "pf-ospf")


def test_sigkill_of_the_lab_leaves_no_daemon_behind(tmp_path):
    """Kill `lab up` while its daemons converge: the next `lab down` stops every one of them
    (and removes their folder), because each was recorded before it ran."""
    victim = subprocess.Popen(SIMPLEPERF + ["lab", "up", "campus"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(frr_processes("campus")) < 6:
        time.sleep(0.01)
    assert len(frr_processes("campus")) == 6  # zebra and ospfd on three routers
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    record = ownership.load("campus")
    assert record is not None and record.state == "remains"
    done = lab("down", "campus")
    assert done.stdout.count("(zebra on r") == 3 and done.stdout.count("(ospfd on r") == 3
    time.sleep(0.2)
    assert not frr_processes("campus")
    assert not (ownership.RECORD_DIR / "campus.frr").exists()
    assert_gone(CAMPUS)


def test_a_raw_frr_fragment_is_applied_and_a_bad_one_refused(tmp_path):
    source = topology.load("campus").source.replace(
        "r2 = {}", 'r2 = { frr = "ip route 10.99.0.0/24 blackhole\\n" }')
    good = tmp_path / "fragment.toml"
    good.write_text(source)
    lab("up", str(good), timeout=120)
    try:
        assert "10.99.0.0/24" in in_node("r2", "ip", "route").stdout
        assert "staticd on r2" in lab("status", "campus").stdout
    finally:
        lab("down", "campus")
    bad = tmp_path / "bad.toml"
    bad.write_text(source.replace("ip route 10.99.0.0/24 blackhole", "ip rooute nowhere"))
    done = lab("up", str(bad), check=False, timeout=120)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "node r2: its frr fragment was refused" in done.stderr
    assert not CAMPUS & existing_namespaces()
    assert not frr_processes("campus") and ownership.load("campus") is None
    # A bad line after `exit` lines, which running daemons would ignore without a word.
    after = tmp_path / "after.toml"
    after.write_text(source.replace("ip route 10.99.0.0/24 blackhole",
                                    "router ospf\\nexit\\nexit\\nip rooute nowhere"))
    done = lab("up", str(after), check=False, timeout=120)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "node r2: its frr fragment was refused: line 4" in done.stderr
    assert "ip rooute nowhere" in done.stderr
    assert not (ownership.RECORD_DIR / "campus.lock").exists()  # a failed up leaves nothing


def test_malformed_routing_creates_nothing(tmp_path):
    broken = tmp_path / "broken.toml"
    broken.write_text(topology.load("campus").source.replace("r1 = {}", "r1 = { asn = 1 }"))
    done = lab("up", str(broken), check=False)
    assert done.returncode == 1
    assert done.stderr == ("simpleperf lab: error: node r1: asn is missing (when one router "
                           "has an asn, every router needs one)\n").replace("r1: asn is",
                                                                            "r2: asn is")
    assert not CAMPUS & existing_namespaces()


@pytest.mark.guest
def test_link_set_and_down_up_on_a_running_pair():
    """`lab link` on a lab without routing: the delay changes what ping sees (the delay
    line reads its plan again, or netem's qdisc is replaced), loss drops packets, and a
    link that is down passes nothing until it is up."""
    lab("up", "pair", "--delay", "5ms", "--rate", "50M")
    try:
        before = median_rtt("h1", "10.0.0.2")  # 2 x 5 ms
        said = lab("link", "h1-h2", "set", "--delay", "20ms").stdout
        assert said.startswith("link h1-h2 set delay 20ms ("), said
        after = median_rtt("h1", "10.0.0.2")  # 2 x 20 ms
        assert 26 < after - before < 34, (before, after)
        assert "delay 20 ms one-way" in lab("status", "pair").stdout
        lab("link", "h1-h2", "set", "--loss", "100%")
        assert ping_rtts("h1", "10.0.0.2", 5) == []
        lab("link", "h1-h2", "set", "--loss", "0")
        lab("link", "h1-h2", "down")
        assert ping_rtts("h1", "10.0.0.2", 3) == []
        lab("link", "h1-h2", "up")
        assert abs(median_rtt("h1", "10.0.0.2") - after) < 4
        wrong = lab("link", "L9", "down", check=False)
        assert wrong.returncode == 1 and "lab pair has no link L9 (links: h1-h2)" in wrong.stderr
        usage = lab("link", "h1-h2", "down", "--delay", "5ms", check=False)
        assert usage.returncode == 2 and "--delay goes with 'set'" in usage.stderr
    finally:
        lab("down", "pair")


def test_frr_missing_is_one_line_before_anything_is_built(monkeypatch, tmp_path):
    monkeypatch.setenv("SIMPLEPERF_FRR_DIR", str(tmp_path))
    done = lab("up", "campus", check=False)
    assert done.returncode == 1
    assert done.stderr == ("simpleperf lab: error: routing = 'ospf' needs FRRouting's ospfd, "
                           "zebra (Debian: apt-get install frr)\n")
    assert not CAMPUS & existing_namespaces()


def test_bfd_runs_beside_ospf_when_asked(tmp_path):
    """timers = { bfd = true }: bfdd on every router, and a BFD session up beside each OSPF
    adjacency (what would notice a silent failure in 3 x bfd_interval)."""
    source = topology.load("campus").source.replace(
        'routing = "ospf"', 'routing = "ospf"\ntimers = { bfd = true, bfd_interval = "50ms" }')
    path = tmp_path / "campus-bfd.toml"
    path.write_text(source)
    done = lab("up", str(path), timeout=120)
    try:
        assert "BFD every 50 ms, down after 3 missed" in done.stdout, done.stdout
        deadline = time.monotonic() + 10  # sessions start once OSPF's neighbours are Full
        while True:
            peers = lab("exec", "r1", "--", "vtysh", "-c", "show bfd peers brief").stdout
            if peers.count(" up ") == 2 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert peers.count(" up ") == 2, peers  # r2 over C1, r3 over B1
        assert "bfdd on r2" in lab("status", "campus").stdout
    finally:
        lab("down", "campus")
    assert not frr_processes("campus")


def test_equal_costs_install_multipath_and_the_kernel_spreads_flows(tmp_path):
    """With the backup link at the primary path's cost, OSPF installs both next hops and
    the kernel hashes each flow's addresses and ports onto one: over 20 source ports both
    paths are taken (all on one would happen once in 500,000)."""
    source = topology.load("campus").source.replace("cost = 30", "cost = 20")
    path = tmp_path / "campus-ecmp.toml"
    path.write_text(source)
    lab("up", str(path), timeout=120)
    try:
        model = topology.parse(source)
        routes = {str(r.destination): r for r in tables.read(["r1"])["r1"]}
        assert sorted(map(str, routes["10.10.2.0/24"].gateways)) == ["10.10.12.2",
                                                                       "10.10.13.2"]
        taken = {" + ".join(" ".join(path) for path in tables.flow_paths(
                     model, "h1", ("10.10.1.11", port, "10.10.2.11", 5201, "tcp")))
                 for port in range(40000, 40020)}
        assert taken == {"h1 r1 r2 r3 h4", "h1 r1 r3 h4"}
    finally:
        lab("down", "campus")


def tx_packets(node: str, interface: str) -> int:
    shown = json.loads(in_node(node, "ip", "-json", "-stats", "link", "show", "dev",
                               interface).stdout)
    return int(shown[0]["stats64"]["tx"]["packets"])


def test_per_packet_multipath_alternates_paths_and_reorders(tmp_path):
    """multipath = "per-packet" on equal costs: r1 sends one UDP flow's datagrams over both
    paths in turn (about half each), and since one path is 3 ms longer, datagrams arrive
    out of order and with jitter of milliseconds. When one path fails, its share goes to the
    other at once (no datagram of a ping lost), and the followers end with the lab."""
    source = topology.load("campus").source.replace("cost = 30", "cost = 20").replace(
        'routing = "ospf"', 'routing = "ospf"\nmultipath = "per-packet"')
    path = tmp_path / "campus-spray.toml"
    path.write_text(source)
    model = topology.parse(source)
    ports = {link.name: next(end.interface for end in (link.a, link.b) if end.node == "r1")
             for link in model.links if link.name in ("C1", "B1")}
    lab("up", str(path), timeout=120)
    try:
        record = lifecycle.find("campus")
        followers = [p for p in record.processes if p.what.startswith("per-packet")]
        assert len(followers) == 3
        assert "ospf, equal-cost paths taken packet by packet (FRR;" in lab("status").stdout
        paths = tables.flow_paths(model, "h1", ("10.10.1.11", 40000, "10.10.2.11", 5201,
                                                "udp"))
        assert [" ".join(p) for p in paths] == ["h1 r1 r2 r3 h4", "h1 r1 r3 h4"]
        before = {name: tx_packets("r1", port) for name, port in ports.items()}
        server = Ready("h4", *SIMPLEPERF, "-s", "-p", "5201", ready="listening")
        try:
            done = in_node("h1", *SIMPLEPERF, "-c", "10.10.2.11", "-p", "5201", "-u", "-b",
                           "5M", "-l", "1000", "-t", "2", "-J")
        finally:
            server.stop()
        result = json.loads(done.stdout)
        udp = result["end"]["streams"][0]["udp"]
        carried = {name: tx_packets("r1", port) - before[name] for name, port in ports.items()}
        assert min(carried.values()) > 0.4 * udp["packets"], (carried, udp)
        assert udp["out_of_order"] > 0 and udp["jitter_ms"] > 1.0, udp
        lab("link", "C1", "down")
        rtts = ping_rtts("h1", "10.10.2.11", 20, interval=0.01)
        assert len(rtts) == 20
        copied = in_node("r1", "ip", "route", "show", "table", "all").stdout
        assert "via 10.10.12.2" not in copied, copied  # every copy follows OSPF's new route
    finally:
        lab("down", "campus")
    assert not any(is_running(p.pid, p.start_time) for p in followers)


def test_a_failover_run_measures_each_event_and_theory_follows_the_new_path(tmp_path):
    """`lab run failover --quick`: when P13 fails both flows move to the transit path
    (theory after the event: base RTT 120 ms, 20 Mbit/s to share) with an outage under a
    second, and come back to the direct path (40 ms) when it returns; each connection's path
    is recorded."""
    done = lab("run", "failover", "--quick", "--results", str(tmp_path), timeout=240)
    (folder,) = tmp_path.iterdir()
    step = json.loads((folder / "results.json").read_text())["steps"][0]
    down, up = step["events"]
    assert [f["label"] for f in down["flows"]] == ["tcp", "udp"]
    for flow in down["flows"]:
        assert flow["outage"] is not None and flow["outage"] < 1.0, down
        assert flow["base_rtt_ms"] == pytest.approx(120.0), down
    assert sum(f["predicted"] for f in down["flows"]) < 20e6
    assert all(f["base_rtt_ms"] == pytest.approx(40.0) for f in up["flows"]), up
    assert down["convergence"] is not None and down["route_changes"] > 0
    tcp = next(f for f in step["flows"] if f["label"] == "tcp")
    assert tcp["paths"] == ["h1 r1 r2 r4 r5 h3"]  # at the end: P13 is back
    assert "tcp took h1 r1 r2 r4 r5 h3" in done.stdout


def test_mptcp_paths_are_steered_for_the_step_and_undone_after(campus):
    """Each further path of an mptcp flow: an address on the target announced to MPTCP,
    routed along that path (r1 sends it over the backup link B1), both hosts accepting
    subflows; all of it gone after, the limits as they were."""
    from simpleperf.lab.model import flows
    from simpleperf.lab.model.outcomes import FlowOutcome
    from simpleperf.lab.run import multipath

    model = tables.routed(topology.load("campus"))
    before = {node: in_node(node, "ip", "mptcp", "limits", "show").stdout
              for node in ("h1", "h4")}
    outcome = FlowOutcome(flows.parse({"kind": "tcp", "from": "h1", "to": "h4",
                                       "mptcp": True}, "flow"), "10.10.2.11")
    steering = multipath.steer(model, [outcome], frozenset())
    try:
        (address,) = outcome.subflow_addresses
        assert address == "10.10.2.254"
        assert f"inet {address}/32" in in_node("h4", "ip", "addr", "show", "h4-eth0").stdout
        assert "signal" in in_node("h4", "ip", "mptcp", "endpoint", "show").stdout
        assert next_hop("r1", address) == "10.10.13.2"  # B1, not r2's path
        assert next_hop("r1", "10.10.2.11") == "10.10.12.2"
        assert "add_addr_accepted 8" in in_node("h1", "ip", "mptcp", "limits", "show").stdout
    finally:
        assert steering.restore() == []
    assert address not in in_node("h4", "ip", "addr", "show").stdout
    assert in_node("h4", "ip", "mptcp", "endpoint", "show").stdout.strip() == ""
    assert next_hop("r1", address) == "10.10.12.2"
    assert {node: in_node(node, "ip", "mptcp", "limits", "show").stdout
            for node in ("h1", "h4")} == before


def test_one_mptcp_connection_uses_both_campus_paths(tmp_path):
    """`lab run multipath --quick`: TCP on r2's path against MPTCP over it and the backup
    link: two subflows, one on each path, and more goodput than one path can carry, near
    theory's sum of both (100 + 50 Mbit/s)."""
    done = lab("run", "multipath", "--quick", "--results", str(tmp_path), timeout=240)
    (folder,) = tmp_path.iterdir()
    steps = json.loads((folder / "results.json").read_text())["steps"]
    (tcp,), (mptcp,) = (step["flows"] for step in steps)
    assert tcp["paths"] == ["h1 r1 r2 r3 h4"]
    assert mptcp["paths"] == ["h1 r1 r2 r3 h4 + h1 r1 r3 h4"] == [mptcp["theory_path"]]
    assert mptcp["mptcp_subflows"] == 2
    one_path = 100e6 * theory.TCP_GOODPUT
    assert mptcp["predicted"] == pytest.approx(150e6 * theory.TCP_GOODPUT)
    assert mptcp["throughput"] > one_path > tcp["throughput"] * 0.95
    assert mptcp["throughput"] > 0.9 * mptcp["predicted"], done.stdout
    assert "mptcp took h1 r1 r2 r3 h4 + h1 r1 r3 h4 (MPTCP: 2 subflows)" in done.stdout
