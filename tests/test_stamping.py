"""The UDP sender's batch headers: the compiled fast path and the pure-Python path write the
same bytes, for every header layout (native, with a key, iperf3's 32- and 64-bit counters),
and the compiled one is built where the package was installed with a C compiler."""

from __future__ import annotations

import json
import os

import pytest
from helpers import run_simpleperf
from hypothesis import given
from hypothesis import strategies as st

from simpleperf.protocol import iperf3
from simpleperf.protocol.native import DATAGRAM_HEADER
from simpleperf.transport import compiled, stamping

LAYOUTS = [(DATAGRAM_HEADER, None), (DATAGRAM_HEADER, b"k3y-8byt"), (iperf3.HEADER_32, None),
           (iperf3.HEADER_64, None)]


def test_the_compiled_fast_path_is_built():
    assert compiled.fastpath is not None, (
        "simpleperf._fastpath is not built: install the package with pip on a machine with a "
        "C compiler and Python's headers (bash scripts/setup)")


@given(st.sampled_from(LAYOUTS), st.integers(min_value=0, max_value=200),
       st.integers(min_value=0, max_value=40), st.integers(min_value=0, max_value=2**32 - 1),
       st.integers(min_value=0, max_value=999_999), st.integers(min_value=1, max_value=2**31))
def test_both_paths_write_the_same_bytes(layout, spare, count, seconds, micros, first):
    header, key = layout
    size = header.size + (len(key) if key else 0) + spare
    fast, pure = (memoryview(bytearray(range(256)) * (size * count // 256 + 1))
                  for _ in range(2))
    os.environ.pop(compiled.PURE_PYTHON_VARIABLE, None)
    stamping.stamper(header, size, key)(fast, count, seconds, micros, first)
    os.environ[compiled.PURE_PYTHON_VARIABLE] = "1"
    try:
        stamping.stamper(header, size, key)(pure, count, seconds, micros, first)
    finally:
        del os.environ[compiled.PURE_PYTHON_VARIABLE]
    assert bytes(fast) == bytes(pure)
    if count:
        number = header.unpack_from(fast, (count - 1) * size)[2]
        assert number == (first + count - 1) % (1 << (8 * (header.size - 8)))


def test_a_batch_that_does_not_fit_is_refused():
    stamp = stamping.stamper(DATAGRAM_HEADER, 100, None)
    if compiled.module() is not None:
        with pytest.raises(ValueError, match="do not fit"):
            stamp(memoryview(bytearray(250)), 3, 1, 2, 3)
    with pytest.raises(ValueError):
        compiled.fastpath.stamp(memoryview(bytearray(100)), 10, 1, 0, 0, 1, 6, None)
    with pytest.raises(TypeError):
        compiled.fastpath.stamp(b"read-only", 4, 1, 0, 0, 1, 4, None)


@pytest.mark.loopback
@pytest.mark.parametrize("pure", ["0", "1"])
@pytest.mark.parametrize("direction", [[], ["-R"]])
def test_udp_runs_on_either_path(server, pure, direction):
    """The client's path (compiled or pure) sends, or with -R receives; the server's path is
    the compiled one. Unlimited rate, and few enough bytes (2.8 MB) for the receiver's 4 MB
    socket buffer: UDP's tail loss would be invisible."""
    _, port = server
    os.environ[compiled.PURE_PYTHON_VARIABLE] = pure
    try:
        done = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-u", "-b", "0", "-J",
                              "--no-latency", "-k", "2000", "-l", "1400", *direction)
    finally:
        del os.environ[compiled.PURE_PYTHON_VARIABLE]
    assert done.returncode == 0, done.stderr
    end = json.loads(done.stdout)["end"]
    assert end["sum_sent"]["packets"] == 2000
    # numbered 1..2000 without a gap or a repeat: what was not lost was counted once
    assert end["sum"]["packets"] == 2000
    assert end["sum_received"]["bytes"] == (2000 - end["sum"]["lost_packets"]) * 1400
