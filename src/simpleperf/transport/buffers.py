"""Payload buffers that start on a page boundary.

The kernel copies every byte of payload between a socket and one of these. On x86 that copy
(`rep movsb`) runs at about half speed when the user buffer does not start on a cache line,
and a large Python bytes or bytearray that malloc has just mapped starts 16 to 48 bytes into
a page (the allocator's and the object's headers). malloc maps a process's first large
allocations and serves later ones from its heap, which hid this as "a fresh server's first
test runs at 60 % of the later ones". An anonymous mapping is page-aligned, zero-filled and
backed by memory only where it is written.
"""

from __future__ import annotations

import mmap


def aligned(size: int) -> memoryview:
    """`size` writable zero bytes starting on a page boundary."""
    return memoryview(mmap.mmap(-1, max(size, 1)))
