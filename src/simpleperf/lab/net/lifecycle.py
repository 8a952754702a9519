"""Bringing labs up and down, and running commands inside their nodes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from ...transport import compiled
from ..model import topology
from . import build, changes, journal, ownership
from .routing import convergence, daemons, perpacket
from .shaping import delayline
from .shaping.probe import Capabilities, probe
from .system import (
    CommandError,
    await_ready,
    existing_namespaces,
    module_command,
    require_namespace_congestion,
    require_tools,
)

REQUIRED_TOOLS = ("ip", "tc", "iptables-restore", "ethtool", "sysctl", "unshare")
CONVERGENCE_BOUND = 30.0  # seconds for routing daemons to give every host a path to every other
RECONVERGENCE_BOUND = 10.0  # after a change: a cut-off network never converges


# The delay line runs as its own process: `python -m` this module (not imported here, where
# netem labs and every other command have no use for it).
DELAY_LINE_MODULE = "simpleperf.lab.net.shaping.delayline"


class LabError(Exception):
    """A lab operation that cannot go on; the message is one line for the user."""


BUILD = "create network namespaces, links and qdiscs"


def require_root(to: str = BUILD) -> None:
    """`to`: what needs root, as the user asked for it (building, entering a node, ...)."""
    if os.geteuid() != 0:
        raise LabError(f"simpleperf lab needs root privileges to {to}: run it as root "
                       "(e.g. sudo simpleperf lab ...)")


def _probed() -> Capabilities:
    """What the kernel offers, or one LabError line (a missing tool, a failed probe)."""
    try:
        require_tools(*REQUIRED_TOOLS)
        return probe()
    except CommandError as error:
        raise LabError(str(error)) from None


def kernel_report() -> str:
    """What this kernel offers the lab, found by trying it, and the shaper auto picks."""
    require_root(to="try the kernel's qdiscs in a scratch namespace")
    capabilities = _probed()
    lines = [f"kernel {os.uname().release}: what it offers the lab", capabilities.describe(),
             f"  {'compiled delay line reader (own shaper)':<40} "
             f"{compiled.status(delayline.queue_reader)}"]
    try:
        backend, why = capabilities.choose(None)
        lines.append(f"links are shaped with: {backend} ({why})")
    except ValueError as error:
        lines.append(f"links cannot be shaped: {error}")
    return "\n".join(lines)


def rebuild(spec: dict[str, Any]) -> topology.Topology:
    """The topology model of a lab from its record."""
    if "pair" in spec:
        return topology.pair(**spec["pair"])
    return topology.parse(spec["file"])


def model_of(record: ownership.LabRecord) -> topology.Topology:
    """The lab's model as it is now: its topology with the links set while it runs."""
    return changes.current(record, rebuild(record.topology))


def change(name: str | None, wanted: changes.Change, by: str = "command"
           ) -> tuple[float, str]:
    """Make one change to a running lab; the seconds it took and, in a routed lab, what
    routing did after it (converged again, or which hosts are cut off). The lab's journal
    says what was done, and `by` whom (journal.BY)."""
    require_root("change a lab's links and nodes")
    record = find(name)
    base = rebuild(record.topology)
    started, began = time.monotonic(), time.time()
    with ownership.locked(record.lab):
        record = ownership.load(record.lab) or record
        try:
            changes.apply(record, base, wanted)
        except (CommandError, topology.TopologyError) as error:
            raise LabError(str(error)) from None
    took = time.monotonic() - started
    what = f"{'node' if wanted.target in base.nodes else 'link'} {wanted.describe()}"
    journal.note(record.lab, what, by, at=began)
    if not base.runs_daemons:
        return took, ""
    try:
        done = convergence.wait(record.lab, base, RECONVERGENCE_BOUND, set(record.links_down))
    except topology.TopologyError as error:
        said = f"routing: {error}"
    else:
        said = f"routing: converged {done.settled:.2f} s after the change"
        if done.unreachable:
            shown = ", ".join(f"{a}->{b}" for a, b in done.unreachable[:6])
            said += (f"; {len(done.unreachable)} host pairs have no path: {shown}"
                     + (" ..." if len(done.unreachable) > 6 else ""))
    journal.note(record.lab, f"{said} (after {what})", by)
    return took, said


def up(model: topology.Topology, spec: dict[str, Any], shaper: str | None = None,
       persistent: bool = True, say: Callable[[str], None] = print) -> ownership.LabRecord:
    require_root()
    capabilities = _probed()
    try:
        backend, why = capabilities.choose(shaper)
        capabilities.require_queues(build.kernel_queues(model, backend), backend)
    except ValueError as error:
        raise LabError(str(error)) from None
    try:
        plan = build.plan(model, backend)
        if model.runs_daemons:
            daemons.require_frr(model)
        require_namespace_congestion({node.name: node.congestion
                                      for node in model.nodes.values() if node.congestion})
    except (topology.TopologyError, CommandError) as error:
        raise LabError(str(error)) from None
    try:
        with ownership.locked(model.name):
            _clear_the_way(model.name, plan.namespace_names, say)
            record = ownership.new_record(model.name, (backend, why), persistent, spec)
            record.namespaces = {name: None for name in plan.namespace_names}
            record.save()  # before anything exists: a kill from here on leaves a findable trail
            try:
                try:
                    build.create_namespaces(plan)
                finally:  # those it made, even if it failed half-way
                    ownership.record_namespaces_created(record)
                build.execute(plan)
                if plan.delay_queues:
                    _start_delay_lines(record, plan.delay_line_entries(record.created))
                if model.runs_daemons:
                    _start_routing(record, model, say)
                record.complete = True
                record.save()
            except BaseException as error:
                ownership.tear_down(record)
                if isinstance(error, (CommandError, topology.TopologyError)):
                    raise LabError(str(error)) from None
                raise
    except BaseException:
        ownership.lock_path(model.name).unlink(missing_ok=True)  # as down leaves it
        raise
    return record


def _start_routing(record: ownership.LabRecord, model: topology.Topology,
                   say: Callable[[str], None]) -> None:
    started = time.monotonic()
    daemons.start(record, model)
    if model.routing.per_packet:
        perpacket.start(record, model)
    running = time.monotonic() - started
    done = convergence.wait(record.lab, model, CONVERGENCE_BOUND, reachable=True)
    say(f"routing: FRR daemons started on {len(model.routers())} routers in {running:.2f} s; "
        f"converged {done.settled:.2f} s later (every adjacency up, routes unchanged "
        f"for {convergence.QUIET_SECONDS:g} s); timers: {model.routing.timers.describe()}")


def _clear_the_way(lab: str, namespaces: list[str], say: Callable[[str], None]) -> None:
    """Remove remains of killed labs that stand in the way; refuse if a live lab or a
    namespace the lab did not create does."""
    wanted = set(namespaces)
    for record in ownership.all_records():
        names = set(record.namespaces)
        if record.lab != lab and not names & wanted:
            continue
        state = record.state
        if state == "remains":
            cleared = ownership.tear_down(record)
            say(f"cleared what a stopped run of lab {record.lab} left behind "
                f"({len(cleared.removed)} items)")
            for item in cleared.left:
                say(f"left alone: {item}")
            continue
        if record.lab == lab:
            raise LabError(f"lab {lab} is already {state}: simpleperf lab down {lab} first")
        clash = sorted(names & wanted)[0]
        raise LabError(f"namespace {clash} belongs to lab {record.lab}, which is {state}: "
                       f"simpleperf lab down {record.lab} first")
    # Every lab that claimed one of these names is gone now: what still exists is not ours.
    foreign = sorted(wanted & existing_namespaces())
    if foreign:
        raise LabError(f"network namespace {foreign[0]} already exists and was not created by "
                       "simpleperf lab; it is left alone: remove it or rename the node")


def _start_delay_lines(record: ownership.LabRecord, queues: list[dict[str, Any]]) -> None:
    """One delay line per CPU (at most one per queue), the queues dealt out in turn so that
    the two directions of a link land on different ones. Each release runs the kernel's
    forwarding of what it lets go (and the receiver's first processing of it) in the
    releasing process: one process for everything serialises a link's data and its
    acknowledgements on one core."""
    workers = min(len(queues), os.cpu_count() or 1)
    command, environment = module_command(DELAY_LINE_MODULE)
    started = []
    for number in range(1, workers + 1):
        config = ownership.RECORD_DIR / f"{record.lab}.delayline{number}.json"
        config.write_text(json.dumps(queues[number - 1::workers]))
        log_path = ownership.RECORD_DIR / f"{record.lab}.delayline{number}.log"
        with open(log_path, "w") as log:
            daemon = subprocess.Popen([*command, str(config)], stdout=subprocess.PIPE,
                                      stderr=log, stdin=subprocess.DEVNULL,
                                      start_new_session=True, env=environment)
        ownership.add_process(record, daemon.pid, f"delay line {number}")
        started.append((daemon, log_path))
    for daemon, log_path in started:
        await_ready(daemon, log_path, "the delay line")


def find(name: str | None) -> ownership.LabRecord:
    records = ownership.all_records()
    if name is not None:
        for record in records:
            if record.lab == name:
                return record
        raise LabError(f"no lab named {name} is up" + (
            f" (labs: {', '.join(r.lab for r in records)})" if records else ""))
    if not records:
        raise LabError("no lab is up (simpleperf lab up portfolio)")
    if len(records) > 1:
        raise LabError("several labs are up, name one: " + ", ".join(r.lab for r in records))
    return records[0]


def down(name: str | None) -> ownership.TearDown:
    require_root("remove a lab's namespaces and processes")
    record = find(name)
    with ownership.locked(record.lab):
        result = ownership.tear_down(record)
    ownership.lock_path(record.lab).unlink(missing_ok=True)
    return result


def run_in_node(node: str, command: list[str]) -> int:
    """Run a command inside a lab node, as `ip netns exec` would, recorded while it runs."""
    require_root("run commands inside a lab node's network namespace")
    if not command:
        raise LabError("nothing to run: simpleperf lab exec NODE -- COMMAND ...")
    for record in ownership.all_records():
        if node in record.namespaces and record.state == "up":
            break
    else:
        raise LabError(f"no lab that is up has a node named {node}")
    if command[0] == daemons.VTYSH and daemons.folder(record.lab, node).is_dir():
        command = daemons.vtysh_command(record.lab, node, *command[1:])
    return run_recorded(record, ["ip", "netns", "exec", node, *command],
                        f"exec in {node}: {' '.join(command)[:60]}")


def run_recorded(record: ownership.LabRecord, command: list[str], what: str,
                 stdout: Any = None) -> int:
    """Run a command in the foreground, recorded in the lab's record while it runs (so
    `lab down` ends it), and return its exit status. Ctrl-C reaches it too; its own exit
    status is what counts."""
    try:
        child = subprocess.Popen(command, stdout=stdout)
    except OSError as error:
        raise LabError(f"cannot run {command[0]}: {error.strerror}") from None
    with ownership.locked(record.lab):
        record = ownership.load(record.lab) or record
        ownership.add_process(record, child.pid, what)
    try:
        while True:
            try:
                return child.wait()
            except KeyboardInterrupt:
                # A terminal's Ctrl-C reached the child too; a SIGINT sent to this process
                # alone did not: pass it on, and report the child's own exit status.
                with suppress(ProcessLookupError):
                    child.send_signal(signal.SIGINT)
    finally:
        with ownership.locked(record.lab):
            current = ownership.load(record.lab)
            if current is not None:
                ownership.remove_process(current, child.pid)
