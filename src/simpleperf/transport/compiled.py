"""The optional compiled fast path (simpleperf._fastpath, built by `pip install` where a C
compiler is found): whether this process uses it. Everything it does has a pure-Python path
that gives the same results; SIMPLEPERF_PURE_PYTHON=1 forces that path (tests compare them)."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

fastpath: ModuleType | None
try:
    fastpath = importlib.import_module("simpleperf._fastpath")
except ImportError:  # not built on this machine: the pure-Python paths
    fastpath = None

PURE_PYTHON_VARIABLE = "SIMPLEPERF_PURE_PYTHON"  # set to 1: never the compiled path
# How long a compiled TCP loop writes or reads before Python counts and looks for a stop:
# short beside any interval, long beside a GIL handover between streams' threads.
SLICE_SECONDS = 0.0005


def module() -> ModuleType | None:
    """The compiled module when this process is to use it, else None."""
    if fastpath is None or os.environ.get(PURE_PYTHON_VARIABLE, "") not in ("", "0"):
        return None
    return fastpath
