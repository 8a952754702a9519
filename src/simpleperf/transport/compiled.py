"""The optional compiled pieces (built by `pip install` where a C compiler is found) and
whether this process uses them: the streams' fast path (simpleperf._fastpath) and, for the
lab, the delay line's queue reader. Everything they do has a pure-Python path that gives
the same results; SIMPLEPERF_PURE_PYTHON=1 forces those paths (tests compare them)."""

from __future__ import annotations

import importlib
import os
import struct
from types import ModuleType

PURE_PYTHON_VARIABLE = "SIMPLEPERF_PURE_PYTHON"  # set to 1: never a compiled path
# How long a compiled loop (TCP's writes or reads, UDP's reads and their account) runs
# before Python counts and looks for a stop: short beside any interval, long beside a GIL
# handover between streams' threads.
SLICE_SECONDS = 0.0005
# A row of the table the fast path's receive() fills, one per message read: its bytes, its
# datagrams' size (UDP GRO), its arrival (the kernel's stamp, wall clock), the socket's
# drops by then
RECEIVE_ROW = struct.Struct("qqdq")
MESSAGES_PER_RECEIVE = 64  # the most receive() reads in one call
# A row of the table tcp_receive_reads() fills, one per read: its end in the buffer, its
# wall-clock and monotonic times
TCP_READ_ROW = struct.Struct("qdd")


def built(name: str) -> ModuleType | None:
    """The compiled module `name` if this installation built it, else None."""
    try:
        return importlib.import_module(name)
    except ImportError:  # not built on this machine: the pure-Python paths
        return None


def used(piece: ModuleType | None) -> ModuleType | None:
    """`piece` (a built() module) when this process is to use compiled code, else None."""
    if piece is None or os.environ.get(PURE_PYTHON_VARIABLE, "") not in ("", "0"):
        return None
    return piece


def status(piece: ModuleType | None) -> str:
    """Whether this process runs `piece` (a built() module), in a few words for a report."""
    if used(piece) is not None:
        return "yes"
    if piece is not None:
        return f"built, not used ({PURE_PYTHON_VARIABLE} is set)"
    return "no (pure Python: installed without a C compiler)"


fastpath = built("simpleperf._fastpath")


def module() -> ModuleType | None:
    """The streams' compiled fast path when this process is to use it, else None."""
    return used(fastpath)
