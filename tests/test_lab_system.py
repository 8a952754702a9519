"""The lab on real network namespaces: cleanup, ownership, errors, link fidelity.

Needs root (CI runs as root). Tolerances are wide enough for a shared machine; the
calibration benchmark (bench/lab_calibration.py) measures fidelity tightly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import SIMPLEPERF, free_port
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lab_helpers import (
    PORTFOLIO_NAMESPACES,
    Ready,
    assert_gone,
    delay_line_pids,
    in_node,
    lab,
    made_by_this_session,
    needs_lab,
    ping_rtts,
    session_shaper,
)

from simpleperf.lab.model import diffserv
from simpleperf.lab.model.theory import FRAME_BYTES
from simpleperf.lab.net import ownership
from simpleperf.lab.net.shaping.probe import AQM_QDISCS
from simpleperf.lab.net.system import existing_namespaces, processes_in_namespaces

pytestmark = needs_lab
SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.mark.guest
def test_down_removes_exactly_what_up_created():
    before_daemons = delay_line_pids()
    lab("up", "pair", "--rate", "50M", "--delay", "5ms")
    record = ownership.load("pair")
    assert set(record.namespaces) == {"h1", "h2", "pair-wire"}
    daemons = delay_line_pids() - before_daemons
    if session_shaper() == "netem":
        assert not daemons and not record.processes
        qdiscs = in_node("pair-wire", "tc", "qdisc", "show").stdout
        assert qdiscs.count("qdisc netem") == 2 and qdiscs.count("qdisc tbf") == 2, qdiscs
    else:
        assert len(daemons) == min(2, os.cpu_count() or 1)  # one per CPU, at most one a queue
    out = lab("down").stdout
    assert "namespace pair-wire" in out and ("delay line" in out) == bool(daemons)
    assert_gone({"h1", "h2", "pair-wire"})
    time.sleep(0.2)
    assert not daemons & delay_line_pids()
    assert ownership.load("pair") is None


@pytest.mark.parametrize("after", [0.0, 0.05, 0.15, 0.3])
def test_sigkill_at_any_moment_leaves_nothing_unexplained(after):
    """SIGKILL `lab up portfolio` `after` seconds into building it (from its first record:
    a machine's speed, or an emulated guest's, does not move the moment out of the build).
    The next `up` clears what the record proves the lab made. A kill inside the one `ip`
    batch that creates the namespaces leaves some not yet proven (their inodes unrecorded):
    those are named with the command that removes them, and left (the window is
    microseconds here, seconds in the emulated guest)."""
    before_daemons = delay_line_pids()
    before_namespaces = existing_namespaces()
    victim = subprocess.Popen(SIMPLEPERF + ["lab", "up", "portfolio"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    record_file = ownership.RECORD_DIR / f"portfolio{ownership.RECORD_SUFFIX}"
    deadline = time.monotonic() + 120
    while not record_file.exists() and victim.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    time.sleep(after)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    record = ownership.load("portfolio")
    if record is not None and record.state == "up":
        # The kill came after `up` had finished: a lab that is up stays up until `down`.
        assert "already up" in lab("up", "portfolio", check=False).stderr
    else:
        # (The killed command's `ip -batch` may still be making namespaces meanwhile.)
        unproven = {name for name, inode in (record.namespaces.items() if record else ())
                    if inode is None}
        done = lab("up", "portfolio", check=False)
        named = set(re.findall(r"left alone: namespace (\S+), which nothing shows the lab "
                               r"made \(if it is a leftover: ip netns delete \1\)",
                               done.stdout))
        assert named <= unproven and (done.returncode == 1) == bool(named), done
        if named:
            for name in named:
                subprocess.run(["ip", "netns", "delete", name], check=True)
            done = lab("up", "portfolio")
        assert "is up" in done.stdout  # remains, if any, were cleared
    lab("down", "portfolio")
    assert_gone(PORTFOLIO_NAMESPACES)
    assert existing_namespaces() <= before_namespaces  # the kernel probe left nothing either
    time.sleep(1.2)  # a delay line whose namespace vanished leaves within 0.5 s
    assert delay_line_pids() <= before_daemons


def test_remains_of_an_owner_killed_before_completion_are_cleared_by_up():
    lab("up", "pair", "--delay", "2ms")
    record = ownership.load("pair")
    daemons = {process.pid for process in record.processes}
    assert len(daemons) == (0 if session_shaper() == "netem" else min(2, os.cpu_count() or 1))
    # What a SIGKILL just before `complete` leaves: an incomplete record whose owner is gone.
    record.complete = False
    record.owner_pid, record.owner_start_time = 1, 0
    record.save()
    assert ownership.load("pair").state == "remains"
    assert lab("status", "pair").stdout.startswith("lab pair: remains")
    done = lab("up", "pair", "--delay", "2ms")
    assert "cleared what a stopped run of lab pair left behind" in done.stdout
    assert not daemons & delay_line_pids()
    assert ownership.load("pair").state == "up"
    lab("down", "pair")
    assert_gone({"h1", "h2", "pair-wire"})


@pytest.mark.guest
def test_a_namespace_the_lab_did_not_create_is_never_touched():
    ownership.lock_path("pair").unlink(missing_ok=True)  # what an earlier test may leave
    subprocess.run(["ip", "netns", "add", "h2"], check=True)
    bystander = f"bystander{free_port()}"
    subprocess.run(["ip", "netns", "add", bystander], check=True)
    try:
        done = lab("up", "pair", check=False)
        assert done.returncode == 1
        assert "network namespace h2 already exists and was not created by simpleperf lab" \
            in done.stderr
        assert "h2" in existing_namespaces()
        assert_gone({"h1", "pair-wire"})  # nothing was created
        assert not ownership.lock_path("pair").exists()  # not even its lock file
        subprocess.run(["ip", "netns", "del", "h2"], check=True)
        lab("up", "pair", "--delay", "1ms")
        lab("down", "pair")
        assert bystander in existing_namespaces()
    finally:
        subprocess.run(["ip", "netns", "del", "h2"], capture_output=True)
        subprocess.run(["ip", "netns", "del", bystander], check=True)


def test_the_suite_takes_down_only_the_labs_it_made():
    """A lab brought up beside the suite (a user's, another run's) vanished with the next
    lab test's clean-up: every lab that appeared meanwhile was taken down. Now a lab records
    who made it ($SIMPLEPERF_LAB_SESSION), and the suite takes down only its own."""
    before = {record.lab for record in ownership.all_records()}
    beside = dict(os.environ, SIMPLEPERF_LAB_SESSION="a user's shell")
    done = subprocess.run(SIMPLEPERF + ["lab", "up", "pair"], env=beside, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    try:
        records = ownership.all_records()
        (theirs,) = [r for r in records if r.lab == "pair"]
        assert theirs.session == "a user's shell"
        assert made_by_this_session(before, records) == []
        ours = dataclasses.replace(theirs, lab="ours", session=os.environ[
            ownership.SESSION_ENV])
        assert made_by_this_session(before, [*records, ours]) == ["ours"]
    finally:
        lab("down", "pair")
    assert_gone({"h1", "h2", "pair-wire"})


@pytest.mark.parametrize("then", ["down", "up"])
def test_a_namespace_whose_inode_was_never_recorded_is_reported_and_left(then):
    """What a SIGKILL between creating the namespaces and recording them leaves: their names
    without inodes. Someone then makes their own h1: neither down nor up may remove it."""
    record = ownership.new_record("pair", ("own", "test"), True, {"pair": {}})
    record.namespaces = {"h1": None, "h2": None, "pair-wire": None}
    record.owner_pid, record.owner_start_time = 1, 0  # its owner is gone
    record.save()
    subprocess.run(["ip", "netns", "add", "h1"], check=True)
    try:
        if then == "down":
            done = lab("down", "pair")
            assert "left alone: namespace h1" in done.stdout
            assert ownership.load("pair") is None
        done = lab("up", "pair", check=False)
        assert done.returncode == 1
        assert "namespace h1 already exists and was not created by simpleperf lab" in \
            done.stderr
        assert "h1" in existing_namespaces()
        assert_gone({"h2", "pair-wire"})
    finally:
        subprocess.run(["ip", "netns", "del", "h1"], check=True)
    lab("up", "pair", "--delay", "1ms")
    lab("down", "pair")
    assert_gone({"h1", "h2", "pair-wire"})


@pytest.mark.parametrize("after", [0.0, 0.02, 0.05, 0.1, 0.2, 0.4])
def test_a_namespace_someone_makes_after_a_killed_up_survives_down_and_up(after):
    """Kill `lab up` at one moment or another (the record's writes included); then someone
    makes their own namespaces under every name the lab did not get to create. Neither
    `down` nor the next `up` may remove them."""
    names = {"h1", "h2", "pair-wire"}
    before = existing_namespaces()
    victim = subprocess.Popen(SIMPLEPERF + ["lab", "up", "pair", "--delay", "1ms"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(after)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    record = ownership.load("pair")
    recorded = {n for n, inode in (record.namespaces.items() if record else ()) if inode}
    unprovable = (names & existing_namespaces()) - recorded  # the lab's, but not provably
    foreign = names - existing_namespaces()
    for name in foreign:
        subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        lab("down", "pair", check=False)
        lab("up", "pair", check=False)
        assert foreign <= existing_namespaces()
        assert unprovable <= existing_namespaces()
    finally:
        for name in foreign | unprovable:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        lab("down", "pair", check=False)
    assert_gone(names - before)


def test_without_root_the_message_says_what_is_needed():
    python = "/usr/bin/python3"
    assert os.path.exists(python) and shutil.which("setpriv"), \
        "needs Debian's /usr/bin/python3 and setpriv (util-linux): run bash scripts/setup"
    done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           python, "-m", "simpleperf", "lab", "up", "portfolio"],
                          capture_output=True, text=True, env={"PYTHONPATH": SRC}, timeout=30)
    assert done.returncode == 1, done.stderr
    assert "needs root privileges" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.guest
def test_bad_topology_and_options_create_nothing(tmp_path):
    broken = tmp_path / "broken.toml"
    broken.write_text('[hosts]\na = {}\n[[links]]\na = "a"\nb = "nowhere"\n')
    done = lab("up", str(broken), check=False)
    assert done.returncode == 1 and "'nowhere' is not a declared node" in done.stderr
    done = lab("up", "pair", "--delay", "soon", check=False)
    assert done.returncode == 2 and "is not a time" in done.stderr
    done = lab("up", "portfolio", "--rate", "1G", check=False)
    assert done.returncode == 2 and "--rate only applies to the pair topology" in done.stderr
    assert not {"a", "h1", "pair-wire"} & existing_namespaces()


# ------------------------------------------------------------------ link fidelity (pair)

UDP_COUNTER = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("10.0.0.2", int(sys.argv[1])))
s.settimeout(3)
print("ready", flush=True)
count = 0
try:
    while True:
        s.recv(2048)
        count += 1
except socket.timeout:
    pass
print(count)
"""

UDP_SENDER = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
total, gap = int(sys.argv[2]), float(sys.argv[3])
payload = bytes(int(sys.argv[4]))
start = time.monotonic()
for i in range(total):
    s.sendto(payload, ("10.0.0.2", int(sys.argv[1])))
    while time.monotonic() < start + (i + 1) * gap:
        pass
"""


def udp_delivered(total: int, gap: float, size: int = 100) -> int:
    port = str(free_port())
    counter = Ready("h2", sys.executable, "-c", UDP_COUNTER, port, ready="ready")
    in_node("h1", sys.executable, "-c", UDP_SENDER, port, str(total), str(gap), str(size))
    return int(counter.output().split()[-1])


@pytest.fixture
def pair_lab():
    made = []

    def make(*options: str) -> None:
        lab("up", "pair", *options)
        made.append(True)

    yield make
    if made:
        lab("down", "pair")


@pytest.mark.guest
def test_random_loss_is_within_binomial_bounds(pair_lab):
    pair_lab("--loss", "5%")
    total = 12_000
    lost = total - udp_delivered(total, 0.0002)
    spread = 3.3 * math.sqrt(total * 0.05 * 0.95)  # 99.9 %: generous for a shared machine
    assert abs(lost - total * 0.05) <= spread, lost


@pytest.mark.timing
def test_jitter_shows_up_as_rtt_spread(pair_lab):
    pair_lab("--delay", "10ms", "--jitter", "2ms")
    rtts = ping_rtts("h1", "10.0.0.2", 200, 0.01)
    assert len(rtts) >= 190
    expected = 2 * math.sqrt(2)  # two directions, each with a 2 ms standard deviation
    # the spread from the quartiles (a normal's IQR is 1.349 sigma): a machine that stalls
    # for a second moves one ping, not the estimate
    quartiles = statistics.quantiles(rtts, n=4)
    assert 0.7 * expected <= (quartiles[2] - quartiles[0]) / 1.349 <= 1.3 * expected
    assert 19 <= statistics.median(rtts) <= 22


@pytest.mark.timing
def test_rate_limit_and_standing_queue(pair_lab):
    sent = 6000  # 3.5 s of overload; the pings below fall between 1 s and 2 s into it
    pair_lab("--rate", "10M", "--queue", "50")
    port = str(free_port())
    # Overload at twice the rate with full-size datagrams while pinging: the queue fills.
    counter = Ready("h2", sys.executable, "-c", UDP_COUNTER, port, ready="ready")
    blaster = subprocess.Popen(["ip", "netns", "exec", "h1", sys.executable, "-c", UDP_SENDER,
                                port, str(sent), str(1472 * 8 / 20e6), "1472"])
    time.sleep(1.0)
    rtts = ping_rtts("h1", "10.0.0.2", 20, 0.05)
    blaster.wait(30)
    delivered = int(counter.output().split()[-1])
    queueing = 50 * 1514 * 8 / 10e6 * 1e3  # 60.6 ms to drain a full 50-packet queue
    assert 0.8 * queueing <= statistics.median(rtts) <= 1.25 * queueing + 1
    sent_seconds = sent * 1472 * 8 / 20e6
    carried = delivered * 1514 * 8 / (sent_seconds + queueing / 1e3)
    assert 0.85 * 10e6 <= carried <= 1.02 * 10e6


@contextlib.contextmanager
def server_in_h2():
    """A simpleperf server in node h2; yields its port."""
    port = str(free_port())
    server = Ready("h2", *SIMPLEPERF, "-s", "-p", port, ready="listening")
    try:
        yield port
    finally:
        server.stop()


def tcp_transfer(seconds: float, *options: str) -> dict:
    with server_in_h2() as port:
        done = in_node("h1", *SIMPLEPERF, "-c", "10.0.0.2", "-p", port, "-t", str(seconds),
                       "--native", "-J", "--no-latency", *options, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_tcp_segments_cross_the_delay_whole(pair_lab):
    """Offloads on: a TCP sender's 64 KB segments are delayed as one entry each (a delay-line
    verdict, or one netem packet), and cut into frames only by the rate limiter."""
    pair_lab("--rate", "200M", "--delay", "5ms", "--queue", "200")
    received = tcp_transfer(2)["end"]["sum_received"]["bytes"]
    queues = in_node("pair-wire", "tc", "-s", "qdisc", "show", "dev", "w1b").stdout
    sent_bytes, frames = map(int, re.search(
        r"qdisc pfifo .*?\n\s*Sent (\d+) bytes (\d+) pkt", queues).groups())
    assert sent_bytes >= received > 0
    assert 1400 <= sent_bytes / frames <= FRAME_BYTES  # the rate limiter cut them all
    if session_shaper() == "netem":
        delayed = in_node("pair-wire", "tc", "-s", "qdisc", "show", "dev", "ifb1a").stdout
        data_entries = int(re.search(r"qdisc netem .*?\n\s*Sent \d+ bytes (\d+) pkt",
                                     delayed).group(1))
    else:
        entries = in_node("pair-wire", "cat", "/proc/net/netfilter/nfnetlink_queue").stdout
        # queue number, portid, total, copy mode, range, dropped, user dropped, id sequence, 1
        data_entries = next(int(fields[7]) for fields in map(str.split, entries.splitlines())
                            if fields[0] == "1")  # queue 1 carries a to b
    assert 0 < data_entries < frames / 4


@pytest.mark.timing
def test_tcp_fills_the_queue_with_packets_not_segments(pair_lab):
    """With offloads on, the queue still holds max_queue_size frames: a TCP flow that keeps
    it full (CUBIC fills queues) sees the queueing delay of that many frames, no more."""
    pair_lab("--rate", "10M", "--delay", "5ms", "--queue", "30")
    with server_in_h2() as port:
        client = subprocess.Popen(["ip", "netns", "exec", "h1", *SIMPLEPERF, "-c", "10.0.0.2",
                                   "-p", port, "-t", "6", "--native", "-C", "cubic",
                                   "--no-latency"], stdout=subprocess.DEVNULL)
        time.sleep(3)  # past slow start
        rtts = ping_rtts("h1", "10.0.0.2", 30, 0.05)
        client.wait(30)
    full = 30 * 1514 * 8 / 10e6 * 1e3  # 36.3 ms to drain 30 frames
    # CUBIC's sawtooth keeps the queue between about two thirds full and full. A queue of
    # 30 aggregates of 2 or more segments would hold twice as long (htb: median near 70 ms).
    # The median, not the maximum: one ping delayed by the shared machine is not the queue.
    assert 10 + 0.4 * full <= statistics.median(rtts) <= 10 + 1.25 * full + 2, sorted(rtts)


def test_processes_in_namespaces_finds_a_process_by_its_namespace(pair_lab):
    pair_lab("--delay", "1ms")
    sleeper = subprocess.Popen(["ip", "netns", "exec", "h1", "sleep", "30"])
    try:
        time.sleep(0.3)
        inode = os.stat("/run/netns/h1").st_ino
        assert "sleep" in processes_in_namespaces({inode}).values()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_record_is_written_before_anything_exists(tmp_path, monkeypatch):
    record = ownership.new_record("zz", ("own", "test"), True, {"pair": {}})
    monkeypatch.setattr(ownership, "RECORD_DIR", tmp_path)
    record.namespaces = {"zz-a": None}
    record.save()
    loaded = ownership.load("zz")
    assert loaded.namespaces == {"zz-a": None} and loaded.state == "building"
    assert json.loads((tmp_path / "zz.record.json").read_text())["lab"] == "zz"


@pytest.mark.timing
def test_udp_rate_search_finds_the_link_rate_without_knowing_it(pair_lab):
    pair_lab("--rate", "20M", "--delay", "5ms", "--queue", "50")
    with server_in_h2() as port:
        done = in_node("h1", *SIMPLEPERF, "-c", "10.0.0.2", "-p", port, "-u", "--probe",
                       "-t", "0.7", "-l", "1400", "-J", timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)["probe"]["result"]
    goodput = 20e6 * 1400 / (1400 + 28 + 14)  # what the link carries of 1400-byte payloads
    assert 0.85 * goodput <= found["offered"] <= 1.02 * goodput, found
    assert found["lost_percent"] <= 1.0


def _udp_across_pair() -> dict:
    """1250 datagrams a second, 0.8 ms apart, for 2 s from h1 to h2: the receiver's counts."""
    with server_in_h2() as port:
        done = in_node("h1", *SIMPLEPERF, "-c", "10.0.0.2", "-p", port, "-u", "-b", "5M",
                       "-l", "500", "-t", "2", "-J", "--no-latency", timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["end"]["streams"][0]["udp"]


@pytest.mark.guest
def test_udp_reordering_by_jitter_is_counted(pair_lab):
    pair_lab("--delay", "5ms", "--jitter", "3ms", "--reorder")
    udp = _udp_across_pair()
    assert udp["out_of_order"] > 50  # 0.8 ms apart with 3 ms of jitter: many overtake
    assert udp["lost_packets"] == 0  # late is not lost
    assert 2.0 < udp["jitter_ms"] < 6.0


@pytest.mark.guest
def test_jitter_without_reorder_keeps_datagrams_in_order(pair_lab):
    pair_lab("--delay", "5ms", "--jitter", "3ms")
    udp = _udp_across_pair()
    assert udp["out_of_order"] == 0 and udp["lost_packets"] == 0
    assert udp["jitter_ms"] > 0.5  # delayed behind a late datagram is still jitter


_SMALL_TOPOLOGY = {"name": "fz", "hosts": {"a1": {}, "b1": {}},
                   "links": [{"name": "L1", "a": "a1", "b": "b1", "a_address": "10.9.0.1/24",
                              "b_address": "10.9.0.2/24", "bw": "10M", "delay": "1ms"}]}
_hostile = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                     st.floats(allow_nan=True), st.text(max_size=30),
                     st.text(alphabet=st.characters(max_codepoint=31), max_size=5),
                     st.just("x" * 5000), st.lists(st.integers(), max_size=3))


def _toml_value(value) -> str:
    if value is None:
        return '""'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if value != value else repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value)
    return str(value)


def _render(data: dict) -> str:
    lines = [f"name = {_toml_value(data['name'])}", "[hosts]"]
    lines += [f"{json.dumps(node)} = {{}}" for node in data["hosts"]]
    for link in data["links"]:
        lines.append("[[links]]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in link.items()]
    return "\n".join(lines) + "\n"


@pytest.mark.slow
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=st.sampled_from(["name", "node", "link"]),
       key=st.sampled_from(["name", "a", "b", "a_address", "b_address", "bw", "delay",
                            "jitter", "loss", "max_queue_size", "reorder", "zzz"]),
       value=_hostile, garble=st.booleans())
def test_any_mutated_topology_comes_up_or_is_one_line_and_leaves_nothing(
        tmp_path, where, key, value, garble):
    data = json.loads(json.dumps(_SMALL_TOPOLOGY))
    if where == "name":
        data["name"] = value
    elif where == "node":
        data["hosts"] = {str(value)[:12] or "?": {}, "b1": {}}
    else:
        data["links"][0][key] = value
    text = _render(data).encode()
    if garble:
        text = text[:len(text) // 2] + b"\xff\xfe" + text[len(text) // 2:]
    path = tmp_path / "fz.toml"
    path.write_bytes(text)
    namespaces, daemons = existing_namespaces(), delay_line_pids()
    records = set(os.listdir(ownership.RECORD_DIR)) if ownership.RECORD_DIR.exists() else set()
    done = lab("up", str(path), check=False, timeout=60)
    if done.returncode == 0:
        # a mutated name that is a name all the same ("then") names the lab
        named = re.search(r"^lab (\S+) is up", done.stdout, re.M)
        assert named is not None, done.stdout
        lab("down", named.group(1))
    else:
        assert done.returncode in (1, 2)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "Traceback" not in done.stderr
    assert existing_namespaces() == namespaces
    time.sleep(0.1)
    assert delay_line_pids() <= daemons
    after = set(os.listdir(ownership.RECORD_DIR)) if ownership.RECORD_DIR.exists() else set()
    assert after <= records


# ------------------------------------------------------------------ each shaper's machinery

@pytest.mark.guest
def test_probe_says_what_the_kernel_offers_and_which_shaper_up_takes():
    out = lab("probe").stdout
    assert out.startswith(f"kernel {os.uname().release}: ")
    for name in ("tbf", "netem", "ifb", "NFQUEUE", *AQM_QDISCS):
        assert re.search(rf"^  {name}\b.* (yes|no)(;.*)?$", out, re.M), name
    assert re.search(r"^  compiled delay line reader \(own shaper\) +yes$", out, re.M), out
    chosen = re.search(r"^links are shaped with: (\w+) \((.+)\)$", out, re.M)
    assert chosen is not None and chosen.group(1) == session_shaper()
    done = lab("up", "pair", "--delay", "1ms")
    assert f"shaper {chosen.group(1)} ({chosen.group(2)})" in done.stdout
    lab("down", "pair")


@pytest.mark.guest
@pytest.mark.netem_shaper
def test_the_netem_kernel_offers_the_aqm_qdiscs():
    """Debian's kernel (the guest's) has them as modules: later work on queue disciplines
    can use the kernel's own."""
    out = lab("probe").stdout
    for name in ("netem", "ifb", "codel", "fq_codel", "pie", "fq_pie", "cake"):
        assert re.search(rf"^  {name}\b.* yes(;.*)?$", out, re.M), (name, out)


@pytest.mark.guest
def test_a_links_queue_discipline_runs_in_the_kernel_or_the_delay_line():
    """With netem (the guest's kernel): the kernel's discipline below the rate limiter with
    the link's limit and tuning, and `link set` swaps it for another kind and back. With the
    own shaper: the lab's own in the delay line (no kernel stage at the port), which `link
    set` hands back to the kernel's pfifo and takes again. CAKE: the kernel's first (on the
    ifb behind the ingress, its own shaper at the rate) and netem after it at the link's
    rate, or the own in the delay line. `lab status` says which runs."""

    lab("up", "pair", "--rate", "10M", "--queue", "100", "--delay", "1ms", "--qdisc",
        "fq_codel", "--ecn", "--target", "2ms")
    try:
        def shown(device: str) -> str:
            return subprocess.run(["tc", "-n", "pair-wire", "qdisc", "show", "dev", device],
                                  capture_output=True, text=True, check=True).stdout

        def queue() -> str:
            return "\n".join(x for x in shown("w1b").splitlines() if "parent 1:1" in x)

        def delay_line_plan() -> dict:
            plans = [entry for path in ownership.RECORD_DIR.glob("pair.delayline*.json")
                     for entry in json.loads(path.read_text())]
            (entry,) = [e for e in plans if e["queue"] == 1]
            return entry

        status = lab("status", "pair").stdout
        if session_shaper() == "netem":
            assert "queue fq_codel: the kernel's sch_fq_codel (netem shaper)" in status
            assert re.search(r"fq_codel 10: parent 1:1 limit 100p flows 1024 .*target 2ms "
                             r".*\becn\b", queue()), queue()
            lab("link", "h1-h2", "set", "--qdisc", "codel")
            assert re.search(r"codel 10: parent 1:1 limit 100p target 5ms interval 100ms ecn",
                             queue()), queue()
        else:
            assert "queue fq_codel: the lab's own, in the delay line (the own shaper)" in status
            assert queue() == ""
            entry = delay_line_plan()
            assert (entry["qdisc"], entry["rate"]) == ("fq_codel", 10e6)
            assert entry["settings"] == {"limit": 100, "ecn": True, "target": 0.002,
                                         "interval": None, "tupdate": None, "flows": None,
                                         "quantum": None, "rate": 10e6, "step": None,
                                         "coupling": None, "any_ect": False}
            lab("link", "h1-h2", "set", "--qdisc", "droptail")
            assert "pfifo 10: parent 1:1 limit 100p" in queue()
            assert "qdisc" not in delay_line_plan()
            lab("link", "h1-h2", "set", "--qdisc", "codel")
            assert queue() == "" and delay_line_plan()["qdisc"] == "codel"
        assert in_node("h1", "ping", "-c", "2", "-i", "0.2", "10.0.0.2").returncode == 0
        lab("link", "h1-h2", "set", "--qdisc", "droptail")
        assert "pfifo 10: parent 1:1 limit 100p" in queue()
        lab("link", "h1-h2", "set", "--qdisc", "cake")
        if session_shaper() == "netem":  # CAKE first, its shaper at the rate; then netem
            assert re.search(r"qdisc cake 1: root .*bandwidth 10Mbit", shown("ifb1a")), \
                shown("ifb1a")
            assert re.search(r"qdisc netem 1: root .*delay 1ms rate 10Mbit", shown("w1b")), \
                shown("w1b")
        else:
            assert delay_line_plan()["qdisc"] == "cake" and queue() == ""
        assert in_node("h1", "ping", "-c", "2", "-i", "0.2", "10.0.0.2").returncode == 0
        lab("link", "h1-h2", "set", "--qdisc", "droptail")
        assert "pfifo 10: parent 1:1 limit 100p" in queue()
        if session_shaper() == "netem":  # the ifb holds netem again, and only it
            assert re.fullmatch(r"qdisc netem 1: root refcnt \d+ limit 1000000 delay 1ms\s*",
                                shown("ifb1a")), shown("ifb1a")
        assert in_node("h1", "ping", "-c", "2", "-i", "0.2", "10.0.0.2").returncode == 0
    finally:
        lab("down", "pair", check=False)


ECN_PAIR = """name = "pair"
[hosts]
h1 = { ecn = true }
h2 = { ecn = true }
[[links]]
name = "h1-h2"
a = "h1"
a_address = "10.0.0.1/24"
b = "h2"
b_address = "10.0.0.2/24"
bw = 10
delay = "10ms"
qdisc = "codel"
ecn = true
"""


@pytest.mark.own_shaper
@pytest.mark.timing
def test_the_own_codel_keeps_the_queue_short_and_marks_instead_of_dropping(tmp_path):
    """CoDel in the delay line with a CUBIC flow saturating 10 Mbit/s: pings beside it see
    the base RTT plus about the target, not the buffer (drop-tail: over 200 ms here); with
    ECN asked for by both hosts (their topology's `ecn`), the receiver gets CE-marked
    packets, the sender's result counts their echoes, and it retransmits nothing it would
    otherwise have lost."""
    (tmp_path / "pair.toml").write_text(ECN_PAIR)
    lab("up", str(tmp_path / "pair.toml"))
    try:
        assert all(in_node(node, "sysctl", "-n", "net.ipv4.tcp_ecn").stdout.strip() == "1"
                   for node in ("h1", "h2"))
        with server_in_h2() as port:
            client = subprocess.Popen(["ip", "netns", "exec", "h1", *SIMPLEPERF, "-c",
                                       "10.0.0.2", "-p", port, "-t", "6", "--native", "-C",
                                       "cubic", "--no-latency", "-J"], stdout=subprocess.PIPE)
            time.sleep(2)  # past slow start
            rtts = ping_rtts("h1", "10.0.0.2", 30, 0.1)
            out, _ = client.communicate(timeout=30)
        end = json.loads(out)["end"]
        assert end["sum_received"]["bits_per_second"] >= 0.9 * 10e6 * 1448 / 1514
        assert end["sum_sent"]["delivered_ce"] > 0  # the sender's TCP_INFO saw the echoes
        assert 20 <= statistics.median(rtts) <= 20 + 3 * 5 + 1, sorted(rtts)
        # the fresh namespaces' absolute counters
        counters = {node: dict(line.split()[:2] for line in in_node(
            node, "nstat", "-a").stdout.splitlines()[1:]) for node in ("h1", "h2")}
        assert int(counters["h2"].get("IpExtInCEPkts", 0)) > 0
        assert int(counters["h1"].get("TcpRetransSegs", 0)) == 0
    finally:
        lab("down", "pair")


def test_a_pair_whose_queue_marks_ecn_has_hosts_that_ask_for_it(pair_lab):
    """`lab up pair --ecn` marked nothing: its hosts' TCP did not ask for ECN (the
    kernel's default answers only), and the pair form could not say so. Now both ask,
    `lab status` says so, and a CUBIC flow through fq_codel is marked, not dropped."""
    pair_lab("--rate", "10M", "--delay", "5ms", "--qdisc", "fq_codel", "--ecn")
    status = lab("status").stdout
    assert status.count("its TCP negotiates ECN") == 2, status
    assert all(in_node(node, "sysctl", "-n", "net.ipv4.tcp_ecn").stdout.strip() == "1"
               for node in ("h1", "h2"))
    with server_in_h2() as port:
        done = in_node("h1", *SIMPLEPERF, "-c", "10.0.0.2", "-p", port, "-t", "3",
                       "--native", "-C", "cubic", "--no-latency", "-J")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["end"]["sum_sent"]["delivered_ce"] > 0


@pytest.mark.own_shaper
@pytest.mark.timing
def test_the_own_dualpi2_keeps_l4s_datagrams_out_of_the_classic_queue(pair_lab):
    """DualPI2 in the delay line at 20 Mbit/s: a classic CUBIC flow's queue stands near the
    PI2 target (pings beside it: the 10 ms base RTT plus 5 to 40 ms), while an --l4s UDP
    flow beside it (ECT(1), its window moved by CE marks) is marked instead of dropped and
    its datagrams wait about a millisecond (one-way p90 within 2 ms of its least)."""
    pair_lab("--rate", "20M", "--delay", "5ms", "--qdisc", "dualpi2", "--step", "1ms")
    with server_in_h2() as port:
        classic = subprocess.Popen(["ip", "netns", "exec", "h1", *SIMPLEPERF, "-c",
                                    "10.0.0.2", "-p", port, "-t", "8", "--native", "-C",
                                    "cubic", "--no-latency", "-J"], stdout=subprocess.PIPE)
        time.sleep(2)
        pinger = subprocess.Popen(["ip", "netns", "exec", "h1", "ping", "-n", "-c", "40",
                                   "-i", "0.1", "10.0.0.2"], stdout=subprocess.PIPE, text=True)
        scalable = in_node("h1", *SIMPLEPERF, "-c", "10.0.0.2", "-p", port, "-t", "5", "-u",
                           "--l4s", "--trip-times", "--no-latency", "-J")
        pings, _ = pinger.communicate(timeout=30)
        classic_out, _ = classic.communicate(timeout=30)
    assert scalable.returncode == 0, scalable.stderr
    receiver = json.loads(scalable.stdout)["end"]["streams"][0]["receiver"]
    assert receiver["ce_marked"] > 0 and receiver["lost_packets"] == 0
    delays = receiver["one_way_delay"]
    assert delays["p90_ms"] - delays["min_ms"] <= 2.0, delays
    rtts = [float(m) for m in re.findall(r"time=([\d.]+) ms", pings)]
    assert 15 <= statistics.median(rtts) <= 50, sorted(rtts)
    carried = json.loads(classic_out)["end"]["sum_received"]["bits_per_second"]
    assert carried + receiver["bits_per_second"] >= 0.85 * 20e6 * 1448 / 1514


# 5 Mbit/s, a frame every 2.4 ms: a step of 5 ms (a few frames, as RFC 9332 advises for slow
# links); the guest is emulated, one core, and slow.
DUALPI2_PAIR = ECN_PAIR.replace('qdisc = "codel"\necn = true', 'qdisc = "dualpi2"\n'
                                'any_ect = true\nstep = "5ms"\nbw = 5').replace("bw = 10\n", "")


@pytest.mark.guest
@pytest.mark.netem_shaper
def test_dctcp_through_the_own_dualpi2_is_marked_not_dropped_and_keeps_its_queue_short(
        tmp_path):
    """Debian's kernel (the guest's) has DCTCP, a scalable congestion control; it sends
    ECT(0), which DualPI2 with any_ect takes into its L4S queue (no kernel here has
    sch_dualpi2: the own shaper runs it). DCTCP's segments are CE-marked, nothing is
    retransmitted, and its round trips stay within the step and two frames of its least
    (a classic flow would fill the 1000-packet buffer: 2.4 s)."""
    topology_file = tmp_path / "pair.toml"
    topology_file.write_text(DUALPI2_PAIR)
    lab("up", str(topology_file), "--shaper", "own")
    try:
        port = str(free_port())
        # DCTCP sends its SYN ECT(0) (a data centre's habit); a listener that is not DCTCP
        # takes that for a broken path and refuses ECN, so the server listens with it too
        server = Ready("h2", *SIMPLEPERF, "-s", "-p", port, "-C", "dctcp", ready="listening")
        try:
            done = in_node("h1", *SIMPLEPERF, "-c", "10.0.0.2", "-p", port, "-t", "5",
                           "--native", "--no-latency", "-J", "-C", "dctcp")
        finally:
            server.stop()
        assert done.returncode == 0, done.stderr
        end = json.loads(done.stdout)["end"]
        sender = end["sum_sent"]
        assert sender["delivered_ce"] > 0 and sender["retransmits"] == 0, sender
        rtt = end["streams"][0]["sender"]  # microseconds, TCP_INFO's
        assert rtt["mean_rtt"] - rtt["min_rtt"] <= 5_000 + 2 * 2_400, rtt  # the step, 2 frames
    finally:
        lab("down", "pair")


@pytest.mark.own_shaper
def test_status_names_a_delay_line_that_stopped(pair_lab):
    pair_lab("--delay", "2ms")
    record = ownership.load("pair")
    victim = record.processes[0].pid
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while victim in delay_line_pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    out = lab("status", "pair").stdout
    assert f"pid {victim}, NOT RUNNING: links with delay pass nothing" in out


def test_a_hosts_congestion_control_is_its_namespaces_default_or_one_line(tmp_path):
    """A namespace may default only to an allowed algorithm (the kernel's rule): one the
    kernel has but does not allow is one line saying how to allow it, and nothing is built;
    an allowed one is the host's TCP default."""
    def listed(name: str) -> list[str]:
        return Path(f"/proc/sys/net/ipv4/tcp_{name}_congestion_control").read_text().split()

    allowed = listed("allowed")
    topology_file = tmp_path / "pair.toml"
    topology_file.write_text(ECN_PAIR.replace("h1 = { ecn = true }",
                                              f'h1 = {{ congestion = "{allowed[-1]}" }}'))
    lab("up", str(topology_file))
    try:
        assert in_node("h1", "sysctl", "-n", "net.ipv4.tcp_congestion_control"
                       ).stdout.strip() == allowed[-1]
    finally:
        lab("down", "pair")
    refused = [name for name in listed("available") if name not in allowed]
    for name in refused[:1]:
        topology_file.write_text(ECN_PAIR.replace("h1 = { ecn = true }",
                                                  f'h1 = {{ congestion = "{name}" }}'))
        done = lab("up", str(topology_file), check=False)
        assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1
        assert f"node h1: congestion {name} cannot be a network namespace's default" in \
            done.stderr
        assert_gone({"h1", "h2", "pair-wire"})


@pytest.mark.own_shaper
@pytest.mark.timing
def test_a_saturating_flow_carries_what_the_trace_offers(pair_lab, tmp_path):
    """A link that follows a trace (12 Mbit/s of 1500-byte opportunities) carries a CUBIC
    flow at the trace's rate, less TCP's headers; a broken trace builds nothing."""
    broken = tmp_path / "broken.trace"
    broken.write_text("1\n3\n2\n")
    done = lab("up", "pair", "--trace", str(broken), check=False)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "line 3: 2 ms comes before the line above (3 ms)" in done.stderr
    assert_gone({"h1", "h2", "pair-wire"})
    pair_lab("--trace", "constant-12M", "--delay", "5ms")
    received = tcp_transfer(6, "-C", "cubic")["end"]["sum_received"]["bits_per_second"]
    capacity = 12e6 * 1448 / 1500  # each opportunity: one full segment with timestamps
    assert 0.93 * capacity <= received <= 1.01 * capacity, received


@pytest.mark.own_shaper
@pytest.mark.timing
def test_diffserv_classes_let_expedited_packets_pass_a_full_best_effort_queue(pair_lab):
    """`classes` on 10 Mbit/s behind a CUBIC flow that keeps its best-effort queue full:
    pings marked EF (TOS 0xb8) see about the base RTT, unmarked ones the queue."""
    pair_lab("--rate", "10M", "--delay", "5ms", "--queue", "300", "--qdisc", "classes")
    with server_in_h2() as port:
        client = subprocess.Popen(["ip", "netns", "exec", "h1", *SIMPLEPERF, "-c", "10.0.0.2",
                                   "-p", port, "-t", "6", "--native", "-C", "cubic",
                                   "--no-latency"], stdout=subprocess.DEVNULL)
        time.sleep(2.5)  # the queue has filled
        marked = in_node("h1", "ping", "-n", "-c", "15", "-i", "0.1", "-Q", "0xb8", "-W", "2",
                         "10.0.0.2")
        plain = ping_rtts("h1", "10.0.0.2", 10, 0.1)
        client.wait(30)
    expedited = [float(m) for m in re.findall(r"time=([\d.]+) ms", marked.stdout)]
    assert len(expedited) >= 14 and len(plain) >= 9
    assert statistics.median(expedited) <= 10 + 3, sorted(expedited)
    assert statistics.median(plain) >= 10 + 40, sorted(plain)  # a standing BE queue


@pytest.mark.own_shaper
@pytest.mark.timing
def test_rpm_finds_a_drop_tail_links_full_buffer_and_fq_codel_takes_it_away(pair_lab):
    """simpleperf --rpm through 10 Mbit/s with a 200-packet buffer (242 ms when full) and
    10 ms of base RTT: over drop-tail its probes on new connections wait for about the
    whole buffer and the rating is Poor; with fq_codel on the same link they pass the
    bulk flows at about the base RTT, the self probes within tens of ms, and the RPM is
    many times higher. CUBIC at both ends (the draft's load is whatever the hosts run;
    BBR's losses in this buffer make the per-interval goodput jump)."""
    pair_lab("--rate", "10M", "--delay", "5ms", "--queue", "200")
    full_ms = 200 * FRAME_BYTES * 8 / 10e6 * 1e3
    runs = {}
    with server_in_h2() as port:
        for qdisc in ("droptail", "fq_codel"):
            lab("link", "h1-h2", "set", "--qdisc", qdisc)
            done = in_node("h1", *SIMPLEPERF, "-c", "10.0.0.2", "-p", port, "--rpm", "-t",
                           "8", "-C", "cubic", "-J", timeout=60)
            assert done.returncode == 0, done.stderr
            runs[qdisc] = json.loads(done.stdout)["end"]["responsiveness"]
    bloated, managed = runs["droptail"], runs["fq_codel"]
    for run in (bloated, managed):
        assert run["goodput"] >= 0.85 * 10e6 * 1448 / 1514, run
    assert 10 + full_ms / 2 <= bloated["trimmed_ms"]["foreign"] <= 10 + full_ms + 20, bloated
    assert bloated["rating"] == "Poor"
    assert managed["trimmed_ms"]["foreign"] <= 10 + 2 * 5 + 10, managed
    assert managed["trimmed_ms"]["loaded"] <= 100, managed
    assert managed["rpm"] >= 5 * bloated["rpm"]


def _await_backlog(namespace: str, device: str, class_id: str, packets: int,
                   seconds: float) -> None:
    """Wait until htb class `class_id` holds at least `packets` packets."""
    deadline = time.monotonic() + seconds
    shown = ""
    while time.monotonic() < deadline:
        shown = subprocess.run(["tc", "-n", namespace, "-s", "class", "show", "dev", device],
                               capture_output=True, text=True, check=True).stdout
        held = re.search(rf"class htb {class_id} .*?backlog \S+ (\d+)p", shown, re.S)
        if held is not None and int(held.group(1)) >= packets:
            return
        time.sleep(0.2)
    raise AssertionError(f"class {class_id} never held {packets} packets in {seconds:g} s: "
                         f"{shown}")


@pytest.mark.guest
@pytest.mark.netem_shaper
def test_classes_with_netem_are_an_htb_tree_that_lets_expedited_packets_pass(pair_lab):
    """With netem, `classes` is the kernel's htb tree (stages.class_tree): behind a CUBIC
    flow that fills the best-effort class's 100 packets (240 ms at 5 Mbit/s), pings marked
    EF go through the expedited class (its counters count them) far sooner than unmarked
    ones; `link set` hands the direction back to drop-tail."""
    pair_lab("--rate", "5M", "--delay", "5ms", "--queue", "100", "--qdisc", "classes")
    assert "queue classes: the kernel's htb" in lab("status", "pair").stdout
    with server_in_h2() as port:
        client = subprocess.Popen(["ip", "netns", "exec", "h1", *SIMPLEPERF, "-c", "10.0.0.2",
                                   "-p", port, "-t", "60", "--native", "-C", "cubic",
                                   "--no-latency"], stdout=subprocess.DEVNULL)
        # Until the best-effort queue has filled (in the emulated guest the client may take
        # seconds to start): its class's backlog, as tc counts it
        _await_backlog("pair-wire", "w1b", "1:16", 50, 30)
        marked = in_node("h1", "ping", "-n", "-c", "12", "-i", "0.2", "-Q", "0xb8", "-W",
                         "3", "10.0.0.2")
        plain = ping_rtts("h1", "10.0.0.2", 12, 0.2)
        client.send_signal(signal.SIGINT)  # the load has served: Ctrl-C ends it, status 130
        assert client.wait(30) == 130
    expedited = [float(m) for m in re.findall(r"time=([\d.]+) ms", marked.stdout)]
    # the expedited class is never full: its pings all come (the first may wait for ARP);
    # the plain ones join the best-effort queue CUBIC keeps full, whose drop-tail drops
    # what arrives as it overflows (2 of 8 in the emulated guest): half are enough to
    # compare their median with the expedited one's
    assert len(expedited) >= 11 and len(plain) >= 6
    assert 3 * statistics.median(expedited) <= statistics.median(plain), (expedited, plain)
    shown = subprocess.run(["tc", "-n", "pair-wire", "-s", "class", "show", "dev", "w1b"],
                           capture_output=True, text=True, check=True).stdout
    ef = re.search(r"class htb 1:10 .*?Sent (\d+) bytes (\d+) pkt", shown, re.S)
    assert ef is not None and int(ef.group(2)) >= 12, shown  # the pings, nothing else
    be = re.search(r"class htb 1:16 .*?Sent (\d+) bytes", shown, re.S)
    assert be is not None and int(be.group(1)) > 2_000_000, shown  # the bulk flow
    lab("link", "h1-h2", "set", "--qdisc", "droptail")
    after = subprocess.run(["tc", "-n", "pair-wire", "qdisc", "show", "dev", "w1b"],
                           capture_output=True, text=True, check=True).stdout
    assert "pfifo 10: parent 1:1 limit 100p" in after and "htb" not in after, after


def test_the_kernels_classes_police_expedited_traffic_over_its_cap(tmp_path):
    """`classes` at a switch's port is the kernel's htb tree whatever the shaper: expedited
    traffic sent at twice its cap (30 % of 5 Mbit/s) is policed, as the own classes police
    it: about half arrives, at the cap and the policer's burst, and what arrives has not
    queued (a queue of the policer's burst, 200 ms of the cap, would hold it 200 ms)."""
    (tmp_path / "policed.toml").write_text(
        'name = "policed"\n[hosts]\nh1 = {}\nh2 = {}\n[switches]\ns1 = {}\n'
        '[[links]]\na = "h1"\na_address = "10.31.0.1/24"\nb = "s1"\n'
        '[[links]]\na = "s1"\nb = "h2"\nb_address = "10.31.0.2/24"\nbw = 5\n'
        'max_queue_size = 100\nqdisc = "classes"\n')
    said = lab("up", str(tmp_path / "policed.toml")).stdout
    try:
        assert "queue classes: the kernel's htb" in said, said
        with server_in_h2() as port:
            done = in_node("h1", *SIMPLEPERF, "-c", "10.31.0.2", "-p", port, "-u", "-b", "3M",
                           "--dscp", "EF", "-t", "4", "-J", timeout=60)
        assert done.returncode == 0, done.stderr
        received = json.loads(done.stdout)["end"]["sum_received"]
        cap = 5e6 * diffserv.PRIORITY_SHARE + diffserv.priority_burst(
            5e6, FRAME_BYTES) * 8 / received["seconds"]
        assert 0.9 * cap <= received["bits_per_second"] <= 1.1 * cap, received
        assert 40 <= received["lost_percent"] <= 55, received
        assert received["queue_growth_ms"] < 30, received  # a frame at the cap: 8 ms
        shown = subprocess.run(["tc", "-n", "s1", "-s", "qdisc", "show", "dev", "s1-eth2"],
                               capture_output=True, text=True, check=True).stdout
        policer = re.search(r"qdisc tbf 100: parent 1:10 .*?dropped (\d+)", shown, re.S)
        assert policer is not None and int(policer.group(1)) > 100, shown
    finally:
        lab("down", "policed")


@pytest.mark.own_shaper
@pytest.mark.timing
def test_the_own_cake_keeps_a_ping_beside_bulk_flows_near_the_base_rtt(pair_lab):
    """CAKE in the delay line at 10 Mbit/s with four CUBIC flows filling a 1000-packet
    buffer: a ping beside them is a sparse flow of its own and waits about a frame, not
    the bulk flows' queues (drop-tail's would be over a second); the flows share the link
    within a few percent (its delivered total near the rate)."""
    pair_lab("--rate", "10M", "--delay", "10ms", "--queue", "1000", "--qdisc", "cake")
    with server_in_h2() as port:
        client = subprocess.Popen(["ip", "netns", "exec", "h1", *SIMPLEPERF, "-c", "10.0.0.2",
                                   "-p", port, "-t", "8", "--native", "-P", "4", "-C", "cubic",
                                   "--no-latency", "-J"], stdout=subprocess.PIPE)
        time.sleep(2.5)
        rtts = ping_rtts("h1", "10.0.0.2", 30, 0.1)
        out, _ = client.communicate(timeout=30)
    end = json.loads(out)["end"]
    assert end["sum_received"]["bits_per_second"] >= 0.9 * 10e6 * 1448 / 1514
    rates = [s["receiver"]["bits_per_second"] for s in end["streams"]]
    assert max(rates) / min(rates) < 1.3, rates
    assert len(rtts) >= 28 and statistics.median(rtts) <= 20 + 5, sorted(rtts)


def test_status_of_a_lab_of_many_hosts_is_a_line_not_a_table(tmp_path):
    """Past 16 hosts the expected RTTs are one line (a table would pass a terminal's width
    and grow with the square of the hosts); each host is still listed."""
    hosts = 20
    lines = ['name = "many"', "[hosts]"] + [f"h{i} = {{}}" for i in range(1, hosts + 1)]
    lines += ["[switches]", "s1 = {}"]
    for i in range(1, hosts + 1):
        lines += ["[[links]]", f'a = "h{i}"', f'a_address = "10.30.0.{i}/24"', 'b = "s1"']
    (tmp_path / "many.toml").write_text("\n".join(lines) + "\n")
    lab("up", str(tmp_path / "many.toml"))
    try:
        said = lab("status", "many").stdout
        assert "20 hosts, more than the 16 a table shows" in said
        assert all(f"  h{i} " in said for i in range(1, hosts + 1))
    finally:
        lab("down", "many")
