"""Any iperf3 server, any invocation: what works against a simpleperf server works against
iperf3 3.12 (Debian's) and 3.21 servers, found out by the client itself, classic-looking
invocations included; a one-off server (iperf3 -s -1) is not spent on finding out."""

from __future__ import annotations

import json
import re

import pytest
from helpers import run_simpleperf, start_iperf3_server

pytestmark = [pytest.mark.iperf3, pytest.mark.loopback]

VERSIONS = ("3.12", "3.21")


@pytest.fixture(scope="module", params=VERSIONS)
def iperf3_server(request):
    process, port = start_iperf3_server(request.param)
    yield port
    process.terminate()
    process.wait(10)


# Classic-looking invocations (no native flag) and native ones, as the README lists them.
@pytest.mark.parametrize("args", [
    ["-t", "2"], ["-t", "2", "-P", "2"], ["-n", "50MB"], ["-t", "2", "-i", "1"],
    ["-t", "2", "-f", "KB"], ["-t", "2", "-R"], ["-t", "2", "--bidir"],
    ["-u", "-b", "10M", "-t", "2"],
])
def test_every_invocation_runs_as_an_iperf3_test(iperf3_server, args):
    done = run_simpleperf("-c", "-p", str(iperf3_server), *args, timeout=30)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.endswith(("sender", "receiver"))]
    assert rows, done.stdout
    streams = 2 if "-P" in args or "--bidir" in args else 1
    own_rows = [row for row in rows if not row.startswith("SUM")]
    assert len(own_rows) == 2 * streams, done.stdout
    rates = [float(m) for m in re.findall(r"([\d.]+) [KMGT]?(?:bits/sec|Mbps)", "\n".join(rows))]
    assert len(rates) == len(rows) and all(rate > 0 for rate in rates), rows
    document = run_simpleperf("-c", "-p", str(iperf3_server), *args, "-J", timeout=30)
    assert document.returncode == 0, document.stderr
    parsed = json.loads(document.stdout)
    assert parsed["start"]["protocol"] == "iperf3"
    if "-n" in args:
        assert parsed["end"]["sum_sent"]["bytes"] == 50_000_000


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("args", [["-t", "1"], ["-u", "-b", "10M", "-t", "1"]])
def test_a_one_off_iperf3_server_serves_the_test_and_logs_no_error(version, args):
    process, port = start_iperf3_server(version, "-1")
    try:
        done = run_simpleperf("-c", "-p", str(port), *args, timeout=30)
        output, _ = process.communicate(timeout=10)  # -1: it ends after one test
    finally:
        process.kill()
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("receiver")
    assert process.returncode == 0 and "error" not in output.lower(), output
    assert re.search(r"receiver", output)
