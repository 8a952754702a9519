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
import os
import socket
from typing import BinaryIO

REPEATING = b"0123456789"  # iperf3's --repeating-payload: '0' to '9', again and again
TCP_READ_BYTES = 256 * 1024  # a TCP receiver reads at least this much per call


def aligned(size: int, repeating: bool = False) -> memoryview:
    """`size` writable bytes starting on a page boundary: zeros, or iperf3's repeating
    pattern (what a link that compresses would see of text rather than of zeros)."""
    view = memoryview(mmap.mmap(-1, max(size, 1)))
    if repeating:
        whole = REPEATING * (len(view) // len(REPEATING) + 1)
        view[:] = whole[:len(view)]
    return view


def tcp_read_buffer(length: int) -> memoryview:
    """A TCP receiver's buffer: the test's length, and never less than TCP_READ_BYTES."""
    return aligned(max(length, TCP_READ_BYTES))


class FileSender:
    """Sends from a memory file holding `payload`, with sendfile: the kernel sends the file's
    pages without copying them from our memory (iperf3's -Z)."""

    def __init__(self, payload: memoryview, sock: socket.socket) -> None:
        self._file = os.fdopen(os.memfd_create("simpleperf-payload", os.MFD_CLOEXEC), "wb+",
                               buffering=0)
        self._file.write(payload)
        self._out, self.source = sock.fileno(), self._file.fileno()

    def send(self, chunk: memoryview) -> int:
        """Like socket.send for the first len(chunk) bytes of the payload."""
        return os.sendfile(self._out, self.source, 0, len(chunk))

    def close(self) -> None:
        self._file.close()


class DiskFileSender:
    """Sends a file's bytes in turn with sendfile (-F): each call the next part, as many as
    the chunk is long; 0 once the file has been sent whole."""

    def __init__(self, source: BinaryIO, sock: socket.socket) -> None:
        self._out, self._source = sock.fileno(), source.fileno()
        self._offset = 0

    def send(self, chunk: memoryview) -> int:
        sent = os.sendfile(self._out, self._source, self._offset, len(chunk))
        self._offset += sent
        return sent

    def close(self) -> None:
        """The file is its opener's to close."""
