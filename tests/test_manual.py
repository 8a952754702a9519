"""The man pages and shell completions: built from the parsers when a wheel is built, and
installed with it where man, bash-completion and zsh look."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from simpleperf.command_line import cli
from simpleperf.lab import commands

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow  # builds a wheel (its build requirements come from PyPI)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A wheel built from this tree and installed under a prefix of its own: the prefix."""
    folder = tmp_path_factory.mktemp("manual")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                            str(folder / "wheel"), str(ROOT)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    wheel = next((folder / "wheel").glob("simpleperf-*.whl"))
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                           "--no-warn-script-location", "--ignore-installed", "--prefix",
                           str(folder / "prefix"), str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return folder / "prefix"


def _long_options(parser: argparse.ArgumentParser) -> set[str]:
    """Every option the parser shows (iperf2's not taken yet are hidden: they are refusals)."""
    return {flag for action in parser._actions for flag in action.option_strings
            if flag.startswith("--") and flag != "--help" and action.help != argparse.SUPPRESS}


def _rendered(page: Path) -> str:
    done = subprocess.run(["man", "-l", str(page)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "MANWIDTH": "100", "MAN_KEEP_FORMATTING": ""})
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_man_pages_are_installed_and_name_every_option(installed):
    tool = _rendered(installed / "share/man/man1/simpleperf.1")
    assert "SIMPLEPERF(1)" in tool and "simpleperf -c 10.0.0.2 -u -b 50M" in tool
    assert all(flag in tool for flag in _long_options(cli.build_parser()))
    assert "simpleperf-lab(1)" in tool  # SEE ALSO
    lab = _rendered(installed / "share/man/man1/simpleperf-lab.1")
    assert "SIMPLEPERF-LAB(1)" in lab
    for name, sub in next(a for a in commands.build_parser()._actions
                          if isinstance(a, argparse._SubParsersAction)).choices.items():
        assert f"simpleperf lab {name}" in lab
        assert all(flag in lab for flag in _long_options(sub)), name


def _bash_completes(script: Path, line: str) -> set[str]:
    program = f"""
source {script}
line={line!r}
read -ra COMP_WORDS <<< "$line"
[[ "$line" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 )); COMP_LINE="$line"; COMP_POINT=${{#line}}
_shtab_simpleperf simpleperf
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    done = subprocess.run(["bash", "--norc", "-c", program], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


def test_bash_completes_the_tool_and_the_lab(installed):
    script = installed / "share/bash-completion/completions/simpleperf"
    assert _bash_completes(script, "simpleperf --conn") == {"--connect-timeout", "--connect-only",
                                                              "--connect-retries"}
    assert _bash_completes(script, "simpleperf --server-bit") == {"--server-bitrate-limit"}
    lab_commands = next(a for a in commands.build_parser()._actions
                        if isinstance(a, argparse._SubParsersAction)).choices
    assert _bash_completes(script, "simpleperf lab ") == set(lab_commands)
    assert _bash_completes(script, "simpleperf lab up --sha") == {"--shaper"}


def test_zsh_registers_the_completion(installed):
    folder = installed / "share/zsh/site-functions"
    program = (f"fpath=({folder} $fpath); autoload -U compinit; compinit -u -D; "
               "print -r -- ${_comps[simpleperf]}")
    done = subprocess.run(["zsh", "-f", "-c", program], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "_simpleperf"
    check = subprocess.run(["zsh", "-n", str(folder / "_simpleperf")], capture_output=True,
                           text=True, timeout=30)
    assert check.returncode == 0, check.stderr


def test_the_setup_script_installs_the_man_pages_and_completions():
    """`bash scripts/setup` (an editable install, which installs no data files) still
    leaves `man simpleperf` and tab completion working, as CI's run of it shows."""
    for page in ("simpleperf", "simpleperf-lab"):
        found = subprocess.run(["man", "-w", page], capture_output=True, text=True,
                               timeout=60)
        assert found.returncode == 0 and found.stdout.strip().endswith(f"{page}.1"), found
    loaded = subprocess.run(
        ["bash", "-c", "source /usr/share/bash-completion/bash_completion; "
         "_completion_loader simpleperf; complete -p simpleperf"],
        capture_output=True, text=True, timeout=60)
    assert "_shtab_simpleperf" in loaded.stdout, loaded
    zsh = subprocess.run(["zsh", "-fc", "autoload -U compinit; compinit -u; "
                          "print -r -- ${_comps[simpleperf]}"],
                         capture_output=True, text=True, timeout=60)
    assert zsh.stdout.strip() == "_simpleperf", zsh
