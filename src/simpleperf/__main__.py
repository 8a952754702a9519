"""`simpleperf` and `python3 -m simpleperf`: the lab when the first word is `lab`, the
Prometheus exporter when it is `exporter`, else the tool. Both sit on top of the tool; the
tool never needs them."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
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
