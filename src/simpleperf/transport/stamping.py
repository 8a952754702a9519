"""The headers of a batch of UDP datagrams (one segmentation-offload send): each one's send
time and number, and with a shared secret the test's key. The compiled fast path
(simpleperf._fastpath, built by `pip install` where a C compiler is found) writes a batch in
one call; the pure-Python path packs datagram by datagram. Both write the same bytes."""

from __future__ import annotations

import importlib
import os
import struct
from collections.abc import Callable
from types import ModuleType

_fastpath: ModuleType | None
try:
    _fastpath = importlib.import_module("simpleperf._fastpath")
except ImportError:  # not built on this machine: the pure-Python path
    _fastpath = None

PURE_PYTHON_VARIABLE = "SIMPLEPERF_PURE_PYTHON"  # set to 1: never the compiled path

# stamp(buffer, count, seconds, micros, first number)
Stamper = Callable[[memoryview, int, int, int, int], None]


def compiled() -> bool:
    """Whether batches are stamped by the compiled fast path in this process."""
    return _fastpath is not None and os.environ.get(PURE_PYTHON_VARIABLE, "") in ("", "0")


def stamper(header: struct.Struct, size: int, key: bytes | None) -> Stamper:
    """A function that stamps `count` datagrams of `size` bytes laid end to end: `header`
    is (seconds, microseconds, number), big-endian, the number 32 or 64 bits wide."""
    number_bytes = header.size - 8
    if _fastpath is not None and compiled():
        stamp = _fastpath.stamp

        def fast(buffer: memoryview, count: int, seconds: int, micros: int,
                 first: int) -> None:
            stamp(buffer, size, count, seconds, micros, first, number_bytes, key)
        return fast
    if key is None:
        pack_into = header.pack_into

        def pure(buffer: memoryview, count: int, seconds: int, micros: int,
                 first: int) -> None:
            number = first
            for offset in range(0, count * size, size):
                pack_into(buffer, offset, seconds, micros, number)
                number += 1
        return pure
    keyed = struct.Struct(f"{header.format}{len(key)}s").pack_into

    def pure_keyed(buffer: memoryview, count: int, seconds: int, micros: int,
                   first: int) -> None:
        number = first
        for offset in range(0, count * size, size):
            keyed(buffer, offset, seconds, micros, number, key)
            number += 1
    return pure_keyed
