"""Entry point: parse the command line, then run the client, the server or the lab."""

from __future__ import annotations

import contextlib
import signal
import sys

from .cli import NO_MODE_MESSAGE, ClientOptions, UsageError, parse_args
from .errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, SimpleperfError


def _print(line: str) -> None:
    print(line, flush=True)


def _error(message: str) -> None:
    print(message if message == NO_MODE_MESSAGE else f"simpleperf: error: {message}",
          file=sys.stderr, flush=True)


def _terminate_as_interrupt(signum, frame):  # SIGTERM ends a run the way Ctrl-C does
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    if argv[:1] == ["lab"]:  # the lab sits on top of the tool; the tool never needs it
        from .lab.cli import main as lab_main

        return lab_main(argv[1:])
    try:
        options = parse_args(argv)
    except UsageError as error:
        _error(str(error))
        return EXIT_USAGE
    try:
        if isinstance(options, ClientOptions):
            from . import client, native_client

            try:
                if options.rtt:
                    from . import rtt_test
                    rtt_test.run(options, _print)
                elif options.probe:
                    from . import rate_probe
                    rate_probe.run(options, _print)
                elif options.iperf3:
                    from . import iperf3_client
                    iperf3_client.run(options, _print)
                elif options.needs_native:
                    native_client.run(options, _print)
                else:
                    client.run(options, _print)
            except (client.Interrupted, native_client.Interrupted):
                return EXIT_INTERRUPTED
        else:
            from .server import Server

            server = Server(options, _print)
            with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how a server stops
                server.serve_forever()
    except SimpleperfError as error:
        _error(str(error))
        return error.exit_status
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # our output was closed (e.g. piped into head)
        return EXIT_OK
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
