"""The front door cannot go stale silently: the README's size, links and commands, the
documentation site's strict build, its reference pages against the parsers and tables they
are made from, and the architecture page against the package's modules."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import SIMPLEPERF

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT / "scripts"))

import reference_pages  # noqa: E402  (scripts/ is not a package)

LINK = re.compile(r"\]\(([^)\s]+)\)")


def _readme_commands() -> list[list[str]]:
    """The simpleperf commands the README shows in its code blocks, as words."""
    commands = []
    for line in README.read_text().splitlines():
        if line.startswith("    simpleperf "):
            words = shlex.split(line.split("#")[0].strip())
            commands.append(words[:words.index("--")] if "--" in words else words)
    return commands


def test_the_readme_is_a_front_door_of_at_most_150_lines():
    lines = README.read_text().splitlines()
    assert len(lines) <= 150, len(lines)
    text = README.read_text()
    # its two commands, as CI and a newcomer run them
    assert "bash scripts/setup && simpleperf lab run portfolio" in text
    assert "bash scripts/test" in text
    assert "bash scripts/test" in (ROOT / ".ci" / "run").read_text() or \
        "scripts/test" in (ROOT / ".ci" / "run").read_text()


def test_every_link_of_the_readme_and_the_pages_resolves():
    pages = [README, *DOCS.rglob("*.md")]
    checked = 0
    for page in pages:
        for target in LINK.findall(page.read_text()):
            if target.startswith(("http://", "https://", "mailto:", "#")):
                continue
            path = (page.parent / target.split("#")[0]).resolve()
            assert path.exists() or path.with_suffix("").name in {
                Path(p).stem for p in reference_pages.PAGES}, (page.name, target)
            checked += 1
    assert checked > 30


def test_every_command_the_readme_shows_takes_the_flags_it_is_given():
    """`simpleperf lab up pair --rate 50M` -> `simpleperf lab up --help` names --rate."""
    commands = _readme_commands()
    assert len(commands) >= 6
    for words in commands:
        path = [word for word in words[1:3] if not word.startswith("-")]
        if path[:1] == ["lab"]:
            path = path[:2]
        elif path[:1] == ["exporter"]:
            path = path[:1]
        else:
            path = []
        done = subprocess.run([*SIMPLEPERF, *path, "--help"], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, (words, done.stderr)
        for flag in (word.split("=")[0] for word in words if word.startswith("-")):
            assert re.search(rf"(^|[\s,\[]){re.escape(flag)}\b", done.stdout), (words, flag)


def test_the_site_builds_strictly(tmp_path):
    """Every page in the navigation, every link and anchor resolving, the reference pages
    made from the code (mkdocs.yml: strict)."""
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1",
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    for page in reference_pages.PAGES:
        built = tmp_path / "site" / page.removesuffix(".md") / "index.html"
        assert built.exists(), page
    # nothing fetched from elsewhere when the site is read: no fonts or scripts from a CDN
    html = (tmp_path / "site" / "index.html").read_text()
    assert "fonts.googleapis.com" not in html and "cdn.jsdelivr" not in html


def test_every_flag_help_prints_is_in_the_command_line_reference():
    page = reference_pages.command_line()
    from simpleperf.command_line import cli
    from simpleperf.exporter import web
    from simpleperf.lab import commands

    seen = 0
    parsers = [cli.build_parser(), web.build_parser(), commands.build_parser()]
    while parsers:
        parser = parsers.pop()
        parsers += reference_pages.subcommands(parser).values()
        for action in reference_pages.options(parser):
            for flag in action.option_strings:
                assert f"`{flag}`" in page, (parser.prog, flag)
                seen += 1
    assert seen > 250
    assert page.count("## `simpleperf lab ") >= 12  # every lab command has its section


def test_every_table_the_reference_is_made_from_is_on_its_page():
    from simpleperf import errors, result_fields
    from simpleperf.lab.model import disciplines, flows, link_properties

    properties = reference_pages.link_property_page()
    assert all(f"`{p.flag}`" in properties and f"`{p.mininet}`" in properties
               for p in link_properties.PROPERTIES)
    fields = reference_pages.result_field_page()
    assert all(f"`{f.key}`" in fields for f in result_fields.FIELDS)
    kinds = reference_pages.flow_kind_page()
    assert all(f"`{name}`" in kinds for name in flows.KINDS)
    qdiscs = reference_pages.queue_discipline_page()
    assert all(f"`{d.name}` | {d.about} |" in qdiscs for d in disciplines.QUEUE_DISCIPLINES)
    statuses = reference_pages.exit_status_page()
    constants = {name: value for name, value in vars(errors).items()
                 if name.startswith("EXIT_") and isinstance(value, int)}
    assert constants and set(constants.values()) == set(errors.EXIT_STATUSES)
    assert all(f"`{name}`" in statuses for name in constants)


def test_every_key_the_files_take_is_on_the_file_format_page_with_its_meaning():
    from simpleperf.exporter import modules
    from simpleperf.lab.model import events, experiment, flows, routing, topology

    page = reference_pages.file_format_page()
    tables = [topology.TOPOLOGY_KEYS, topology.HOST_KEYS, topology.ROUTER_KEYS,
              topology.LINK_KEYS, routing.TIMER_KEYS, experiment.EXPERIMENT_KEYS,
              experiment.TIMING_KEYS, experiment.STEP_KEYS, experiment.SWEEP_KEYS,
              flows.COMMON_KEYS, {name: meaning for name, (_, meaning) in flows.FIELDS.items()},
              events.EVENT_KEYS, modules.MODULE_KEYS]
    for table in tables:
        for key, meaning in table.items():
            cell = reference_pages.cell(meaning)
            assert meaning.strip() and f"| `{key}` | {cell} |" in page, key
    # the parsers take exactly these: each node kind is a top-level key, and the keys
    # every flow takes and each kind's own are the flow's whole table
    assert set(topology.NODE_KINDS) <= set(topology.TOPOLOGY_KEYS)
    assert set(flows.COMMON_KEYS) | set(flows.FIELDS) == flows.FLOW_FIELDS


def test_every_constant_of_theory_and_verdicts_says_what_it_is():
    """The verdict page lists them with the comments beside or above them: one without is
    a forgotten row."""
    from simpleperf.lab.model import theory, verdicts

    for module in (theory, verdicts):
        rows = reference_pages._constants(module)
        assert len(rows) >= 8
        assert [row[0] for row in rows if not row[2]] == [], module.__name__
    page = reference_pages.verdict_page()
    assert "`SHARE_SPREAD`" in page and verdicts.TOLERANCE in page


def test_every_module_is_named_on_the_architecture_page():
    page = (DOCS / "architecture.md").read_text()
    package = ROOT / "src" / "simpleperf"
    missing = [str(path.relative_to(package)) for path in
               sorted([*package.rglob("*.py"), *package.rglob("*.c")])
               if path.name != "__init__.py" and path.name not in page]
    folders = {path.parent.name + "/" for path in package.rglob("__init__.py")} - {
        "simpleperf/"}
    missing += sorted(folder for folder in folders if folder not in page)
    assert not missing, missing


@pytest.mark.parametrize("page", ["getting-started.md", "index.md", "how-to.md"])
def test_the_front_pages_name_no_flag_the_tool_lacks(page):
    """The flags the first pages show in their commands exist (Getting started's commands
    are also run, by a lab test)."""
    text = (DOCS / page).read_text()
    helps: dict[str, str] = {}
    for line in text.splitlines():
        if not line.startswith("simpleperf "):
            continue
        words = shlex.split(line.split(" &")[0])
        words = words[:words.index("--")] if "--" in words else words  # lab exec's command
        path = " ".join(words[1:3]) if words[1] == "lab" else ""
        if path not in helps:
            helps[path] = subprocess.run([*SIMPLEPERF, *path.split(), "--help"],
                                         capture_output=True, text=True, timeout=60).stdout
        for flag in (w for w in words if w.startswith("-")):
            assert re.search(rf"(^|[\s,\[]){re.escape(flag)}\b", helps[path]), (line, flag)


def test_every_bench_script_has_its_command_on_the_benchmarks_page():
    """A script in bench/ that prints figures has a row naming its command, what it is
    measured beside and where its figures are (cpu_meter.py is the others' helper)."""
    page = (DOCS / "benchmarks" / "index.md").read_text()
    rows = {match.group(1): match.group(2) for match in re.finditer(
        r"^\| `bench/([a-z_0-9]+\.py)` \| `([^`]+)` \|", page, re.MULTILINE)}
    scripts = {path.name for path in (ROOT / "bench").glob("*.py")} - {"cpu_meter.py"}
    assert set(rows) == scripts
    for script, command in rows.items():
        assert f"bench/{script}" in command.split(), (script, command)
