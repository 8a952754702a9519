"""Our client against our server on loopback: the classic banners, tables and counts."""

from __future__ import annotations

import re
import shutil
import subprocess
import threading

import pytest
from helpers import run_simpleperf, start_server

pytestmark = pytest.mark.loopback  # real simpleperf processes on 127.0.0.1

ROW = re.compile(r"^(\S+:\d+)\s+(\d+\.\d) - (\d+\.\d)\s+(\d+) (B|KB|MB)\s+(\d+\.\d\d) Mbps$")


def rows(lines: list[str]) -> list[tuple[str, float, float, int, str, float]]:
    found = []
    for line in lines:
        match = ROW.match(line)
        if match:
            peer, start, end, amount, unit, rate = match.groups()
            found.append((peer, float(start), float(end), int(amount), unit, float(rate)))
    return found


def test_timed_run_prints_classic_banners_and_matching_rows(server):
    live, port = server
    done = run_simpleperf("-c", "-I", "127.0.0.1", "-p", str(port), "-t", "2", "-f", "B")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:5] == [
        "-" * 90,
        f"A simpleperf client connecting to server 127.0.0.1, port {port}",
        "-" * 90,
        f"Client connected with 127.0.0.1 port {port}",
        "ID                  Interval            Transfer            Bandwidth",
    ]
    (client_row,) = rows(lines)
    peer, start, end, sent, unit, rate = client_row
    assert start == 0.0 and 2.0 <= end < 3.5 and unit == "B" and sent > 0
    assert rate == pytest.approx(sent * 8 / end / 1e6, rel=0.05)
    server_lines = live.wait_for(lambda ls: len(rows(ls)) == 1)
    assert server_lines[:3] == ["-" * 45, f"A simpleperf server is listening on port {port}",
                                "-" * 45]
    assert f"A simpleperf client with {peer} is connected with 127.0.0.1:{port}" in server_lines
    assert "ID                  Interval            Received            Rate" in server_lines
    (server_row,) = rows(server_lines)
    assert server_row[0] == peer
    assert server_row[3] == sent  # the server counts payload only, not BYE


@pytest.mark.parametrize("amount,expected", [("10MB", 10_000_000), ("1234567B", 1_234_567),
                                             ("3KB", 3000)])
def test_num_sends_exactly_that_many_bytes(server, amount, expected):
    live, port = server
    done = run_simpleperf("-c", "-p", str(port), "-n", amount, "-f", "B")
    assert done.returncode == 0, done.stderr
    assert rows(done.stdout.splitlines())[0][3] == expected
    assert rows(live.wait_for(lambda ls: len(rows(ls)) == 1))[0][3] == expected


def test_num_in_megabytes_prints_integer_megabytes(server):
    _, port = server
    done = run_simpleperf("-c", "-p", str(port), "-n", "10MB")
    (row,) = rows(done.stdout.splitlines())
    assert row[3:5] == (10, "MB")


def test_intervals_are_contiguous_then_rule_then_total(server):
    live, port = server
    done = run_simpleperf("-c", "-p", str(port), "-t", "2", "-i", "0.5", "-f", "B")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    found = rows(lines)
    intervals, total = found[:-1], found[-1]
    assert [(r[1], r[2]) for r in intervals] == [(0.0, 0.5), (0.5, 1.0), (1.0, 1.5), (1.5, 2.0)]
    assert lines[-2] == "-" * 52
    assert sum(r[3] for r in intervals) == total[3]
    assert total[1] == 0.0 and total[2] >= 2.0
    assert rows(live.wait_for(lambda ls: len(rows(ls)) == 1))[0][3] == total[3]


def test_intervals_with_num_end_with_a_partial_row(server):
    _, port = server
    done = run_simpleperf("-c", "-p", str(port), "-n", "20MB", "-i", "5", "-f", "B")
    found = rows(done.stdout.splitlines())
    assert sum(r[3] for r in found[:-1]) == found[-1][3] == 20_000_000


def test_parallel_connections_each_get_a_row_on_both_sides(server):
    live, port = server
    done = run_simpleperf("-c", "-p", str(port), "-t", "1", "-P", "3", "-f", "B")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    connected = [line for line in lines if re.fullmatch(
        rf"Client 127\.0\.0\.1:\d+ connected with 127\.0\.0\.1 port {port}", line)]
    assert len(connected) == 3
    client_rows = rows(lines)
    assert len(client_rows) == 3
    assert {r[0] for r in client_rows} == {line.split()[1] for line in connected}
    server_rows = rows(live.wait_for(lambda ls: len(rows(ls)) == 3))
    assert {(r[0], r[3]) for r in server_rows} == {(r[0], r[3]) for r in client_rows}


def test_host_given_to_c_and_the_console_script(server):
    _, port = server
    done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-n", "1MB")
    assert done.returncode == 0 and rows(done.stdout.splitlines())[0][3] == 1
    script = shutil.which("simpleperf")
    assert script is not None, "the simpleperf console script is not installed: run " \
        "bash scripts/setup"
    done = subprocess.run([script, "-c", "-p", str(port), "-n", "1MB"], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0 and rows(done.stdout.splitlines())[0][3] == 1


def test_many_clients_at_once_each_with_five_connections(server):
    live, port = server
    results: list[subprocess.CompletedProcess] = []

    def one_client():
        results.append(run_simpleperf("-c", "-p", str(port), "-t", "2", "-P", "5", "-f", "B"))

    clients = [threading.Thread(target=one_client) for _ in range(4)]
    for client in clients:
        client.start()
    for client in clients:
        client.join(60)
    assert [r.returncode for r in results] == [0, 0, 0, 0]
    client_rows = {(r[0], r[3]) for result in results for r in rows(result.stdout.splitlines())}
    assert len(client_rows) == 20
    server_rows = rows(live.wait_for(lambda ls: len(rows(ls)) == 20))
    assert {(r[0], r[3]) for r in server_rows} == client_rows


def test_server_megabyte_format_and_ipv6_bind():
    live, port = start_server("-b", "::1")
    try:
        done = run_simpleperf("-c", "-I", "::1", "-p", str(port), "-n", "5MB")
        assert done.returncode == 0, done.stderr
        (row,) = rows(live.wait_for(lambda ls: len(rows(ls)) == 1))
        assert row[0].startswith("[::1]:") and row[3:5] == (5, "MB")
    finally:
        live.close()
