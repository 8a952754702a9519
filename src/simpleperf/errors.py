"""Errors that end a run with one line on stderr and a defined exit status."""

from __future__ import annotations

import errno

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class SimpleperfError(Exception):
    """A run-time failure (network, peer, system) to be shown as one line; exit status 1."""

    exit_status = EXIT_FAILURE


class ReportedError(SimpleperfError):
    """A failure the run's -J document already carries under `error` (with what was
    measured before it): said on stderr, not in a second document."""


class UsageError(Exception):
    """A command-line or data-file mistake; str(error) is the single line shown; exit 2."""

    exit_status = EXIT_USAGE


class ProtocolError(Exception):
    """The peer sent something the protocol does not allow (any of the three protocols)."""


class PeerGone(ProtocolError):
    """The other end closed or reset the control connection."""


class PeerRefused(Exception):
    """The peer answered with an error message; str() is its explanation."""


class PeerEnded(PeerRefused):
    """The peer's error message came while the test ran: it ended the test, not refused it."""


class Interrupted(Exception):
    """Ctrl-C ended a test; what was measured has been printed."""


class OutputError(OSError):
    """Standard output could not be written (errno EPIPE: its reader went away, as with
    `| head`; ENOSPC: /dev/full or a full disk). Raised by the guard __main__ puts on
    sys.stdout, so that a failed write is told apart from a failed socket."""

    @property
    def reader_gone(self) -> bool:
        return self.errno == errno.EPIPE
