"""The headers of a batch of UDP datagrams (one segmentation-offload send): each one's send
time and number, and with a shared secret the test's key. The compiled fast path
(transport/compiled.py) writes a batch in one call; the pure-Python path packs datagram by
datagram. Both write the same bytes."""

from __future__ import annotations

import struct
from collections.abc import Callable

from . import compiled

# stamp(buffer, count, seconds, micros, first number)
Stamper = Callable[[memoryview, int, int, int, int], None]
SEND_TIME_BYTES = 8  # seconds and microseconds, 32 bits each, before the datagram's number


IPERF2_LAYOUT = -8  # the compiled reader's name for iperf2's header (number split around
# the send time: protocol/iperf2.py's DatagramLayout)


def number_bytes(header: struct.Struct) -> int:
    """How wide `header`'s datagram number is: 4 or 8 bytes (iperf3's 32- or 64-bit
    counters; the native header's is 64); IPERF2_LAYOUT for iperf2's layout, which the
    compiled reader reads and the compiled stamper does not write."""
    if not compiled_layout(header):
        return IPERF2_LAYOUT
    return header.size - SEND_TIME_BYTES


def compiled_layout(header: object) -> bool:
    """Whether the compiled path writes and reads `header`: a struct.Struct of (seconds,
    microseconds, number); another layout (iperf2's, protocol/iperf2.py's DatagramLayout)
    packs and unpacks those three in its own order, from Python."""
    return type(header) is struct.Struct


def stamper(header: struct.Struct, size: int, key: bytes | None) -> Stamper:
    """A function that stamps `count` datagrams of `size` bytes laid end to end: `header`
    is (seconds, microseconds, number), big-endian, the number 32 or 64 bits wide."""
    width = number_bytes(header)
    fastpath = compiled.module()
    if fastpath is not None and compiled_layout(header):
        stamp = fastpath.stamp

        def fast(buffer: memoryview, count: int, seconds: int, micros: int,
                 first: int) -> None:
            stamp(buffer, size, count, seconds, micros, first, width, key)
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
