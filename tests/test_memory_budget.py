"""--memory-budget: the buffers of the tests a server runs at once have a bound. A test that
does not fit is refused in its protocol's words, tests together cannot pass it, and large
tests cannot take the part kept for ordinary ones."""

from __future__ import annotations

import subprocess

import pytest
from helpers import IPERF3_BINARIES, SIMPLEPERF, run_simpleperf, start_server
from hypothesis import given
from hypothesis import strategies as st

from simpleperf.description.options import (
    DEFAULT_MEMORY_BUDGET,
    LARGE_SHARE,
    SMALL_TEST_BYTES,
    ServerOptions,
)
from simpleperf.description.transports import TCP
from simpleperf.policy import Limit, MemoryBudget, ServerPolicy


def _policy(budget: int) -> ServerPolicy:
    return ServerPolicy(ServerOptions(bind=None, port=1, unit="M", length=1,
                                      memory_budget=budget))


def test_tests_together_cannot_pass_the_budget_and_release_gives_it_back():
    policy = _policy(100_000_000)
    large = SMALL_TEST_BYTES + 8_000_000  # 40 MB
    assert policy.admit(TCP, 1, 10, 0, memory=large) is None
    refusal = policy.admit(TCP, 1, 10, 0, memory=large)  # large ones share 75 MB
    assert refusal is not None and refusal.limit is Limit.MEMORY and "busy" in str(refusal)
    assert "75%" in str(refusal)
    assert policy.admit(TCP, 1, 10, 0, memory=30_000_000) is None  # ordinary: the rest
    assert policy.admit(TCP, 1, 10, 0, memory=30_000_000) is None
    assert policy.admit(TCP, 1, 10, 0, memory=1) is not None  # 100 MB held
    policy.release(large)
    assert policy.memory.held == 60_000_000 and policy.slots.running == 2
    assert policy.admit(TCP, 1, 10, 0, memory=large) is None
    whole = policy.admit(TCP, 1, 10, 0, memory=100_000_001)
    assert whole is not None and "more than this server's 100.0 MB" in str(whole)
    assert policy.slots.running == 3  # a refusal keeps no slot


@given(st.lists(st.tuples(st.integers(0, 200_000_000), st.booleans()), max_size=40))
def test_what_is_held_never_passes_the_budget_nor_large_tests_their_share(steps):
    budget = MemoryBudget(DEFAULT_MEMORY_BUDGET)
    held: list[int] = []
    for size, release in steps:
        if release and held:
            budget.give_back(held.pop())
        elif budget.take(size):
            held.append(size)
        assert budget.held == sum(held) <= DEFAULT_MEMORY_BUDGET
        assert budget.held_large <= DEFAULT_MEMORY_BUDGET * LARGE_SHARE
    for size in held:
        budget.give_back(size)
    assert budget.held == budget.held_large == 0


@pytest.mark.loopback
@pytest.mark.parametrize("version", ["3.12", "3.21"])
def test_iperf3_clients_asking_too_much_hear_that_memory_is_short(version):
    live, port = start_server("--memory-budget", "10MB")
    try:
        done = subprocess.run([IPERF3_BINARIES[version], "-c", "127.0.0.1", "-p", str(port),
                               "-t", "1", "-P", "16", "-l", "1M"], capture_output=True,
                              text=True, timeout=30)
        assert done.returncode == 1
        assert "unable to create a new test: Cannot allocate memory" in done.stderr + \
            done.stdout
        live.wait_for(lambda lines: any("(--memory-budget)" in line for line in lines))
        fits = subprocess.run([IPERF3_BINARIES[version], "-c", "127.0.0.1", "-p", str(port),
                               "-t", "1", "-P", "4", "-l", "1M"], capture_output=True,
                              text=True, timeout=30)
        assert fits.returncode == 0, fits.stdout
    finally:
        live.close()


@pytest.mark.loopback
def test_a_native_test_too_large_alone_or_beside_another_is_refused():
    live, port = start_server("--memory-budget", "100MB")
    try:
        alone = run_simpleperf("-c", "-p", str(port), "--native", "-R", "-P", "4", "-l",
                               "64M", "-t", "1", timeout=30)
        assert alone.returncode == 1
        assert "the test's buffers would take 256.0 MB, more than this server's 100.0 MB" \
            in alone.stderr
        first = subprocess.Popen([*SIMPLEPERF, "-c", "-p", str(port), "--native", "-t", "6",
                                  "-P", "2", "-l", "30M", "-i", "0.2"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        assert first.stdout is not None
        while "bits/sec" not in first.stdout.readline():  # its first interval row: running
            assert first.poll() is None
        beside = run_simpleperf("-c", "-p", str(port), "--native", "-t", "1", "-P", "2",
                                "-l", "30M", timeout=30)
        assert beside.returncode == 1 and "server is busy" in beside.stderr
        assert "--memory-budget" in beside.stderr
        small = run_simpleperf("-c", "-p", str(port), "--native", "-t", "1", timeout=30)
        assert small.returncode == 0, small.stderr
        first.communicate(timeout=30)
        assert first.returncode == 0
    finally:
        live.close()
