"""Running as a service, as iperf3's --logfile, --pidfile and -D do: output appended to a
file, the process id in a file while it runs, and the server in the background.

A daemon goes to the background only once it listens: a port in use, a bad address or an
unwritable pid file is still one line on the terminal with a non-zero status, and when the
command returns, the server accepts tests and its pid file names it.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout, suppress

from ..errors import EXIT_FAILURE, EXIT_OK, OutputError, SimpleperfError

READY = b"ready\n"  # what the daemon tells the command that started it; else its error


class Output:
    """Where a run's lines go (standard output, or the --logfile it was pointed to). A
    client that cannot write them (a full disk, /dev/full) ends with one line; a server
    goes on serving, says once on its standard error (the system log once in the
    background) that its output is lost, and writes no more."""

    def __init__(self, server: bool, detached: bool, logfile: str | None) -> None:
        self.server, self.detached = server, detached
        self.where = f"--logfile {logfile}" if logfile else "standard output"
        self.lost = False

    def __call__(self, line: str) -> None:
        if self.lost:
            return
        try:
            print(line, flush=True)
        except OSError as error:
            if error.errno == errno.EPIPE:
                if self.server:
                    self._lose(None)
                    return
                # a reader that went away (| head): the client's run ends quietly
                raise OutputError(errno.EPIPE, error.strerror) from None
            reason = (error.strerror or str(error)).lower()
            if not self.server:
                raise SimpleperfError(f"cannot write the output to {self.where}: "
                                      f"{reason}") from None
            self._lose(reason)

    def _lose(self, reason: str | None) -> None:
        self.lost = True
        discard(sys.stdout)
        said = (f"simpleperf: cannot write the server's output to {self.where}"
                + (f": {reason}" if reason else "") + "; serving on without it")
        if self.detached:
            import syslog

            syslog.syslog(syslog.LOG_ERR, said)
        else:
            with suppress(OSError, ValueError):
                print(said, file=sys.__stderr__, flush=True)


def discard(stream) -> None:
    """What `stream` still holds, and whatever is written to it from now on, goes to
    /dev/null (its descriptor now points there), so no later flush fails again."""
    with suppress(OSError, ValueError, AttributeError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stream.fileno())
        os.close(null)


@contextmanager
def output_to(logfile: str | None) -> Iterator[None]:
    """Everything printed, errors too, appended to `logfile` (line by line) meanwhile."""
    if logfile is None:
        yield
        return
    try:
        log = open(logfile, "a", buffering=1, encoding="utf-8", errors="replace")  # noqa: SIM115 (closed by the with below)
    except OSError as error:
        raise SimpleperfError(f"cannot open --logfile {logfile}: "
                              f"{error.strerror or error}") from None
    try:
        with redirect_stdout(log), redirect_stderr(log):
            yield
    finally:
        with suppress(OSError):  # what a full disk would not take was said when it failed
            log.close()


@contextmanager
def pid_file(path: str | None) -> Iterator[None]:
    """`path` holds this process's id until the block ends (then it is removed, unless
    another process has written its own id there meanwhile)."""
    if path is None:
        yield
        return
    mine = f"{os.getpid()}\n"
    try:
        with open(path, "w", encoding="ascii") as out:
            out.write(mine)
    except OSError as error:
        raise SimpleperfError(f"cannot write --pidfile {path}: "
                              f"{error.strerror or error}") from None
    try:
        yield
    finally:
        with suppress(OSError), open(path, encoding="ascii") as current:
            if current.read() == mine:
                os.unlink(path)


def detach() -> Callable[[bytes], None]:
    """Go on in the background: a new session, no terminal, standard streams on /dev/null
    (printing goes wherever sys.stdout points: a --logfile). The command that called this
    exits only when the daemon calls the function returned: with READY (status 0), or with
    the line of an error (printed, status 1); or if the daemon dies first (status 1)."""
    read_end, write_end = os.pipe()
    if os.fork():
        os.close(write_end)
        said = b""
        while chunk := os.read(read_end, 4096):
            said += chunk
        if said != READY:
            message = said.decode(errors="replace").strip() or "the daemon ended at once"
            print(f"simpleperf: error: {message}", file=sys.__stderr__, flush=True)
        os._exit(EXIT_OK if said == READY else EXIT_FAILURE)
    os.close(read_end)
    os.setsid()
    if os.fork():  # the session leader leaves: the daemon can never regain a terminal
        os._exit(EXIT_OK)
    null = os.open(os.devnull, os.O_RDWR)
    for stream in (0, 1, 2):
        os.dup2(null, stream)
    os.close(null)

    def tell(word: bytes) -> None:
        with suppress(OSError):
            os.write(write_end, word)
            os.close(write_end)

    return tell
