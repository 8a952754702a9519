"""`simpleperf exporter`: modules, the targets it may probe, what a probe reports (parsed
with prometheus_client's own parser), turns on a busy target, hostile requests; then, in a
lab, a real Prometheus (Debian's) scraping it: its series agree with the tool run directly,
and a link made slower shows in them."""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

import pytest
from helpers import (
    SIMPLEPERF,
    LiveProcess,
    free_port,
    nginx_nq_server,
    proc_status,
    start_iperf3_server,
    start_server,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from lab_helpers import in_node, lab, needs_lab
from prometheus_client.parser import text_string_to_metric_families

from simpleperf.exporter import modules, probe
from simpleperf.exporter.exposition import METRICS, page
from simpleperf.exporter.targets import Allowed, Refused


def write_config(tmp_path, text: str) -> str:
    path = tmp_path / "modules.toml"
    path.write_text(text)
    return str(path)


def series(body: str) -> dict[tuple[str, tuple], float]:
    """Every sample of an exposition page, by name and labels (prometheus_client's parser:
    a page it cannot read fails the test)."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body) for s in family.samples}


def value(found: dict, name: str, **labels: str) -> float:
    matches = [v for (n, have), v in found.items()
               if n == name and all(dict(have).get(k) == w for k, w in labels.items())]
    assert len(matches) == 1, (name, labels, sorted(k for k in found if k[0] == name))
    return matches[0]


# ---------------------------------------------------------------- modules and targets


def test_modules_from_a_file_add_to_and_replace_the_built_in_ones(tmp_path):
    path = write_config(tmp_path, '[modules.tcp]\nduration = "2s"\n'
                        '[modules.voice]\nprober = "udp"\nrate = "64k"\nlength = 160\n'
                        'dscp = "EF"\ndirection = "bidir"\n')
    known = modules.load(path)
    assert known["tcp"].duration == 2.0 and known["udp"] == modules.BUILT_IN["udp"]
    voice = known["voice"]
    assert (voice.rate, voice.length, voice.dscp, voice.directions()) == \
        (64e3, 160, 46, ("forward", "reverse"))
    line = probe.command(voice, "10.0.0.2", None)
    for words in (["-u"], ["-b", "64000"], ["-l", "160"], ["--dscp", "46"], ["--bidir"]):
        assert " ".join(words) in " ".join(line), (words, line)
    iperf3 = probe.command(known["iperf3_tcp"], "h", None)
    assert "--iperf3" in iperf3 and iperf3[iperf3.index("-p") + 1] == "5201"
    assert "--rtt" in probe.command(known["rtt"], "h", 9)


def test_every_prober_has_its_client_flags_and_its_reader_and_nothing_else_does():
    assert set(probe.RUNS) == set(modules.PROBERS)
    for name, (flags, _) in probe.RUNS.items():
        line = flags(modules.Module("m", prober=name))
        assert ("-u" in line) == modules.PROBER_OF[name].transport.datagrams, (name, line)


def test_an_http_server_is_measured_at_its_configuration_url():
    """server = "http": the rpm prober runs the draft over HTTP/2 and TLS (-c URL --rpm)
    at the target's configuration, port 443 unless the target or the module names one."""
    http = modules.BUILT_IN["rpm_http"]
    assert http.server == "http" and http.prober == "rpm" and not http.insecure
    line = probe.command(http, "nq.example", None)
    assert line[3:] == ["-c", "https://nq.example:443/.well-known/nq", "-J", "-t", "10",
                        "--rpm"]
    own = modules.parse("own", {"prober": "rpm", "server": "http", "path": "/config",
                                "insecure": True, "direction": "reverse", "port": 8443})
    assert probe.command(own, "::1", None)[3:] == [
        "-c", "https://[::1]:8443/config", "-J", "-t", "5", "--rpm", "-R", "--insecure"]
    assert probe.command(own, "10.0.0.2", 9000)[4] == "https://10.0.0.2:9000/config"


@pytest.mark.parametrize("text, said", [
    ("[modules.x]\nprober = 'icmp'\n", "module x: prober must be one of tcp, udp, rtt, rpm"),
    ("[modules.x]\nduration = '600s'\n", "module x: duration: must be from 0.5 s to 300 s"),
    ("[modules.x]\nsize = 3\n", "module x: 'size' is not a field"),
    ("[modules.x]\nrate = 'fast'\n", "module x: rate 'fast' is not a rate"),
    ("[modules.x]\ndscp = 'XX'\n", "module x: dscp must be 0..63 or a name"),
    ("[modules.x]\nprober = 'rtt'\nserver = 'iperf3'\n", "iperf3 server runs tcp and udp"),
    ("[modules.x]\nparallel = 0\n", "module x: parallel: must be a whole number from 1"),
    ("[modules.x]\nserver = 'http'\n", "module x: an http server is measured by the rpm"),
    ("[modules.x]\nprober = 'rpm'\ninsecure = true\n", "path and insecure are for server"),
    ("[modules.x]\nprober = 'rpm'\nserver = 'http'\npath = 'nq'\n",
     "module x: path must be a URL's path"),
    ("[modules.x]\nprober = 'rpm'\nserver = 'http'\ninsecure = 'yes'\n",
     "module x: insecure must be true or false"),
    ("[scrape]\n", "'scrape' is not a table the exporter reads"),
    ("[modules.x\n", "not valid TOML"),
])
def test_a_bad_modules_file_is_one_line_and_exit_status_2(tmp_path, text, said):
    path = write_config(tmp_path, text)
    with pytest.raises(modules.ConfigError, match=re.escape(said)):
        modules.load(path)
    done = subprocess.run(SIMPLEPERF + ["exporter", "--config", path], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and said.split(":")[0] in done.stderr, done.stderr


def test_only_allowed_targets_are_probed():
    default = Allowed.parse(None)
    assert default.check("127.0.0.1:5201").address == "127.0.0.1"
    assert default.check("[::1]:8088").port == 8088
    assert default.check("localhost").address in ("127.0.0.1", "::1")  # resolved, checked
    for outside in ("10.0.0.1", "192.0.2.7:80", "[2001:db8::1]"):
        with pytest.raises(Refused) as refused:
            default.check(outside)
        assert refused.value.status == 403
    lab_only = Allowed.parse(["10.0.0.0/24", "server.example"])
    assert lab_only.check("10.0.0.2").address == "10.0.0.2"
    assert lab_only.check("server.example:9").address == "server.example"
    with pytest.raises(Refused, match="not in an allowed network"):
        lab_only.check("127.0.0.1")
    for malformed in ("", "a b", "h:0", "h:99999", "[::1", "x;rm", "h:1:2:3",
                      "h:" + "9" * 5000, "[::1]:" + "1" * 5000, "h:\u00b2", "h:1_0"):
        with pytest.raises(Refused) as refused:
            default.check(malformed)
        assert refused.value.status in (400, 403), malformed
    with pytest.raises(ValueError, match="neither a network"):
        Allowed.parse(["not a network!"])


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_any_target_text_is_allowed_or_refused_never_an_exception(text):
    allowed = Allowed.parse(["10.0.0.0/8"])
    try:
        target = allowed.check(text)
    except Refused as refused:
        assert refused.status in (400, 403) and "\n" not in str(refused)
    else:
        assert target.address.startswith("10.")


def test_a_failed_probe_reports_success_zero_and_nothing_else():
    readings = probe.Readings()
    readings.gauge("simpleperf_goodput_bits_per_second", 1e6, direction="forward",
                   protocol="tcp")
    failed = series(page(readings, "10.0.0.2", "tcp", False, 1.5, 0.25).decode())
    assert {name for name, _ in failed} == {"probe_success", "probe_duration_seconds",
                                            "simpleperf_probe_wait_seconds"}
    assert value(failed, "probe_success") == 0
    whole = series(page(readings, "10.0.0.2", "tcp", True, 1.5, 0.25).decode())
    assert value(whole, "simpleperf_goodput_bits_per_second", direction="forward",
                 target="10.0.0.2", module="tcp") == 1e6
    assert set(METRICS) >= {name for name, _ in whole}


def test_a_document_without_what_the_prober_gives_is_a_failed_probe():
    with pytest.raises(probe.ProbeFailed, match="lacks"):
        probe.readings(modules.BUILT_IN["tcp"], {"end": {"sum_sent": {}}})
    with pytest.raises(probe.ProbeFailed, match="no end"):
        probe.readings(modules.BUILT_IN["udp"], {"start": {}})


# ---------------------------------------------------------------- a running exporter


class Exporter:
    def __init__(self, *args: str) -> None:
        for _ in range(3):
            self.port = free_port()
            self.process = LiveProcess("exporter", "--listen", f"127.0.0.1:{self.port}", *args)
            try:
                self.process.wait_for(lambda lines: any("simpleperf exporter on" in line
                                                        for line in lines))
                return
            except AssertionError:
                self.process.close()
        raise AssertionError("the exporter did not start")

    def get(self, path: str, timeout_header: float | str | None = 20, method: str = "GET"
            ) -> tuple[int, str]:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method=method)
        if timeout_header is not None:
            request.add_header("X-Prometheus-Scrape-Timeout-Seconds", str(timeout_header))
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def close(self) -> None:
        assert self.process.interrupt() == 0
        self.process.close()


@pytest.fixture
def exporter_and_server(tmp_path):
    server, port = start_server()
    config = write_config(tmp_path, '[modules.tcp1]\nduration = "1s"\n'
                                    '[modules.udp1]\nprober = "udp"\nduration = "1s"\n'
                                    'rate = "20M"\ntrip_times = true\n'
                                    '[modules.rtt1]\nprober = "rtt"\nduration = "1s"\n')
    exporter = Exporter("--config", config, "--queue", "1")
    yield exporter, port
    exporter.close()
    server.close()


@pytest.mark.loopback
def test_a_probe_reports_what_the_tool_measures(exporter_and_server):
    exporter, port = exporter_and_server
    status, body = exporter.get(f"/probe?target=127.0.0.1:{port}&module=udp1")
    assert status == 200
    found = series(body)
    assert value(found, "probe_success") == 1
    goodput = value(found, "simpleperf_goodput_bits_per_second", direction="forward",
                    protocol="udp")
    assert 0.9 * 20e6 < goodput < 1.1 * 20e6
    packets = value(found, "simpleperf_udp_packets", direction="forward")
    assert value(found, "simpleperf_one_way_delay_seconds_count", direction="forward") == \
        packets - value(found, "simpleperf_udp_lost_packets", direction="forward")
    assert value(found, "simpleperf_rtt_seconds_count", load="idle") >= 1
    status, body = exporter.get(f"/probe?target=127.0.0.1:{port}&module=tcp1")
    found = series(body)
    assert value(found, "simpleperf_received_bytes", direction="forward") > 0
    assert value(found, "simpleperf_rtt_seconds_count", load="loaded") >= 1
    assert [labels for (name, labels) in found if name == "simpleperf_tcp_congestion_info"]
    own = series(exporter.get("/metrics")[1])
    assert value(own, "simpleperf_exporter_probes_total", module="tcp1", result="success") == 1


@pytest.mark.loopback
def test_any_responsiveness_server_is_probed_over_https(tmp_path):
    """The rpm prober against nginx set up as Apple's server (a server no one here wrote)
    and a simpleperf server, both at their configuration URL."""
    served, port = start_server()
    # nginx's workers read its files as its own user: a folder under /tmp, not pytest's
    nginx_folder = tempfile.TemporaryDirectory(prefix="simpleperf-nq-")
    nginx, nginx_port = nginx_nq_server(nginx_folder.name)
    exporter = Exporter("--config", write_config(
        tmp_path, '[modules.nq]\nprober = "rpm"\nserver = "http"\ninsecure = true\n'
                  'duration = "3s"\ndirection = "reverse"\n'))
    try:
        for target in (nginx_port, port):
            status, body = exporter.get(f"/probe?target=127.0.0.1:{target}&module=nq",
                                        timeout_header=30)
            found = series(body)
            assert status == 200 and value(found, "probe_success") == 1, body[-2000:]
            assert value(found, "simpleperf_responsiveness_rpm") > 0
            assert value(found, "simpleperf_rpm", load="loaded") > 0
            assert value(found, "simpleperf_rpm", load="idle") > 0
    finally:
        exporter.close()
        served.close()
        nginx.terminate()
        nginx.wait(20)
        nginx_folder.cleanup()


@pytest.mark.loopback
@pytest.mark.iperf3
def test_an_iperf3_server_is_probed_for_what_iperf3_can_give(tmp_path):
    server, port = start_iperf3_server("3.12")
    exporter = Exporter("--config", write_config(
        tmp_path, '[modules.i3]\nserver = "iperf3"\nprober = "udp"\nrate = "30M"\n'
                  'duration = "1s"\n'))
    try:
        found = series(exporter.get(f"/probe?target=127.0.0.1:{port}&module=i3")[1])
        assert value(found, "probe_success") == 1
        assert 0.9 * 30e6 < value(found, "simpleperf_goodput_bits_per_second",
                                  direction="forward", protocol="udp") < 1.1 * 30e6
        assert value(found, "simpleperf_udp_packets", direction="forward") > 0
        # No RTT probes: iperf3 has no echo service.
        assert not [name for name, _ in found if name.startswith("simpleperf_rtt")]
    finally:
        exporter.close()
        server.kill()
        server.wait()


@pytest.mark.loopback
def test_throughput_probes_take_turns_and_rtt_probes_do_not_wait(exporter_and_server):
    exporter, port = exporter_and_server
    answers: dict[str, dict] = {}

    def scrape(name: str, module: str, delay: float) -> None:
        time.sleep(delay)
        answers[name] = series(exporter.get(f"/probe?target=127.0.0.1:{port}&module="
                                            f"{module}")[1])
    threads = [threading.Thread(target=scrape, args=args) for args in
               (("first", "tcp1", 0), ("second", "tcp1", 0.3), ("third", "tcp1", 0.4),
                ("rtt", "rtt1", 0.5))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert value(answers["first"], "probe_success") == 1
    assert value(answers["second"], "probe_success") == 1
    # It waited for the first to end (1 s of test and its setting up), not measured beside it.
    assert value(answers["second"], "simpleperf_probe_wait_seconds") > 0.5
    # --queue 1: the third found the one place in the queue taken.
    assert value(answers["third"], "probe_success") == 0
    assert value(answers["rtt"], "probe_success") == 1
    assert value(answers["rtt"], "simpleperf_probe_wait_seconds") < 0.1


@pytest.mark.loopback
def test_bad_requests_get_one_line_and_their_status(exporter_and_server):
    exporter, port = exporter_and_server
    for path, status, said in (
            (f"/probe?target=10.9.9.9:{port}&module=tcp1", 403, "not in an allowed network"),
            (f"/probe?target=127.0.0.1:{port}&module=nope", 400, "unknown module 'nope'"),
            ("/probe?module=tcp1", 400, "give one target"),
            ("/probe?target=127.0.0.1&target=127.0.0.2&module=tcp1", 400, "give one target"),
            ("/probe?target=a%0Ab&module=tcp1", 400, "is not HOST"),
            ("/elsewhere", 404, "no page /elsewhere")):
        got, body = exporter.get(path)
        assert (got, body.count("\n")) == (status, 1) and said in body, (path, got, body)
    got, body = exporter.get(f"/probe?target=127.0.0.1:{port}&module=tcp1", timeout_header=2)
    assert got == 400 and "needs 2.5 s and the scrape allows 1.5 s" in body
    for timeout in ("soon", "1_0", "nan", "inf", "1e1"):
        got, body = exporter.get(f"/probe?target=127.0.0.1:{port}&module=tcp1",
                                 timeout_header=timeout)
        assert got == 400 and "is not a number of seconds" in body, timeout
    # a port of 5,000 digits: past Python's limit on an integer's digits, it was a
    # traceback and no answer
    got, body = exporter.get(f"/probe?target=127.0.0.1:{'9' * 5000}&module=tcp1")
    assert (got, body.count("\n")) == (400, 1) and "the port must be 1 to 65535" in body
    assert exporter.get("/probe", method="POST")[0] == 405
    # A target with nothing listening: a failed probe, said on the exporter's stderr.
    got, body = exporter.get(f"/probe?target=127.0.0.1:{free_port()}&module=tcp1")
    assert got == 200 and value(series(body), "probe_success") == 0


@pytest.mark.slow
def test_a_request_trickled_a_byte_at_a_time_is_cut_at_the_whole_requests_deadline():
    """'send its request within 10 s' was each read's limit: a byte every 4 s held the
    connection (and its thread) for 40 s and more. Now the request line and headers must
    be whole within 10 s of the first wait for them."""
    exporter = Exporter()
    try:
        with socket.create_connection(("127.0.0.1", exporter.port), timeout=30) as sock:
            began = time.monotonic()
            closed = False
            for byte in b"GET /probe?target=127.0.0.1&module=tcp HTTP/1.1\r\n":
                try:
                    sock.sendall(bytes([byte]))
                except OSError:
                    closed = True
                    break
                sock.settimeout(3)
                try:
                    if sock.recv(1024) == b"":
                        closed = True
                        break
                except TimeoutError:
                    continue
            assert closed and time.monotonic() - began < 14
    finally:
        exporter.close()


@pytest.mark.loopback
def test_threads_and_descriptors_stay_flat_over_many_probes(exporter_and_server):
    exporter, port = exporter_and_server
    pid = exporter.process.process.pid
    exporter.get(f"/probe?target=127.0.0.1:{port}&module=rtt1")
    before = proc_status(pid)
    silent = socket.create_connection(("127.0.0.1", exporter.port))  # sends nothing
    try:
        for round_number in range(40):
            module = "rtt1" if round_number % 10 == 0 else "nope"
            exporter.get(f"/probe?target=127.0.0.1:{port}&module={module}")
    finally:
        silent.close()
    time.sleep(0.5)
    after = proc_status(pid)
    assert after["threads"] <= before["threads"] and after["fds"] <= before["fds"], \
        (before, after)


def clients_of(port: int) -> list[int]:
    """Processes running simpleperf's client against `port`."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                words = cmdline.read().split(b"\0")
        except (OSError, ValueError):
            continue
        if b"-c" in words and str(port).encode() in words and b"-J" in words:
            found.append(int(entry))
    return found


@pytest.mark.loopback
def test_an_exporter_stopped_mid_probe_leaves_no_client_behind(tmp_path):
    server, port = start_server()
    exporter = Exporter("--config", write_config(tmp_path, '[modules.long]\nduration = "8s"\n'))
    try:
        ended: list[str] = []

        def probe_it() -> None:
            try:
                exporter.get(f"/probe?target=127.0.0.1:{port}&module=long")
            except (OSError, http.client.HTTPException) as error:
                ended.append(type(error).__name__)  # the exporter stopped before answering
        scrape = threading.Thread(target=probe_it)
        scrape.start()
        deadline = time.monotonic() + 10
        while not clients_of(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert clients_of(port), "the probe's client never started"
        assert exporter.process.interrupt() == 0
        scrape.join(20)
        time.sleep(0.2)
        assert clients_of(port) == []
    finally:
        exporter.process.close()
        server.close()


@pytest.mark.loopback
def test_exporters_share_a_server_that_queues_its_tests(tmp_path):
    """Two exporters (as two Prometheus replicas' would be) probe one server at once: the
    server runs one test at a time (--max-clients 1) and queues the other, which waits and
    says so, instead of failing or measuring beside the first.

    Each arrival is ordered by the server's own "is connected" line, not by a sleep: beside
    a busy core a client process can take a second to start, and would arrive late."""
    server, port = start_server("--max-clients", "1", "--queue", "1", "--queue-wait", "8")
    config = write_config(tmp_path, '[modules.first]\nduration = "4s"\n'
                          '[modules.second]\nduration = "1s"\n')
    exporters = [Exporter("--config", config) for _ in range(2)]
    answers: dict[str, dict] = {}

    def arrivals() -> int:
        return server.count("is connected")

    def arrived(count: int) -> None:
        server.wait_for(lambda lines: arrivals() >= count)
    try:
        def scrape(exporter: Exporter, module: str) -> None:
            answers[module] = series(exporter.get(
                f"/probe?target=127.0.0.1:{port}&module={module}")[1])
        threads = [threading.Thread(target=scrape, args=(e, m))
                   for e, m in zip(exporters, ("first", "second"), strict=True)]
        threads[0].start()
        arrived(1)
        threads[1].start()
        arrived(2)
        second_arrived = time.monotonic()
        # The server reports a test as it ends, and then gives its place to the next.
        server.wait_for(lambda lines: server.count("Test from") >= 1)
        first_ended = time.monotonic()
        for thread in threads:
            thread.join(60)
        assert [value(answers[m], "probe_success") for m in ("first", "second")] == [1, 1]
        assert value(answers["first"], "simpleperf_probe_wait_seconds") < 0.5
        # The second waited from its arrival to the first's end, as the server saw both.
        waited = value(answers["second"], "simpleperf_probe_wait_seconds")
        assert abs(waited - (first_ended - second_arrived)) < 0.5, \
            (waited, first_ended - second_arrived)
        assert waited < 4.5
        # The queue holds one: a third test while one runs and one waits is refused.
        before = arrivals()
        native = SIMPLEPERF + ["-c", "127.0.0.1", "-p", str(port), "-J", "-t"]
        first = subprocess.Popen(native + ["4"], stdout=subprocess.DEVNULL)
        arrived(before + 1)
        second = subprocess.Popen(native + ["1"], stdout=subprocess.DEVNULL)
        arrived(before + 2)
        third = subprocess.run(native + ["1"], capture_output=True, text=True, timeout=30)
        assert third.returncode == 1
        assert "--queue 1: full, or the 8 s wait ran out" in third.stderr, third.stderr
        assert first.wait(30) == 0 and second.wait(30) == 0
    finally:
        for exporter in exporters:
            exporter.close()
        server.close()


def test_a_queue_needs_a_limit_to_wait_for():
    done = subprocess.run(SIMPLEPERF + ["-s", "--queue", "2"], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 2 and "give --max-clients too" in done.stderr
    done = subprocess.run(SIMPLEPERF + ["-s", "--max-clients", "1", "--queue", "1",
                                        "--queue-wait", "60"], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 2 and "--queue-wait must be a number of seconds" in done.stderr


# ---------------------------------------------------------------- Prometheus, in a lab

PROMETHEUS_CONFIG = """
global:
  scrape_interval: 3s
  scrape_timeout: 3s
scrape_configs:
  - job_name: simpleperf
    metrics_path: /probe
    params:
      module: [tcp1]
    static_configs:
      - targets: ['10.0.0.2:{server}']
    relabel_configs:
      - source_labels: [__address__]
        target_label: __param_target
      - source_labels: [__param_target]
        target_label: instance
      - target_label: __address__
        replacement: 127.0.0.1:{exporter}
"""


def query(port: int, promql: str) -> list[dict]:
    done = in_node("h1", "curl", "-sf", "--get", f"http://127.0.0.1:{port}/api/v1/query",
                   "--data-urlencode", f"query={promql}")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["data"]["result"]


@needs_lab[0]
@needs_lab[1]
@pytest.mark.slow
def test_prometheus_scrapes_probes_that_agree_with_the_tool_and_see_a_link_slow_down(
        tmp_path):
    lab("up", "pair", "--rate", "20M", "--delay", "5ms", timeout=120)
    started: list[subprocess.Popen] = []
    try:
        server_port, exporter_port, prometheus_port = 8088, 9788, 9090
        started.append(subprocess.Popen(["ip", "netns", "exec", "h2", *SIMPLEPERF, "-s"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        config = write_config(tmp_path, '[modules.tcp1]\nduration = "1s"\n')
        started.append(subprocess.Popen(
            ["ip", "netns", "exec", "h1", *SIMPLEPERF, "exporter", "--config", config,
             "--allow", "10.0.0.0/24", "--listen", f"127.0.0.1:{exporter_port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        # The tool run directly, three times, before anything else uses the link.
        direct: list[float] = []
        deadline = time.monotonic() + 20
        while len(direct) < 3 and time.monotonic() < deadline:
            done = in_node("h1", *SIMPLEPERF, "-c", "10.0.0.2", "-t", "1", "-J")
            if done.returncode == 0:  # (until the server listens: connection refused)
                direct.append(json.loads(done.stdout)["end"]["sum_received"]
                              ["bits_per_second"])
            else:
                time.sleep(0.2)
        assert len(direct) == 3, direct
        (tmp_path / "prometheus.yml").write_text(PROMETHEUS_CONFIG.format(
            server=server_port, exporter=exporter_port))
        started.append(subprocess.Popen(
            ["ip", "netns", "exec", "h1", "prometheus",
             f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{prometheus_port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        goodput = 'simpleperf_goodput_bits_per_second{module="tcp1",direction="forward"}'
        deadline = time.monotonic() + 40
        found: list[dict] = []
        while time.monotonic() < deadline and len(found) < 3:
            time.sleep(1)
            found = query(prometheus_port, f"{goodput}[30s]")
            found = found[0]["values"] if found else []
        assert len(found) >= 3, found
        scraped = [float(v) for _, v in found]
        # The same path measured the same way: within the direct runs' own spread (and 2 %
        # of the link's rate beside it: three runs show only part of the spread).
        low, high = min(direct) - 0.02 * 20e6, max(direct) + 0.02 * 20e6
        assert all(low <= v <= high for v in scraped), (scraped, direct)
        assert value_of(query(prometheus_port, "probe_success")) == 1
        lab("link", "h1-h2", "set", "--rate", "5M")
        changed = time.monotonic()
        slow: float | None = None
        while time.monotonic() < changed + 30:
            time.sleep(1)
            latest = query(prometheus_port, f"{goodput}[4s]")
            if latest and latest[0]["values"] and \
                    float(latest[0]["values"][-1][0]) > time.time() - 3.5:
                candidate = float(latest[0]["values"][-1][1])
                if candidate < 6e6:
                    slow = candidate
                    break
        assert slow is not None and 0.8 * 5e6 < slow < 1.1 * 5e6, slow
    finally:
        for process in started:
            process.terminate()
        for process in started:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        lab("down", "pair")


def value_of(result: list[dict]) -> float:
    assert len(result) == 1, result
    return float(result[0]["value"][1])
