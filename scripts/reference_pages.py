"""The documentation site's reference pages, made from the tables the code runs on when the
site is built (a MkDocs hook: mkdocs.yml names this file), so that a page cannot say what the
code does not: every flag from the argparse parsers (the man pages' source too), every link
property from the link property table, every result figure from result_fields.py, the flow
kinds and queue disciplines from their registries, the exit statuses from errors.py, every
key of the lab's and the exporter's files from the key tables their parsers check.

`python3 scripts/reference_pages.py FOLDER` writes the same pages into FOLDER."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import io
import sys
import tokenize
from pathlib import Path
from typing import Any

from simpleperf import errors, result_fields
from simpleperf.command_line import cli
from simpleperf.description import testspec
from simpleperf.exporter import modules, web
from simpleperf.lab import commands
from simpleperf.lab.model import (
    disciplines,
    events,
    experiment,
    flows,
    link_properties,
    routing,
    theory,
    topology,
    traces,
    verdicts,
)
from simpleperf.lab.net.shaping import aqm

HEADER = ("<!-- Made from the code when the site is built (scripts/reference_pages.py): "
          "edit the table it names, not this page. -->\n\n")


def cell(text: Any) -> str:
    """One Markdown table cell: no line breaks, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _table(head: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _help(action: argparse.Action, parser: argparse.ArgumentParser) -> str:
    """The help text as --help prints it (%(default)s and the like filled in)."""
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    values = dict(vars(action), prog=parser.prog)
    values = {k: (v.__name__ if hasattr(v, "__name__") else v) for k, v in values.items()}
    try:
        return action.help % values
    except (KeyError, TypeError, ValueError):
        return action.help


def _value(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    if action.metavar is not None:
        metavar = action.metavar
        return " ".join(metavar) if isinstance(metavar, tuple) else str(metavar)
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        return "{" + ",".join(str(choice) for choice in action.choices) + "}"
    return action.dest.upper()


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The options and arguments --help prints, in its order (subcommands aside)."""
    return [action for group in parser._action_groups for action in group._group_actions
            if action.help != argparse.SUPPRESS
            and not isinstance(action, argparse._SubParsersAction)]


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                if child not in found.values():
                    found[name] = child
    return found


def _command(title: str, parser: argparse.ArgumentParser, level: int) -> str:
    parser.prog = title
    parts = [f"{'#' * level} `{title}`\n"]
    if parser.description:
        parts.append(parser.description.strip() + "\n")
    usage = parser.format_usage().removeprefix("usage: ").strip()
    parts.append("```\n" + usage + "\n```\n")
    for group in parser._action_groups:
        shown = [action for action in group._group_actions
                 if action.help != argparse.SUPPRESS
                 and not isinstance(action, argparse._SubParsersAction)]
        if not shown:
            continue
        parts.append(f"**{(group.title or 'options').capitalize()}**\n")
        parts.append(_table(["flag", "value", "meaning"], [
            [", ".join(f"`{flag}`" for flag in action.option_strings) or f"`{action.dest}`",
             f"`{_value(action)}`" if _value(action) else "", _help(action, parser)]
            for action in shown]))
    for name, child in subcommands(parser).items():
        parts.append(_command(f"{title} {name}", child, min(level + 1, 4)))
    return "\n".join(parts)


def command_line() -> str:
    return (HEADER + "# Command line\n\nEvery flag of every command, as `--help` prints it "
            "(the man pages `simpleperf(1)` and `simpleperf-lab(1)` are made from the same "
            "parsers).\n\n"
            + _command("simpleperf", cli.build_parser(), 2)
            + "\n" + _command("simpleperf lab", commands.build_parser(), 2)
            + "\n" + _command("simpleperf exporter", web.build_parser(), 2))


def link_property_page() -> str:
    rows = [[f"`{p.flag}`", f"`{p.mininet}`", p.description,
             f"`{p.example}`" if p.example else "(a switch: no value)",
             "yes" if p.live else "no", "yes" if p.sweep else "no",
             "yes" if p.at_switch else "no", ", ".join(p.qdiscs) or "all"]
            for p in link_properties.PROPERTIES]
    return (HEADER + "# Link properties\n\nOne table in the code "
            "(`src/simpleperf/lab/model/link_properties.py`) gives every property of a link: "
            "its flag (`lab up pair`, `lab link set`), its key in a topology's links and in "
            "events (Mininet's name), in `[pair]` and in sweeps (the flag's name without "
            "dashes).\n\n"
            + _table(["flag", "topology key", "meaning", "example", "set on a running link",
                      "swept", "at a switch's port", "queue disciplines"], rows))


def result_field_page() -> str:
    rows = [[f"`{f.key}`", f"`{f.json}`" if f.json else "(not shown)",
             f.kind.__name__ if f.kind is not None else "delay account",
             f.shown_by, f.protocol or "both", f.summed or "not summed"]
            for f in result_fields.FIELDS]
    return (HEADER + "# Result fields\n\nEvery figure a stream's end-of-test result "
            "carries, from `src/simpleperf/result_fields.py`: its key in our results and "
            "the native protocol's results message, the key iperf3's JSON gives it in "
            "`end.streams[].sender` / `.receiver`, which end's view shows it, and how the "
            "sums (`sum_sent`, `sum_received`) combine the streams'. The JSON layout is "
            "in [JSON output](../json-output.md).\n\n"
            + _table(["key", "JSON key", "type", "shown by", "protocol", "in the sums"],
                     rows))


def flow_kind_page() -> str:
    rows = [[f"`{k.name}`", ", ".join(f"`{name}`" for name in sorted(k.fields)),
             {"duration": "after its duration", "count": "after its packets",
              "exit": "when its program exits"}[k.ends],
             "yes" if k.tcp else "no", "yes" if k.paced else "no",
             "yes" if k.share_judged else "no", "yes" if k.application else "no"]
            for k in flows.KINDS.values()]
    return (HEADER + "# Flow kinds\n\nThe kinds of flow an experiment's steps hold, from the "
            "registry `KINDS` in `src/simpleperf/lab/model/flows.py`. Every flow takes "
            + ", ".join(f"`{name}`" for name in sorted(flows.COMMON_FIELDS))
            + "; each kind takes the fields below besides.\n\n"
            + _table(["kind", "its fields", "ends", "TCP", "paced", "judged on its share",
                      "a real program"], rows))


def queue_discipline_page() -> str:
    tuned = {name: [f"`{p.flag}`" for p in link_properties.PROPERTIES if name in p.qdiscs]
             for name in disciplines.QDISCS}
    full = {True: "drops from the longest flow's queue", False: "drops what arrives"}
    rows = [[f"`{d.name}`", d.about, "flows in turn" if d.in_turn else "arrival order",
             full[d.sheds_longest], "yes" if d.name in aqm.DISCIPLINES else "no",
             "yes" if d.kernel else "no", ", ".join(tuned[d.name]) or "-"]
            for d in disciplines.QUEUE_DISCIPLINES]
    return (HEADER + "# Queue disciplines\n\nWhat `--qdisc` (a link's `qdisc`) takes, from "
            "`QUEUE_DISCIPLINES` in `src/simpleperf/lab/model/disciplines.py`; the lab's own "
            "implementations are the registry `DISCIPLINES` in "
            "`src/simpleperf/lab/net/shaping/aqm/`, and [how the lab shapes links]"
            "(../lab-shaping.md) says which runs where. A discipline that serves flows in "
            "turn gives each its max-min share; one queue in arrival order gives a flow that "
            "does not back off what it sends. When full, one that drops from its longest "
            "flow's queue makes a flow above its share lose its own packets; one that drops "
            "whatever arrives (fq_pie, as Linux's) makes every flow sharing it lose some "
            "until its AQM catches up, and theory then judges none of them.\n\n"
            + _table(["discipline", "what it is", "serves", "when full", "the lab's own",
                      "the kernel's", "tuned by"], rows))


def _rule(rule: testspec.Rule) -> str:
    if rule.kind is bool:
        return "on or off"
    if rule.choices:
        return " or ".join(f"`{choice}`" for choice in rule.choices)
    if rule.kind is str:
        return "a name"
    def number(value: float) -> str:
        return f"{int(value):,}" if rule.kind is int else f"{value:g}"

    low = "" if rule.low is None else f"{'above' if rule.above else 'from'} {number(rule.low)}"
    high = "" if rule.high is None else f"to {number(rule.high)}"
    whole = "whole number " if rule.kind is int else ""
    return (whole + " ".join(part for part in (low, high) if part)
            + (", or none" if rule.optional else "")).strip()


def _carried(carried: testspec.Carried) -> str:
    if isinstance(carried, testspec.Uncarried):
        where = {"both": "always", "sender": "where it sends",
                 "receiver": "where it receives"}[carried.end]
        return f"refused {where}: it {carried.lacks}"
    return ", ".join(f"`{part}`" for part in carried) or "not needed"


def _classic(name: str) -> str:
    classic = testspec.CLASSIC[name]
    if classic is True:
        return "any value"
    if isinstance(classic, testspec.Rule):
        return _rule(classic) + " (more: a simpleperf server)"
    named = (classic if isinstance(classic, str) else
             ", ".join(classic.values()) if isinstance(classic, dict)
             else testspec.FLAGS[name].name)
    return f"refused, naming {named}"


def test_description_page() -> str:
    rows = [[f"`{item.name}`", f"`{item.default!r}`", _rule(testspec.RULES[item.name]),
             f"`{testspec.FLAGS[item.name].name}`" if item.name in testspec.FLAGS else "",
             _carried(item.metadata["iperf3"]), _carried(item.metadata["iperf2"]),
             _classic(item.name)]
            for item in dataclasses.fields(testspec.TestSpec)]
    return (HEADER + "# The test description\n\nWhat a client asks a server to run, one "
            "row per field of `TestSpec` (`src/simpleperf/description/testspec.py`): its "
            "default and the rule a peer's value is checked against (sizes in bytes, rates "
            "in bits/s, times in seconds), the flag it declares itself where it does (the "
            "others' are in the [command line](command-line.md)), and what carries it to "
            "each kind of server. A simpleperf server is sent every field by name. An "
            "iperf3 server is sent the parameters named, an iperf2 server the header "
            "fields named (`transport`: the socket's kind); 'not needed': it runs the "
            "same test without it; 'refused': a test that would need it of that server is "
            "refused in one line before it starts, naming the flag. A classic Simpleperf "
            "server runs a test only with the values in its column.\n\n"
            + _table(["field", "default", "a peer may send", "its own flag",
                      "iperf3 server", "iperf2 server", "classic server"], rows))


def exit_status_page() -> str:
    rows = [[f"`{status}`", f"`{name}`", meaning]
            for status, (name, meaning) in sorted(errors.EXIT_STATUSES.items())]
    return (HEADER + "# Exit statuses\n\nEvery command ends with one of these "
            "(`src/simpleperf/errors.py`), and an error as one line on stderr.\n\n"
            + _table(["status", "name", "meaning"], rows))


def _constants(module: Any) -> list[list[str]]:
    """A module's numeric constants (UPPER_CASE = number) with the comments that explain
    them: the lines just above and the one beside (a constant on the line after another's,
    with no comment of its own, shares the comment above that one: a group)."""
    source = Path(module.__file__).read_text()
    lines = source.splitlines()
    comments: dict[int, str] = {}  # a line's comment: the whole line's, or beside code
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
    rows = []
    group: tuple[int, list[str]] = (0, [])  # where the last constant ended, its comment above
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id.isupper()):
            continue
        value = getattr(module, node.targets[0].id)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        above: list[str] = []
        line = node.lineno - 1
        while line in comments and lines[line - 1].lstrip().startswith("#"):
            above.insert(0, comments[line])
            line -= 1
        if not above and node.lineno not in comments and group[0] == node.lineno - 1:
            above = group[1]
        group = (node.end_lineno or node.lineno, above)
        meaning = " ".join([*above, comments.get(node.lineno, "")]).strip()
        rows.append([f"`{node.targets[0].id}`", f"{value:g}", meaning])
    return rows


def verdict_page() -> str:
    return (HEADER + "# Theory and verdicts\n\nHow `simpleperf lab run` judges what it "
            "measured against what theory predicts: the rules of "
            "`src/simpleperf/lab/model/verdicts.py`, in its own words, then every constant "
            "they and the theory (`src/simpleperf/lab/model/theory.py`) use.\n\n"
            "## The rules\n\n" + (verdicts.__doc__ or "").split("\n", 2)[2].strip()
            + "\n\nThe report states them in one line:\n\n> " + verdicts.TOLERANCE
            + "\n\n## The verdicts' constants\n\n"
            + _table(["name", "value", "meaning"], _constants(verdicts))
            + "\n## Theory's constants\n\n"
            + _table(["name", "value", "meaning"], _constants(theory)))


def _keys(keys: dict[str, str], takers: dict[str, str] | None = None) -> str:
    head = ["key", "meaning"] + (["flows"] if takers is not None else [])
    rows = [[f"`{key}`", meaning] + ([takers[key]] if takers is not None else [])
            for key, meaning in keys.items()]
    return _table(head, rows)


def _lab_files(title: str, command: str, folder: str, table: str, module: str) -> str:
    """The head of a section on one kind of the lab's files: the command that reads them,
    where the shipped ones are and the table its keys come from."""
    return (f"## {title}\n\n`simpleperf {command} FILE.toml`; the shipped ones are in "
            f"`src/simpleperf/lab/data/{folder}/` (`{table}` and the tables beside it in "
            f"`src/simpleperf/lab/model/{module}.py`).\n\n")


def file_format_page() -> str:
    properties = "[link properties](link-properties.md)"
    one = "[link property](link-properties.md)"
    live = ", ".join(f"`{name}`" for name in events.SET_FIELDS)
    swept = ", ".join(f"`{name}`" for name in link_properties.SWEPT)
    kinds = {name: ", ".join(k.name for k in flows.KINDS.values() if name in k.fields)
             for name in flows.FIELDS}
    return (HEADER + "# File formats\n\nEvery key the lab's TOML files and the exporter's "
            "modules file take, from the tables their parsers check (a key that is not "
            "here is refused in one line naming it and where it was). Values with units "
            "take them as the command line does: `\"50M\"`, `\"20ms\"`, `\"64K\"`, "
            "`\"1%\"`.\n\n"
            + _lab_files("Topology files", "lab up", "topologies", "TOPOLOGY_KEYS", "topology")
            + _keys(topology.TOPOLOGY_KEYS)
            + "\n### `[hosts]`: each host's table\n\n" + _keys(topology.HOST_KEYS)
            + "\n### `[routers]`: each router's table\n\n" + _keys(topology.ROUTER_KEYS)
            + "\nA switch's table takes no keys.\n\n### `[[links]]`\n\n"
            + _keys(topology.LINK_KEYS)
            + f"\nand every {one} by its topology key (`bw = \"50M\"`, `delay = "
            "\"20ms\"`), for both directions.\n\n### `[timers]`\n\n"
            + _keys(routing.TIMER_KEYS)
            + "\n" + _lab_files("Experiment files", "lab run", "experiments",
                                 "EXPERIMENT_KEYS", "experiment")
            + _keys(experiment.EXPERIMENT_KEYS)
            + "\n### `[timing]` and `[quick]`\n\n" + _keys(experiment.TIMING_KEYS)
            + "\n### `[[steps]]`\n\n" + _keys(experiment.STEP_KEYS)
            + "\n### A step's flows\n\nEvery flow takes these (`COMMON_KEYS` in "
            "`src/simpleperf/lab/model/flows.py`):\n\n" + _keys(flows.COMMON_KEYS)
            + "\nand the fields of its kind (`FIELDS`; [flow kinds](flow-kinds.md) says how "
            "each kind runs):\n\n"
            + _keys({name: meaning for name, (_, meaning) in flows.FIELDS.items()}, kinds)
            + "\n### A step's events\n\n" + _keys(events.EVENT_KEYS)
            + f"\nand, with `action = \"set\"`, the {properties} that change on a running "
            f"link: {live}.\n\n### `[sweep]`\n\n" + _keys(experiment.SWEEP_KEYS)
            + f"\nA link's sweeps: {swept}; a TCP flow's: "
            + ", ".join(f"`{name}`" for name in experiment.FLOW_SWEEPS)
            + f".\n\n### `[pair]`\n\nThe {properties} of `topology = \"pair\"`'s link, "
            "by their flags' names without dashes (`rate`, `delay`, `qdisc`): what `simpleperf "
            "lab up pair --rate 50M ...` takes.\n\n"
            "## Trace files\n\nMahimahi's format, read as is "
            "(`src/simpleperf/lab/model/traces.py`): one whole number per line, a "
            f"millisecond at which the link may deliver {traces.PACKET_BYTES} bytes; the "
            "numbers never go back, a millisecond given k times is k opportunities, and the "
            "schedule repeats after the last line's millisecond, for as long as the link "
            f"runs. At most {traces.MAX_TRACE_BYTES >> 20} MB, and a period of at most "
            f"{traces.MAX_PERIOD_MS // 3_600_000} hours. A link takes one with `trace = "
            "\"FILE\"` (or a shipped name) in place of `bw`.\n\n"
            "## Exporter modules\n\n`simpleperf exporter --config FILE.toml`: a table "
            "`[modules.NAME]` per module, beside the built-in ones (`MODULE_KEYS` in "
            "`src/simpleperf/exporter/modules.py`).\n\n" + _keys(modules.MODULE_KEYS))


PAGES = {
    "reference/file-formats.md": file_format_page,
    "reference/command-line.md": command_line,
    "reference/link-properties.md": link_property_page,
    "reference/result-fields.md": result_field_page,
    "reference/flow-kinds.md": flow_kind_page,
    "reference/queue-disciplines.md": queue_discipline_page,
    "reference/exit-statuses.md": exit_status_page,
    "reference/test-description.md": test_description_page,
    "reference/verdicts.md": verdict_page,
}


def on_files(files: Any, config: Any) -> Any:
    """MkDocs: add the reference pages to the site's files."""
    from mkdocs.structure.files import File

    for path, make in PAGES.items():
        files.append(File.generated(config, path, content=make()))
    return files


def main() -> None:
    folder = Path(sys.argv[1])
    for path, make in PAGES.items():
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(make())


if __name__ == "__main__":
    main()
