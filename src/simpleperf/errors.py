"""Errors that end a run with one line on stderr and a defined exit status."""

from __future__ import annotations

import errno

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
# Every status a command ends with, named and explained once (the documentation's reference
# page is made from this table; a test checks every EXIT_ constant has its row)
EXIT_STATUSES = {
    EXIT_OK: ("EXIT_OK", "what was asked ran to its end (a lab run whose verdicts are "
              "outside ends so too: the report says which)"),
    EXIT_FAILURE: ("EXIT_FAILURE", "it could not: a peer refused, vanished or broke the "
                   "protocol, a system call failed, a lab could not be built, the output "
                   "could not be written; the line on stderr says which"),
    EXIT_USAGE: ("EXIT_USAGE", "a wrong flag, value, topology or experiment file: nothing "
                 "ran"),
    EXIT_INTERRUPTED: ("EXIT_INTERRUPTED", "stopped by Ctrl-C (SIGINT) or SIGTERM, after "
                       "what had run was reported and, in the lab, cleaned up"),
}


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
