"""The man pages, simpleperf(1) and simpleperf-lab(1), and the bash and zsh completions,
made from the parsers themselves when the package is built (setup.py), so they say what
--help says. Here, on top of the tool like the rest of the lab, because they cover both.
Building needs argparse-manpage and shtab (the build's requirements in pyproject.toml);
simpleperf itself never imports this module."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import __version__
from ..command_line import cli
from . import commands

# Where each made file is installed, under the installation's data prefix (/usr/local,
# a virtualenv, ...): the places man, bash-completion and zsh's compinit look.
INSTALLED = {
    "share/man/man1": ("simpleperf.1", "simpleperf-lab.1"),
    "share/bash-completion/completions": ("simpleperf",),
    "share/zsh/site-functions": ("_simpleperf",),
}
PROGRAM = "simpleperf"


def completion_parser() -> argparse.ArgumentParser:
    """The tool's options with `lab` and its commands beside them: one completion for the one
    command."""
    parser = cli.build_parser()
    subcommands = parser.add_subparsers(dest="lab", metavar="lab")
    subcommands.add_parser("lab", parents=[commands.build_parser()], add_help=False,
                           help="emulated networks: topologies, experiments, captures")
    return parser


def _verbatim(text: str) -> str:
    """Lines kept as they are (roff no-fill), escaped for roff."""
    lines = [line.replace("\\", "\\e") for line in text.strip("\n").splitlines()]
    return "\n".join([".nf", *(("\\&" + line) if line.startswith((".", "'")) else line
                                for line in lines), ".fi"])


def man_pages() -> dict[str, str]:
    from argparse_manpage.manpage import Manpage  # type: ignore[import-untyped]

    about = {"project_name": PROGRAM, "version": __version__, "manual_title": "Simpleperf"}
    pages = {}
    for name, parser, see_also in (
            ("simpleperf.1", cli.build_parser(), "simpleperf-lab(1), iperf3(1), iperf(1)"),
            ("simpleperf-lab.1", commands.build_parser(),
             "simpleperf(1), ip-netns(8), tc(8), vtysh(1), tshark(1)")):
        examples, parser.epilog = parser.epilog, None  # kept line by line, not refilled
        page = Manpage(parser, dict(about, description=parser.description))
        page.prog = Path(name).stem  # the page's title: SIMPLEPERF-LAB, not SIMPLEPERF LAB
        if examples:
            page.add_section("examples", ">", _verbatim(examples))
        page.add_section("see also", ">", see_also)
        pages[name] = str(page)
    return pages


def completions() -> dict[str, str]:
    import shtab

    parser = completion_parser()
    return {"simpleperf": shtab.complete(parser, "bash"),
            "_simpleperf": shtab.complete(parser, "zsh")}


def write(folder: Path) -> dict[str, list[str]]:
    """Writes every file into folder/<its install directory>; returns setuptools'
    data_files (install directory, [made files])."""
    made = {**man_pages(), **completions()}
    data_files: dict[str, list[str]] = {}
    for directory, names in INSTALLED.items():
        (folder / directory).mkdir(parents=True, exist_ok=True)
        for name in names:
            (folder / directory / name).write_text(made[name])
            data_files.setdefault(directory, []).append(str(folder / directory / name))
    return data_files


def main(argv: list[str]) -> int:
    """`python3 -m simpleperf.lab.manual PREFIX`: the pages and completions under PREFIX, as
    a wheel installs them (scripts/setup, whose editable install leaves them out)."""
    if len(argv) != 1:
        print("usage: python3 -m simpleperf.lab.manual PREFIX", file=sys.stderr)
        return 2
    for directory, files in write(Path(argv[0])).items():
        print(f"{directory}: {', '.join(Path(name).name for name in files)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
