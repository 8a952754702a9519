"""`simpleperf` and `python3 -m simpleperf`: the lab when the first word is `lab`, the
Prometheus exporter when it is `exporter`, else the tool. Both sit on top of the tool; the
tool never needs them."""

from __future__ import annotations

import os
import sys
from typing import Any

from .errors import EXIT_FAILURE, EXIT_OK, OutputError


class _GuardedOutput:
    """sys.stdout, whose failed writes are OutputError: told apart from a socket's."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as error:
            raise OutputError(error.errno, error.strerror) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as error:
            raise OutputError(error.errno, error.strerror) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def main(argv: list[str] | None = None) -> int:
    """Run the program; standard output that cannot be written ends it in one line (status
    1), or quietly when its reader went away (`| head`)."""
    argv = sys.argv[1:] if argv is None else argv
    plain = sys.stdout
    sys.stdout = _GuardedOutput(plain)
    try:
        status = _program(argv)
        sys.stdout.flush()
        return status
    except OutputError as error:
        with open(os.devnull, "w") as null:  # what is left unwritten goes nowhere
            os.dup2(null.fileno(), plain.fileno())
        if error.reader_gone:
            return EXIT_OK
        print(f"simpleperf: error: cannot write its output: {error.strerror}",
              file=sys.stderr)
        return EXIT_FAILURE
    finally:
        sys.stdout = plain


def _program(argv: list[str]) -> int:
    # Each imported only when used: either one starts faster without the other.
    if argv[:1] == ["lab"]:
        from .lab.commands import main as lab_main

        return lab_main(argv[1:])
    if argv[:1] == ["exporter"]:
        from .exporter.web import main as exporter_main

        return exporter_main(argv[1:])
    from .main import main as tool_main

    return tool_main(argv)


if __name__ == "__main__":
    sys.exit(main())
