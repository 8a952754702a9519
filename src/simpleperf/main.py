"""The tool's entry point: parse the command line, then run the client or the server.
The lab is dispatched by __main__.py, above this: nothing here knows it."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import os
import re
import signal
import sys
import time
from collections.abc import Callable

from .command_line.cli import NO_MODE_MESSAGE, parse_args
from .description.client_options import ClientOptions
from .description.options import ServerOptions
from .errors import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    Interrupted,
    OutputError,
    ReportedError,
    SimpleperfError,
    UsageError,
)
from .server import service


def _printer(options: ClientOptions | ServerOptions):
    """The run's output (service.Output), with every line of text begun by --timestamps'
    time and -T's title, in iperf3's order; JSON is left whole. --hide-ips: every IPv4
    address shown as iperf2 shows it (*.*.*.1), the server's name as (**hidden**)."""
    detached = isinstance(options, ServerOptions) and options.daemon
    write: Callable[[str], None] = service.Output(isinstance(options, ServerOptions), detached,
                                                  options.logfile)
    if isinstance(options, ClientOptions) and options.hide_ips:
        write = _hiding(write, options.host)
    title = getattr(options, "title", None)
    stamp = options.timestamps
    if getattr(options, "json", False) or getattr(options, "json_stream", False) or not (
            title or stamp):
        return write
    head = f"{title}:  " if title else ""

    def out(text: str) -> None:
        prefix = (time.strftime(stamp) if stamp else "") + head
        write("\n".join(prefix + line for line in text.split("\n")))

    return out


_IPV4 = re.compile(r"\b(?:\d{1,3}\.){3}(\d{1,3})\b")
_HIDDEN_TOKEN = re.compile(r"(\S*\b(?:\d{1,3}\.){3}\d{1,3}\b\S*)(  +)?")


def _hiding(write: Callable[[str], None], host: str) -> Callable[[str], None]:
    """--hide-ips (iperf2's, IPv4 only): the addresses in what is written, a table's
    columns kept where they were (what a token lost, the gap after it gains)."""
    name = None if _IPV4.fullmatch(host) else host

    def hide(match: re.Match[str]) -> str:
        token, gap = match.group(1), match.group(2)
        hidden = _IPV4.sub(r"*.*.*.\1", token)
        return hidden + (gap + " " * (len(token) - len(hidden)) if gap else "")

    def out(text: str) -> None:
        text = _HIDDEN_TOKEN.sub(hide, text)
        write(text.replace(name, "(**hidden**)") if name else text)

    return out


def _error(message: str, kind: str = "error") -> None:
    """One line on standard error (the --logfile's, else the terminal's, if that cannot
    be written): an error, or with `kind` "warning" one."""
    line = message if message == NO_MODE_MESSAGE else f"simpleperf: {kind}: {message}"
    for stream in (sys.stderr, sys.__stderr__):
        try:
            print(line, file=stream, flush=True)
            return
        except (OSError, ValueError, AttributeError):
            service.discard(stream)


def _terminate_as_interrupt(signum, frame):  # SIGTERM ends a run the way Ctrl-C does
    raise KeyboardInterrupt


def _run_client(options: ClientOptions) -> None:
    """Hand the test to the driver it needs; each is imported only when used."""
    if options.verbose and not (options.json or options.json_stream):
        for note in options.accepted_only:  # iperf3's flags that change nothing here
            _printer(options)(note)
    if options.start_at is not None:  # --txstart-time
        _sleep_until(options.start_at)
    if options.tradeoff and not options.iperf2:  # -r: the test, then reversed (iperf2's)
        _run_test(dataclasses.replace(options, tradeoff=False))
        _run_test(options.asking(tradeoff=False, direction="reverse"))
        return
    _run_test(options)


def _sleep_until(when: float) -> None:
    """Wait (Ctrl-C ends it) until the Unix time `when`."""
    while (left := when - time.time()) > 0:
        time.sleep(min(left, 1.0))


# The client's modes, the first that applies runs the test: what selects it, and the
# module whose run(options, out) does (imported only when used).
CLIENT_MODES: tuple[tuple[Callable[[ClientOptions], object], str], ...] = (
    (lambda options: options.connect_only is not None, "connect_times"),  # --connect-only
    (lambda options: options.rpm_url is not None, "responsiveness.client"),  # -c URL --rpm
    (lambda options: options.rpm, "native.responsiveness"),
    (lambda options: options.rtt, "native.round_trips"),
    (lambda options: options.probe, "native.rate_probe"),
    (lambda options: options.bounceback, "iperf2.bounceback"),
    (lambda options: options.iperf2, "iperf2.client"),
    (lambda options: options.iperf3, "iperf3.client"),
    (lambda options: options.needs_native, "native.client"),
    (lambda options: True, "classic.client"),
)


def _run_test(options: ClientOptions) -> None:
    name = next(module for selects, module in CLIENT_MODES if selects(options))
    importlib.import_module(f".{name}", __package__).run(options, _printer(options))


def _json_error(message: str) -> None:
    """With -J a failure is still one JSON document, as iperf3 writes it: scripts read the
    `error` key (and the exit status, which stays non-zero)."""
    try:
        print(json.dumps({"start": {}, "intervals": [], "end": {}, "error": message},
                         indent=2), flush=True)
    except OSError:  # the output cannot be written (the line on stderr says why)
        service.discard(sys.stdout)


def _wants_json(argv: list[str]) -> bool:
    return any(word in ("-J", "--json") for word in argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    # Started in the background by a script (`simpleperf -s &`), SIGINT comes ignored; a
    # server would never hear the Ctrl-C (or kill -INT) that stops it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        options = parse_args(argv)
    except UsageError as error:
        _error(str(error))
        if _wants_json(argv):
            _json_error(str(error))
        return EXIT_USAGE
    try:
        with service.output_to(options.logfile):
            return _run(options)
    except SimpleperfError as error:  # the log file could not be opened
        _error(str(error))
        return error.exit_status
    finally:
        try:
            sys.stdout.flush()
        except (OSError, ValueError):  # said already: nothing more at the interpreter's exit
            service.discard(sys.stdout)


def _run(options: ClientOptions | ServerOptions) -> int:
    if options.affinity is not None:  # -A: before any thread starts (they inherit it)
        os.sched_setaffinity(0, {options.affinity})
    if options.realtime:  # -z: so too the scheduler
        try:
            os.sched_setscheduler(0, os.SCHED_RR,
                                  os.sched_param(os.sched_get_priority_min(os.SCHED_RR)))
        except PermissionError:
            _error("-z/--realtime is not permitted here (it needs root or CAP_SYS_NICE): "
                   "the usual scheduler", "warning")
    try:
        if isinstance(options, ClientOptions):
            _run_client(options)
        else:
            _serve(options)
    except Interrupted:
        return EXIT_INTERRUPTED
    except SimpleperfError as error:
        _error(str(error))
        if isinstance(options, ClientOptions) and options.json and not isinstance(
                error, ReportedError):
            _json_error(str(error))
        return error.exit_status
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except OutputError:  # standard output failed: said (or quiet) at the top (__main__)
        raise
    except OSError as error:  # a socket that failed where nothing expected it: one line
        reason = f"the connection failed: {(error.strerror or str(error)).lower()}"
        _error(reason)
        if isinstance(options, ClientOptions) and options.json:
            _json_error(reason)
        return EXIT_FAILURE
    return EXIT_OK


def _serve(options: ServerOptions) -> None:
    """Listen (a failure is still said on the terminal), then with -D go on in the
    background, write the pid file, and serve until stopped."""
    from .server.port import Server

    server = Server(options, _printer(options))
    tell = service.detach() if options.daemon else None
    try:
        with service.pid_file(options.pidfile):
            if tell is not None:
                tell(service.READY)
            with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how a server stops
                server.serve_forever()
    except SimpleperfError as error:
        if tell is not None:
            tell(str(error).encode())
        raise
