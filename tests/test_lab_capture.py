"""Captures and applications in real labs: dumpcap on a link, the analysis against tshark
and against the sender's own counters, scp/http/command flows with their real servers,
and every failure as one line with nothing left behind."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import SIMPLEPERF
from lab_helpers import Ready, in_node, lab, needs_lab
from test_capture_analysis import _our_counts, _tshark_counts

pytestmark = [*needs_lab, pytest.mark.capture]


def _pids_of(text: str) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if text.encode() in cmdline.read():
                    found.add(int(entry))
        except (OSError, ValueError):
            continue
    return found - {os.getpid()}


@pytest.fixture(scope="module")
def lossy_capture(tmp_path_factory):
    """A 3 s TCP transfer and a 2 s UDP stream across pair (100 Mbit/s, 5 ms, 1 % loss),
    captured on the link by `simpleperf lab capture`."""
    folder = tmp_path_factory.mktemp("capture")
    lab("up", "pair", "--rate", "100M", "--delay", "5ms", "--loss", "1%")
    try:
        pcap = folder / "link.pcapng"
        grab = subprocess.Popen(SIMPLEPERF + ["lab", "capture", "h1-h2", "-w", str(pcap)],
                                stderr=subprocess.PIPE, text=True)
        assert grab.stderr is not None
        while "Capturing on" not in (line := grab.stderr.readline()):
            assert line, "the capture did not start"
        server = Ready("h2", *SIMPLEPERF, "-s", "-p", "5201", ready="listening")
        tcp = in_node("h1", *SIMPLEPERF, "-c", "-I", "10.0.0.2", "-p", "5201", "-t", "3",
                      "--native", "-J")
        udp = in_node("h1", *SIMPLEPERF, "-c", "-I", "10.0.0.2", "-p", "5201", "-t", "2",
                      "-u", "-b", "20M", "-J")
        server.stop()
        grab.send_signal(signal.SIGINT)
        grab.wait(10)
    finally:
        lab("down", "pair", check=False)
    return pcap, json.loads(tcp.stdout), json.loads(udp.stdout)


@pytest.mark.guest
def test_link_capture_counts_are_wiresharks(lossy_capture) -> None:
    pcap, _, _ = lossy_capture
    ours = _our_counts(pcap)
    assert ours == _tshark_counts(pcap)
    assert max(row["retransmission"] for row in ours.values()) > 10  # losses were there


def test_the_capture_and_tcp_info_agree_on_retransmissions(lossy_capture) -> None:
    """The link drops 1 % at its input and is captured at its output, where each segment
    the sender sent again appears below the highest sequence seen: `resent` counts them.
    TCP_INFO's count, read once the receiver acknowledged everything (the last megabyte or
    so waits in the sender's buffer when it ends, and is sent again where dropped too), is
    the capture's and the retransmissions the link dropped again (1 % of them): here it
    was 2-5 above the capture, and in one CI run 5 below, unexplained; bound 2 % (+3) either
    way (read when the sender ended, it was 8-30 below). Wireshark's own count is lower: it
    calls SACK-driven retransmissions that arrive within an RTT of the highest segment
    out-of-order."""
    from simpleperf.lab.analysis import packets, tcp

    pcap, result, _ = lossy_capture
    sender = result["end"]["sum_sent"]["retransmits"]
    port = result["start"]["connected"][-1]["local_port"] if "start" in result else None
    flows = [d for d in tcp.analyze(packets.read(pcap).packets)
             if d.destination_port == 5201 and d.data_segments > 1000]
    (data,) = flows if port is None else [d for d in flows if d.source_port == port] or flows
    assert sender > 50
    assert abs(sender - data.resent) <= 0.02 * sender + 3, (sender, data.resent)
    assert data.retransmissions <= data.resent
    ratio = data.retransmission_ratio
    assert ratio is not None and 0.002 < ratio < 0.02


def _the_links_one_percent(lost: int, packets: int) -> bool:
    """`lost` of `packets` datagrams is what a link dropping 1 % of them loses: within four
    standard deviations of the binomial's mean (the emulated guest sends only 1,500 or so in
    its 2 s, so a fixed floor such as "more than 10" failed there one run in eight)."""
    mean = 0.01 * packets
    return lost > 0 and abs(lost - mean) <= 4 * (mean * 0.99) ** 0.5 + 1


def test_udp_loss_on_the_link_is_the_networks_not_the_receiving_hosts(lossy_capture):
    _, _, result = lossy_capture
    total = result["end"]["sum"]
    assert total["packets"] > 500
    assert _the_links_one_percent(total["lost_packets"], total["packets"]), total
    assert total["receiver_dropped_packets"] == 0


@pytest.mark.guest
def test_udp_gaps_in_the_capture_are_the_receivers_losses(lossy_capture) -> None:
    from simpleperf.lab.analysis import packets, udp

    pcap, _, result = lossy_capture
    (flow,) = [d for d in udp.analyze(packets.read(pcap).packets)
               if d.destination_port == 5201 and d.datagrams > 100]
    total = result["end"]["sum"]
    lost = total["lost_packets"]
    assert total["packets"] > 500
    assert _the_links_one_percent(lost, total["packets"]), total
    assert flow.gaps == lost
    assert flow.one_way_s and 0.004 < min(flow.one_way_s) < 0.008  # the link's 5 ms


def test_capture_mistakes_are_one_line_and_leave_nothing(tmp_path: Path) -> None:
    lab("up", "pair")
    try:
        for args, message in ((["L9"], "is neither a link"),
                              (["h1:eth7"], "has no interface 'eth7'"),
                              (["h1-h2", "--filter", "tcp portx 5"], "is not valid"),
                              (["h1-h2", "--count", "0"], "above 0")):
            done = lab("capture", *args, "-w", str(tmp_path / "x.pcapng"), check=False)
            assert done.returncode in (1, 2), (args, done.stderr)
            assert message in done.stderr and "Traceback" not in done.stderr
            assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert not _pids_of("dumpcap")
    finally:
        lab("down", "pair", check=False)
    for content in (b"", b"no capture at all" * 9):
        bad = tmp_path / "bad.pcap"
        bad.write_bytes(content)
        done = lab("analyze", str(bad), check=False)
        assert done.returncode == 1 and "is not a pcap or pcapng capture" in done.stderr


def test_a_killed_capture_is_ended_by_down(tmp_path: Path) -> None:
    lab("up", "pair")
    try:
        grab = subprocess.Popen(SIMPLEPERF + ["lab", "capture", "h1-h2", "-w",
                                              str(tmp_path / "c.pcapng")],
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        assert grab.stderr is not None
        while "Capturing on" not in (line := grab.stderr.readline()):
            assert line
        dumpcaps = _pids_of(str(tmp_path / "c.pcapng"))
        assert dumpcaps
        grab.kill()  # SIGKILL the lab command; dumpcap lives on, recorded
        grab.wait()
        time.sleep(0.2)
        assert _pids_of(str(tmp_path / "c.pcapng"))
    finally:
        lab("down", "pair", check=False)
    time.sleep(0.5)
    assert not _pids_of(str(tmp_path / "c.pcapng"))


APPLICATIONS = """
name = "apps"
topology = "pair"
capture = ["h1-h2"]
capture_limit = "100K"
[pair]
rate = "50M"
delay = "2ms"
[timing]
duration = "2s"
[quick]
duration = "2s"  # as long as a full run's: the transfers move their whole size
[[steps]]
name = "scp and http"
flows = [{ kind = "scp", from = "h1", to = "h2", size = "3M" },
         { kind = "http", from = "h1", to = "h2", size = "1M", objects = 3, content = "sparse" }]
[[steps]]
name = "command"
[[steps.flows]]
kind = "command"
from = "h1"
to = "h2"
server = "sleep 301 & sleep 302"
client = "echo to {address}:{port}; exit 3"
"""


def test_applications_run_timed_and_captured_and_leave_nothing(tmp_path: Path) -> None:
    (tmp_path / "apps.toml").write_text(APPLICATIONS)
    command = SIMPLEPERF + ["lab", "run", str(tmp_path / "apps.toml"), "--quick", "--results",
                            str(tmp_path / "results")]
    refused = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1 and refused.stdout == "" and not (tmp_path / "results"
                                                                     ).exists()
    assert "runs 2 command lines as root" in refused.stderr and "--allow-commands" in \
        refused.stderr
    done = subprocess.run(command + ["--allow-commands"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr  # the command flow exits 3
    assert done.stdout.startswith("Command flows run as root in the lab's nodes")
    assert "sleep 301 & sleep 302; echo to {address}:{port}; exit 3" in done.stdout
    assert done.stdout.strip().splitlines()[-1].startswith("1 of 3 flows failed")
    (folder,) = (tmp_path / "results").iterdir()
    db = sqlite3.connect(folder / "results.sqlite")
    flows = {kind: (ok, seconds, status, throughput, output, error) for kind, ok, seconds,
             status, throughput, output, error in db.execute(
                 "SELECT kind, ok, seconds, exit_status, throughput, output, error FROM flow")}
    for kind, size in (("scp", 3e6), ("http", 3e6)):
        ok, seconds, status, throughput, _, _ = flows[kind]
        assert ok and status == 0 and 0 < seconds < 60
        assert throughput == pytest.approx(size * 8 / seconds)
        assert throughput < 50e6  # it crossed the 50 Mbit/s link
    ok, _, status, _, output, error = flows["command"]
    assert not ok and status == 3 and output == "to 10.0.0.2:15001"
    assert "exited with status 3" in error
    captures = db.execute("SELECT path, packets, cut_short FROM capture").fetchall()
    assert len(captures) == 2 and all((folder / path).is_file() for path, _, _ in captures)
    assert captures[0][2] == 1 and "CUT SHORT" in done.stdout  # 100 kB of 6 MB of headers
    scp_rows = db.execute("SELECT data_segments FROM capture_tcp t JOIN flow f ON "
                          "f.id = t.flow_id WHERE f.kind = 'scp'").fetchall()
    assert scp_rows  # the capture's connections are matched to the flow by its port
    assert "<h2>Captures</h2>" in (folder / "report.html").read_text()
    assert not _pids_of("sshd-15001.conf") and not _pids_of("http.server")
    assert not _pids_of("sleep 301") and not _pids_of("sleep 302")  # a background job too
    assert not _pids_of("dumpcap")
    assert not list(Path("/tmp").glob("simpleperf-pair-*"))


def test_a_missing_program_stops_the_run_before_anything_is_built(tmp_path: Path) -> None:
    (tmp_path / "apps.toml").write_text(APPLICATIONS)
    environment = dict(os.environ, PATH=str(tmp_path))  # no curl, no dumpcap
    done = subprocess.run([sys.executable, "-m", "simpleperf", "lab", "run",
                           str(tmp_path / "apps.toml"), "--results", str(tmp_path / "r"),
                           "--allow-commands"],
                          capture_output=True, text=True, timeout=60, env=environment)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "apt-get install" in done.stderr
    assert not (tmp_path / "r").exists()


MARKED = """
name = "marked"
topology = "pair"
capture = ["h1-h2"]
[pair]
rate = "20M"
delay = "2ms"
[quick]
duration = "2s"
ping_count = 3
ping_interval = "0.2s"
[[steps]]
name = "three classes"
flows = [{ kind = "tcp", from = "h1", to = "h2", dscp = "EF" },
         { kind = "udp", from = "h1", to = "h2", rate = "1M", dscp = "AF41" },
         { kind = "ping", from = "h1", to = "h2", dscp = 40 }]
"""


def test_flows_mark_their_packets_with_their_dscp(tmp_path: Path) -> None:
    """A flow's dscp reaches the wire: every packet h1 sent of each flow carries it."""
    (tmp_path / "marked.toml").write_text(MARKED)
    done = subprocess.run(SIMPLEPERF + ["lab", "run", str(tmp_path / "marked.toml"),
                                        "--quick", "--results", str(tmp_path / "results")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (folder,) = (tmp_path / "results").iterdir()
    (pcap,) = (folder / "captures").glob("*.pcapng")
    fields = subprocess.run(["tshark", "-n", "-r", str(pcap), "-Y", "ip.src == 10.0.0.1",
                             "-T", "fields", "-e", "ip.proto", "-e", "ip.dsfield.dscp",
                             "-e", "tcp.srcport", "-e", "tcp.dstport", "-e", "udp.dstport"],
                            capture_output=True, text=True, check=True).stdout
    marks: dict[tuple[str, ...], set[str]] = {}
    packets: dict[tuple[str, ...], int] = {}
    for line in fields.splitlines():
        proto, dscp, *ports = line.split("\t")
        marks.setdefault((proto, *ports), set()).add(dscp)
        packets[(proto, *ports)] = packets.get((proto, *ports), 0) + 1
    # The tcp flow: its data connection marked from its SYN on, its control one not (as
    # iperf3's); the udp flow's datagrams, its greeting too; every echo request.
    tcp = [key for key in marks if key[0] == "6" and key[2] == "15001"]
    data = max(tcp, key=packets.__getitem__)
    assert marks[data] == {"46"} and all(marks[k] == {"0"} for k in tcp if k != data)
    assert marks[("17", "", "", "15002")] == {"34"}
    assert marks[("1", "", "", "")] == {"40"} and packets[("1", "", "", "")] == 3


def test_capture_to_standard_output_is_a_live_stream(tmp_path: Path) -> None:
    """`-w -` is what `| wireshark -k -i -` reads: a capture file on standard output."""
    from simpleperf.lab.analysis import packets

    lab("up", "pair", "--delay", "1ms")
    try:
        stream = tmp_path / "live.pcapng"
        with open(stream, "wb") as out:
            grab = subprocess.Popen(SIMPLEPERF + ["lab", "capture", "h1-h2", "-w", "-",
                                                  "--count", "4", "--filter", "icmp"],
                                    stdout=out, stderr=subprocess.PIPE, text=True)
            assert grab.stderr is not None
            while "Capturing on" not in (line := grab.stderr.readline()):
                assert line
            in_node("h1", "ping", "-c", "3", "-i", "0.2", "10.0.0.2")
            assert grab.wait(10) == 0
        assert packets.read(stream).damage is None
        listed = subprocess.run(["tshark", "-n", "-r", str(stream)], capture_output=True,
                                text=True, check=True).stdout.splitlines()
        assert len(listed) == 4 and all("ICMP" in line for line in listed)
    finally:
        lab("down", "pair", check=False)


FULL_DISK = """
name = "full"
topology = "pair"
capture = ["h1-h2"]
[pair]
rate = "200M"
[quick]
duration = "3s"
[[steps]]
flows = [{ kind = "tcp", from = "h1", to = "h2" }]
"""


def test_a_full_results_disk_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    """Captures fill a 2 MB file system: the run says so in one line, exits 1, takes its
    lab down, and leaves no capture running."""
    disk = tmp_path / "small"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], check=True)
    try:
        (tmp_path / "full.toml").write_text(FULL_DISK)
        done = subprocess.run(SIMPLEPERF + ["lab", "run", str(tmp_path / "full.toml"),
                                            "--quick", "--results", str(disk)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 1, done.stdout + done.stderr
        assert done.stderr.count("\n") == 1
        assert "disk is full" in done.stderr or "No space left" in done.stderr
        assert "marked incomplete" in done.stderr
        assert "Traceback" not in done.stdout + done.stderr
        assert not _pids_of("dumpcap") and lab("status").stdout.strip() == "no lab is up"
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def _without(modules: list[str], *args: str) -> subprocess.CompletedProcess:
    """simpleperf lab as on a machine without these Python modules (Python 3.10 without the
    lab extra has no TOML reader; dpkt comes with the extra too)."""
    block = "".join(f"sys.modules[{name!r}] = None; " for name in modules)
    return subprocess.run([sys.executable, "-c", f"import sys; {block}"
                           "from simpleperf.__main__ import main; sys.argv[0] = 'simpleperf'; "
                           "sys.exit(main())", "lab", *args],
                          capture_output=True, text=True, timeout=60)


def test_without_the_lab_extra_help_works_and_the_rest_says_what_to_install(tmp_path):
    done = _without(["tomllib", "tomli", "dpkt"], "--help")
    assert done.returncode == 0 and "capture" in done.stdout and not done.stderr
    for args, message in ((["up", "portfolio"], "needs tomli"),
                          (["analyze", str(tmp_path / "x.pcap")], "needs dpkt")):
        done = _without(["tomllib", "tomli", "dpkt"], *args)
        assert done.returncode == 1 and message in done.stderr
        assert done.stderr.count("\n") == 1 and "pip install 'simpleperf[lab]'" in done.stderr


def test_without_root_each_command_says_what_needs_root():
    """Run as nobody, with Debian's Python and a copy of the package it can read (pytest's
    own temporary folders are root's alone)."""
    import shutil
    import tempfile

    import simpleperf

    copy = Path(tempfile.mkdtemp(prefix="simpleperf-nobody-"))
    shutil.copytree(Path(simpleperf.__file__).parent, copy / "simpleperf")
    for path in [copy, *copy.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    try:
        _each_says_root(copy)
    finally:
        shutil.rmtree(copy)


def _each_says_root(copy: Path) -> None:
    for args, reason in ((["exec", "h1", "--", "true"], "to run commands inside a lab node"),
                         (["down"], "to remove a lab's namespaces"),
                         (["up", "pair"], "to create network namespaces"),
                         (["capture", "h1-h2"], "to capture inside a lab")):
        done = subprocess.run(["runuser", "-u", "nobody", "--", "env", f"PYTHONPATH={copy}",
                               "/usr/bin/python3", "-m", "simpleperf", "lab", *args],
                              capture_output=True, text=True, timeout=60, cwd="/")
        assert done.returncode == 1, (args, done.stderr)
        assert f"needs root privileges {reason}" in done.stderr, done.stderr


COMMAND_SERVER = """
name = "children"
topology = "pair"
[[steps]]
[[steps.flows]]
kind = "command"
from = "h1"
to = "h2"
server = "sleep 307 & sleep 308"
client = "sleep 20"
"""


@pytest.mark.parametrize("signals", [(signal.SIGTERM,), (signal.SIGKILL,),
                                     (signal.SIGINT, signal.SIGTERM, signal.SIGINT)],
                         ids=["SIGTERM", "SIGKILL", "SIGINT-then-more"])
def test_a_stopped_run_leaves_no_command_server_children(tmp_path: Path, signals) -> None:
    """SIGTERM cleans up as Ctrl-C does; after SIGKILL, `lab down` does. Either way the
    command server's shell goes with every process it started. Signals that follow the
    first (an impatient user, a supervisor's SIGTERM) do not cut the cleanup short."""
    signum = signals[0]
    (tmp_path / "c.toml").write_text(COMMAND_SERVER)
    run = subprocess.Popen(SIMPLEPERF + ["lab", "run", str(tmp_path / "c.toml"), "--results",
                                         str(tmp_path / "r"), "--allow-commands"],
                           stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    assert run.stdout is not None
    try:
        while "[1/1]" not in (line := run.stdout.readline()):
            assert line, run.stderr.read() if run.stderr else ""
        deadline = time.monotonic() + 10
        while not (_pids_of("sleep 307") and _pids_of("sleep 308")):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        run.send_signal(signum)
        for sent in signals[1:] * 50:  # the others, again and again while it cleans up
            time.sleep(0.01)
            if run.poll() is not None:
                break
            run.send_signal(sent)
        status = run.wait(30)
        assert status == (-signal.SIGKILL if signum == signal.SIGKILL else 130)
        if signum == signal.SIGKILL:
            lab("down", "pair")
        deadline = time.monotonic() + 5  # a signalled process takes a moment to be gone
        while (_pids_of("sleep 307") or _pids_of("sleep 308")) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _pids_of("sleep 307") and not _pids_of("sleep 308")
        assert lab("status").stdout.strip() == "no lab is up"
    finally:
        if run.poll() is None:
            run.kill()
        lab("down", "pair", check=False)
