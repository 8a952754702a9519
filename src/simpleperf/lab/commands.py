"""`simpleperf lab ...`: list, probe, run, results, compare, up, export, down, status, exec,
capture, analyze."""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..command_line.cli import OneLineParser
from ..description.options import MAX_PORT
from ..errors import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, UsageError
from .containerlab import export as clab_export
from .containerlab import load as clab_load
from .model import link_properties, theory, topology
from .model.datafiles import DataFileError
from .net import build, changes, journal, lifecycle, ownership, stages
from .net.capture import CaptureError
from .net.routing import tables
from .net.shaping.probe import SHAPER_ENV, SHAPERS
from .net.system import is_running
from .results.errors import ResultsError

# Experiments, results and the runner are imported by the commands that use them: `lab up`,
# `status` and `exec` start faster without them (seconds in an emulated guest).

DEFAULT_RESULTS = "simpleperf-results"
WEB_PORT = 8089  # lab web's default port
STATUS_JOURNAL = 10  # lines of the lab's journal `lab status` shows
RTT_TABLE_HOSTS = 16  # lab status: a table of expected RTTs up to this many hosts


def _shaper_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shaper", choices=SHAPERS,
                        help=f"netem where the kernel has it (auto, the default), or the own "
                             f"delay line; {SHAPER_ENV} sets the default")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="simpleperf lab", description="Emulated networks on this machine "
                           "(root): topologies from TOML, experiments with theory beside every "
                           "number, captures.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser,
                                     metavar="{list,probe,run,results,compare,up,export,down,status,"
                                             "exec,link,node,capture,analyze,web}")
    commands.add_parser("list", help="the shipped topologies and experiments, a line each")
    commands.add_parser("probe", help="what this kernel offers the lab (netem, AQM qdiscs, "
                                      "...) and which shaper links get")
    run_parser = commands.add_parser("run", help="build the topology, run an experiment "
                                                 "(e.g. portfolio), report, tear down")
    run_parser.add_argument("experiment", help="portfolio, or a path to an experiment TOML")
    run_parser.add_argument("--quick", action="store_true",
                            help="short transfers and pings (the experiment's [quick] timing)")
    run_parser.add_argument("--results", default=DEFAULT_RESULTS, metavar="DIR",
                            help=f"where the results folder goes (default {DEFAULT_RESULTS})")
    run_parser.add_argument("--allow-commands", action="store_true", help="run the command "
                            "flows of an experiment file that is not a shipped one (they run "
                            "as root, and the lab's nodes share this machine's files)")
    run_parser.add_argument("--congestion", metavar="NAME", help="the tcp flows' congestion "
                            "control (e.g. bbr) in place of the one the experiment names; a "
                            "flow that names its own keeps it")
    _shaper_option(run_parser)
    results = commands.add_parser("results", help="list past runs")
    results.add_argument("--results", default=DEFAULT_RESULTS, metavar="DIR",
                         help=f"where the results folders are (default {DEFAULT_RESULTS})")
    compare = commands.add_parser("compare", help="two runs side by side")
    compare.add_argument("runs", nargs=2, metavar="RUN", help="a results folder")
    up = commands.add_parser("up", help="build a topology: a shipped name or a .toml file")
    up.add_argument("topology", help="portfolio, pair, a path to a TOML file, or a "
                    "containerlab topology (NAME.clab.yml) of linux nodes")
    _shaper_option(up)
    pair = up.add_argument_group("pair (two hosts h1, h2 joined by one link)")
    _property_flags(pair, link_properties.PROPERTIES)
    for direction, way in (("uplink", "h1 to h2"), ("downlink", "h2 to h1")):
        pair.add_argument(f"--{direction}-trace", metavar="TRACE",
                          help=f"a trace for {way} only (as mm-link's {direction})")
    export = commands.add_parser("export", help="write a topology as a containerlab lab or "
                                 "a clabernetes Topology (Kubernetes)")
    export.add_argument("topology", help="a shipped name or a path to a TOML file")
    export.add_argument("--to", required=True, choices=("containerlab", "clabernetes"),
                        help="containerlab: NAME.clab.yml and the files it binds; "
                             "clabernetes: NAME.clabernetes.yaml (ConfigMaps and a Topology)")
    export.add_argument("folder", metavar="DIR", help="where the files go (made if missing)")
    export.add_argument("--router-image", default=clab_export.ROUTER_IMAGE,
                        help=f"routers' image (default {clab_export.ROUTER_IMAGE})")
    export.add_argument("--host-image", default=clab_export.HOST_IMAGE,
                        help="hosts' and switches' image: ip, tc and Python 3.10+ (default "
                             f"{clab_export.HOST_IMAGE})")
    down = commands.add_parser("down", help="remove a lab and everything it created")
    down.add_argument("name", nargs="?", help="which lab (default: the only one up)")
    status = commands.add_parser("status", help="nodes, links, shaping, expected RTTs")
    status.add_argument("name", nargs="?", help="which lab (default: every lab up)")
    run = commands.add_parser("exec", help="run a command inside a node: exec h1 -- ping h4")
    run.add_argument("node", help="a node of a lab that is up (h1, r2, ...)")
    run.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    _change_parsers(commands)
    _capture_parsers(commands)
    web = commands.add_parser("web", help="the labs that are up as a live page: "
                              "http://127.0.0.1:PORT/?token=... printed at start")
    web.add_argument("--port", type=_port, default=WEB_PORT,
                     help=f"the page's port (default {WEB_PORT})")
    web.add_argument("--listen", default="127.0.0.1", metavar="ADDRESS", help="the address "
                     "it listens on (default 127.0.0.1: the page is a root interface, so "
                     "another address is said as a warning)")
    web.add_argument("--results", default=DEFAULT_RESULTS, metavar="DIR",
                     help=f"where the past runs it lists are (default {DEFAULT_RESULTS})")
    return parser


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"a port is 1 to {MAX_PORT}, not '{text}'")
    return int(text)


def _queue_runners(model: topology.Topology, link: topology.Link, backend: str) -> list[str]:
    """Who runs each active queue discipline of a link, and why, in words."""
    routed = build.wire_ports(model, link) is not None
    return [f"queue {runner}" for runner in sorted(
        {stages.queue_runner(s, backend, routed) for s in (link.a_to_b, link.b_to_a)
         if s.qdisc != "droptail" or s.trace})]


def _change_parsers(commands: Any) -> None:
    link = commands.add_parser("link", help="take a link of a running lab down or up, or set "
                               "its shaping: link L2 down, link L2 set --delay 30ms")
    link.add_argument("name", help="the link's name (simpleperf lab status lists them)")
    link.add_argument("action", choices=("down", "up", "set"),
                      help="down: carrier lost at both ends; up; set: new shaping (below)")
    _property_flags(link.add_argument_group("set (each direction; what is not given "
                                            "stays)"), link_properties.LIVE)
    link.add_argument("--lab", help="which lab (default: the only one up)")
    node = commands.add_parser("node", help="take every link of a node down or up: node r2 "
                               "down")
    node.add_argument("name", help="a node of the lab (h1, r2, ...)")
    node.add_argument("action", choices=("down", "up"), help="every link of the node")
    node.add_argument("--lab", help="which lab (default: the only one up)")


def _capture_parsers(commands: Any) -> None:
    grab = commands.add_parser("capture", help="capture packets on a link or interface "
                               "(pcapng; -w - | wireshark -k -i - to watch live)")
    grab.add_argument("where", metavar="LINK|NODE[:IFACE]",
                      help="a link's name (what it carried, both directions) or a node's "
                           "interface")
    grab.add_argument("-w", dest="write", metavar="FILE",
                      help="write pcapng to FILE, or '-' for standard output (default: print "
                           "a line per packet with tshark)")
    grab.add_argument("--filter", metavar="BPF", help="a capture filter, e.g. 'tcp port 5201'")
    grab.add_argument("--snaplen", type=_positive_int, default=0, metavar="N",
                      help="bytes kept per packet (default: whole packets)")
    grab.add_argument("--duration", type=_positive_int, metavar="S", help="stop after S seconds")
    grab.add_argument("--count", type=_positive_int, metavar="N", help="stop after N packets")
    grab.add_argument("--lab", help="which lab (default: the only one up)")
    study = commands.add_parser("analyze", help="retransmissions, loss, RTT and jitter per "
                                "flow of a capture file")
    study.add_argument("file", metavar="PCAP", type=Path, help="a pcap or pcapng file")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a whole number above 0, not '{text}'")
    return value


def _property_flags(group: Any, properties: tuple[link_properties.LinkProperty, ...]) -> None:
    """A flag per link property, as the property table defines it."""
    for prop in properties:
        if prop.switch:
            group.add_argument(prop.flag, action="store_true", help=prop.help)
        else:
            group.add_argument(prop.flag, type=_text_type(prop.from_text),
                               help=prop.help)


# What `lab status` says of a host's ECN where a queue marks: node.ecn
ECN_SAYS = {True: "its TCP negotiates ECN", False: "ECN off",
            None: "ECN only when its peer asks (the kernel's default)"}
# What `lab results` adds to a run's line for the state its files are in (store.run_state).
RUN_STATES = {"complete": "", "running": ", still running",
              "interrupted": ", INTERRUPTED (its process ended before its measurements did: "
                             "killed, crashed or out of disk; what it measured until then "
                             "is kept)",
              "unwritten": ", INCOMPLETE (writing its results failed)"}


def _text_type(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            return convert(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return parse


def _terminate_as_interrupt(signum, frame):  # SIGTERM cleans up the way Ctrl-C does
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    # Started in the background by a shell (`lab run ... &`), SIGINT comes ignored, and
    # every server the run starts would inherit that and ignore the SIGINT that stops it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        args = build_parser().parse_args(argv)
        return _dispatch(args)
    except UsageError as error:
        print(f"simpleperf lab: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except (lifecycle.LabError, DataFileError, ResultsError, CaptureError) as error:
        print(f"simpleperf lab: error: {error}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `lab status | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _dispatch(args: argparse.Namespace) -> int:
    if args.command in ("run", "results", "compare"):
        return _results_command(args)
    if args.command == "probe":
        print(lifecycle.kernel_report())
        return EXIT_OK
    if args.command == "list":
        print(shipped())
        return EXIT_OK
    if args.command == "up":
        model, spec = _model(args)
        started = time.monotonic()
        record = lifecycle.up(model, spec, args.shaper, persistent=True)
        print(f"lab {model.name} is up ({len(record.namespaces)} namespaces, shaper "
              f"{record.shaper}) in {time.monotonic() - started:.2f} s")
        for link in model.links:
            for said in _queue_runners(model, link, record.backend):
                print(f"  link {link.name}: {said}")
        first = (model.hosts() or list(model.nodes))[0]
        print(f"  simpleperf lab status {model.name}   |   simpleperf lab exec {first} -- ping "
              f"...  |   simpleperf lab down {model.name}")
        return EXIT_OK
    if args.command == "export":
        return _export(args)
    if args.command == "web":
        return _web(args)
    if args.command == "down":
        result = lifecycle.down(args.name)
        print(f"removed {len(result.removed)} items: " + ", ".join(result.removed))
        for item in result.left:
            print(f"left alone: {item}")
        return EXIT_OK
    if args.command == "status":
        records = [lifecycle.find(args.name)] if args.name else ownership.all_records()
        if not records:
            print("no lab is up")
        for record in records:
            print(describe(record))
        return EXIT_OK
    if args.command in ("link", "node"):
        return _change(args)
    if args.command in ("capture", "analyze"):
        from . import capturing
    if args.command == "capture":
        return capturing.capture_live(args.lab, args.where, args.write, args.filter,
                                      args.snaplen, args.duration, args.count)
    if args.command == "analyze":
        return capturing.analyze(args.file)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    return lifecycle.run_in_node(args.node, command)


def _web(args: argparse.Namespace) -> int:
    lifecycle.require_root("read the labs' namespaces")
    try:
        from .web import app
    except ImportError:
        raise UsageError("simpleperf lab web needs aiohttp: pip install 'simpleperf[web]'"
                         ) from None
    if args.listen not in ("127.0.0.1", "::1", "localhost"):
        print(f"warning: the console listens on {args.listen}: anyone who can reach it with "
              "its token controls the labs as root", file=sys.stderr)
    token = secrets.token_urlsafe(24)
    try:
        app.serve(args.listen, args.port, token, Path(args.results),
                  lambda line: print(line, flush=True))
    except OSError as error:
        raise lifecycle.LabError(f"cannot listen on {args.listen} port {args.port}: "
                                 f"{error.strerror or error}") from None
    return EXIT_OK


def _change(args: argparse.Namespace) -> int:
    given = {p.name: getattr(args, p.name, None) for p in link_properties.LIVE}
    shaping = link_properties.to_mininet(given)
    if args.action == "set" and not shaping:
        raise UsageError("link set needs at least one of "
                         + ", ".join(p.flag for p in link_properties.LIVE))
    named = [name for name, value in given.items() if value is not None]
    if args.action != "set" and named:
        raise UsageError(f"{link_properties.BY_NAME[named[0]].flag} goes with 'set', not "
                         f"'{args.action}'")
    wanted = changes.Change(args.name, args.action, shaping or None)
    took, routing = lifecycle.change(args.lab, wanted)
    print(f"{args.command} {wanted.describe()} ({took * 1e3:.0f} ms)")
    if routing:
        print(routing)
    return EXIT_OK


def _model(args: argparse.Namespace) -> tuple[topology.Topology, dict[str, Any]]:
    given = {name: getattr(args, name) for name in link_properties.NAMES
             if getattr(args, name) not in (None, False)}
    one_way = {side: getattr(args, f"{direction}_trace") for side, direction in
               (("a_to_b", "uplink"), ("b_to_a", "downlink"))
               if getattr(args, f"{direction}_trace")}
    if args.topology == "pair":
        params: dict[str, Any] = {name: getattr(args, name) for name in link_properties.NAMES}
        params.update({side: {"trace": trace} for side, trace in one_way.items()})
        try:
            return topology.pair(**params), {"pair": params}
        except topology.TopologyError as error:
            raise UsageError(str(error).replace("link h1-h2: ", "pair: ")) from None
    if given or one_way:
        flag = link_properties.BY_NAME[next(iter(given))].flag if given else \
            "--uplink-trace or --downlink-trace"
        raise UsageError(f"{flag} only applies to the pair topology")
    if clab_load.is_containerlab(args.topology):
        model, notes = clab_load.load(args.topology)
        for note in notes:
            print(f"note: {note}")
    else:
        model = topology.load(args.topology)
    return model, {"file": model.source}


def _export(args: argparse.Namespace) -> int:
    model = topology.load(args.topology)
    images = clab_export.Images(args.router_image, args.host_image)
    made = (clab_export.containerlab if args.to == "containerlab"
            else clab_export.clabernetes)(model, images)
    folder = Path(args.folder)
    try:
        clab_export.write(made, folder)
    except OSError as error:
        raise lifecycle.LabError(f"cannot write {folder}: {error.strerror}") from None
    first = next(iter(p for p in made if p.endswith((".yml", ".yaml"))))
    files = "file" if len(made) == 1 else "files"
    print(f"wrote {len(made)} {files} to {folder}: {', '.join(sorted(made))}")
    if args.to == "containerlab":
        print(f"  containerlab deploy -t {folder / first}   (or: simpleperf lab up "
              f"{folder / first})")
    else:
        print(f"  kubectl apply -f {folder / first}   (clabernetes' controller runs it)")
    return EXIT_OK


def shipped() -> str:
    """The shipped topologies and experiments, with their descriptions."""
    from .model import experiment as experiments

    lines = ["topologies (simpleperf lab up NAME)",
             f"  {'pair':<16} two hosts, one link set from the command line (--rate ...)"]
    for path in sorted(topology.DATA_DIR.glob("*.toml")):
        lines.append(f"  {path.stem:<16} {topology.load(str(path)).description}")
    lines.append("experiments (simpleperf lab run NAME [--quick])")
    for path in sorted(experiments.DATA_DIR.glob("*.toml")):
        lines.append(f"  {path.stem:<16} {experiments.load(str(path)).description}")
    return "\n".join(lines)


def describe(record: ownership.LabRecord) -> str:
    model = lifecycle.model_of(record)
    lines = [f"lab {record.lab}: {record.state}, shaper {record.shaper}, since "
             f"{time.strftime('%H:%M:%S', time.localtime(record.created))}"]
    for process in record.processes:
        alive = is_running(process.pid, process.start_time)
        lines.append(f"  {process.what}: pid {process.pid}, "
                     f"{'running' if alive else 'NOT RUNNING: links with delay pass nothing'}")
    if record.state == "remains":
        lines.append(f"  its owner was stopped: simpleperf lab down {record.lab} clears it")
    lines.append("nodes")
    ends_of: dict[str, list[topology.Endpoint]] = {}
    for link in model.links:  # every node's ends at once: linear in the links
        for end in (link.a, link.b):
            ends_of.setdefault(end.node, []).append(end)
    marking = any(d.ecn for link in model.links for d in (link.a_to_b, link.b_to_a))
    name_width = max(6, *(len(name) for name in model.nodes))
    for node in model.nodes.values():
        interfaces = ", ".join(f"{end.interface} {end.address or ''}".strip()
                               for end in ends_of.get(node.name, []))
        routes = "; ".join(str(route) for route in node.routes)
        tcp = ", ".join(setting.removeprefix("net.ipv4.") for setting in node.sysctls)
        if marking and node.kind == "host":  # which of them negotiate what queues mark
            tcp = ", ".join(filter(None, (tcp, ECN_SAYS[node.ecn])))
        lines.append(f"  {node.name:<{name_width}} {node.kind:<7} {interfaces}"
                     + (f"   [{routes}]" if routes else "") + (f"   ({tcp})" if tcp else ""))
    lines.append("links (delay is one-way, per direction)")
    for link in model.links:
        ends = " <-> ".join(f"{e.interface}" + (f" {e.address.ip}" if e.address else "")
                            for e in (link.a, link.b))
        if link.a_to_b == link.b_to_a:
            shaping = link.a_to_b.describe()
        else:
            shaping = (f"{link.a.node}->{link.b.node}: {link.a_to_b.describe()}; "
                       f"{link.b.node}->{link.a.node}: {link.b_to_a.describe()}")
        state = "DOWN  " if link.name in record.links_down else ""
        lines.append(f"  {link.name:<6} {ends:<42} {state}{shaping}")
        lines += [f"         {said}" for said in _queue_runners(model, link, record.backend)]
    if model.runs_daemons and record.state == "up":
        model = tables.routed(model)
        lines += routing_lines(record, model)
    done = journal.read(record.lab, STATUS_JOURNAL)
    if done:
        lines.append(f"done while up (the last {STATUS_JOURNAL} at most; the console's "
                     "changes marked)")
        lines += [f"  {entry.line()}" for entry in done]
    return "\n".join(lines + _rtt_table(model))


def _rtt_table(model: topology.Topology) -> list[str]:
    """Every pair of hosts' expected base RTT, in a table of at most RTT_TABLE_HOSTS (one
    of more would be wider than a terminal, and its cells grow with the square)."""
    hosts = model.hosts()
    along = ", along the routes installed now" if model.runs_daemons else ""
    if len(hosts) > RTT_TABLE_HOSTS:
        return [f"expected base RTT between hosts: {len(hosts)} hosts, more than the "
                f"{RTT_TABLE_HOSTS} a table shows (simpleperf lab exec HOST ping ... measures "
                "one pair)"]
    width = max(7, *(len(h) + 1 for h in hosts))  # containerlab's names can be long
    first = max(6, *(len(h) for h in hosts))
    lines = ["expected base RTT between hosts, ms (2 x one-way delays on the path"
             f"{along})", " " * (first + 2) + "".join(f"{h:>{width}}" for h in hosts)]
    for source in hosts:
        cells = []
        for target in hosts:
            if source == target:
                cells.append(f"{'-':>{width}}")
                continue
            try:
                cells.append(f"{theory.base_rtt(model, source, target) * 1e3:>{width}.1f}")
            except topology.TopologyError:
                cells.append(f"{'none':>{width}}")
        lines.append(f"  {source:<{first}}" + "".join(cells))
    return lines


def routing_lines(record: ownership.LabRecord, model: topology.Topology) -> list[str]:
    """Each router's neighbours (from its daemons) and the routes its kernel forwards by."""
    from .net.routing import daemons

    lines = [f"routing: {model.routing_summary} (FRR; {model.routing.timers.describe()})"]
    for router in model.routers():
        asn = model.nodes[router].asn
        lines.append(f"  {router}" + (f" (AS {asn})" if asn else ""))
        lines += [f"    {line}" for line in daemons.neighbours(record.lab, router, model)]
        for route in model.nodes[router].routes:
            lines.append(f"    route {route}")
    return lines


def _results_command(args: argparse.Namespace) -> int:
    from .results.store import check_readable, find_runs, load_run, run_state
    from .results.tables import compare
    from .run.runner import run_experiment

    if args.command == "run":
        folder = run_experiment(args.experiment, args.quick, Path(args.results), args.shaper,
                                allow_commands=args.allow_commands,
                                congestion=args.congestion)
        flows = [f for step in load_run(folder)["steps"] for f in step["flows"]]
        failed = sum(1 for f in flows if not f["ok"])
        if failed:  # after everything is written: scripts see it in the exit status
            print(f"{failed} of {len(flows)} flows failed (their errors are above and in "
                  "flows.csv)")
            return EXIT_FAILURE
        return EXIT_OK
    if args.command == "results":
        if args.results != DEFAULT_RESULTS or Path(args.results).exists():
            check_readable(Path(args.results))  # a folder named that is not there: say so
        folders = find_runs(Path(args.results))
        if not folders:
            print(f"no runs under {args.results}")
        for folder in folders:
            try:
                run = load_run(folder)
            except ResultsError as error:
                print(f"{folder}  unreadable: {error}")
                continue
            flows = [f for step in run["steps"] for f in step["flows"]]
            failed = sum(1 for f in flows if not f["ok"])
            print(f"{folder}  {run['experiment']}  "
                  f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(run['started']))}  "
                  f"{len(run['steps'])} steps, {len(flows)} flows"
                  + (f", {failed} failed" if failed else "")
                  + (", quick" if run["quick"] else "")
                  + (", interrupted" if run["interrupted"] else "")
                  + RUN_STATES[run_state(run)]
                  + f", shaper {run['shaper']}")
        return EXIT_OK
    runs = [load_run(Path(folder)) for folder in args.runs]  # compare
    print(f"A: {args.runs[0]}\nB: {args.runs[1]}")
    print(compare(*runs))
    return EXIT_OK
