"""Errors that end a run with one line on stderr and a defined exit status."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class SimpleperfError(Exception):
    """A run-time failure (network, peer, system) to be shown as one line; exit status 1."""

    exit_status = EXIT_FAILURE
