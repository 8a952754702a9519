"""FRR's daemons, one set per router namespace, started by `lab up` and recorded like every
other process the lab starts.

Each router's daemons keep their configuration, sockets, pid files and logs in a folder of
their own under the lab's record directory (recorded, so it goes with the lab), and run in
the foreground under FRR's own user, so that the record holds the very process ids that
`lab down` (or the next `lab up` after a SIGKILL) stops.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from ...model.topology import Topology
from .. import ownership
from ..system import CommandError
from . import config

# Debian and Ubuntu keep FRR's daemons here (Fedora: /usr/libexec/frr, set this variable).
FRR_PROGRAMS = Path(os.environ.get("SIMPLEPERF_FRR_DIR", "/usr/lib/frr"))
FRR_USER = "frr"  # Debian's frr package runs its daemons as this user
VTYSH = "vtysh"
# For every daemon of every router to open its sockets: a bound, not a wait (here they take
# well under a second; in the emulated netem guest, with every router starting at once on
# one emulated CPU, bgpd once took over 10 s).
START_SECONDS = 60.0
POLL_SECONDS = 0.02
LOG_LINE = re.compile(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d")  # FRR's log lines begin so


def folder(lab: str, router: str) -> Path:
    """Where a router's daemons keep their files; vtysh finds their sockets here."""
    return ownership.RECORD_DIR / f"{lab}.frr" / router


def events_log(lab: str, router: str, daemon: str) -> Path:
    """A daemon's log of what it says at level informational and above."""
    return folder(lab, router) / f"{daemon}.events.log"


def require_frr(topology: Topology) -> None:
    """One line naming what is missing, before anything is created."""
    needed = {d for r in topology.routers() for d in config.daemons(topology, r)}
    missing = sorted(d for d in needed if not (FRR_PROGRAMS / d).is_file())
    if missing or shutil.which(VTYSH) is None:
        raise CommandError(f"routing = '{topology.routing.protocol}' needs FRRouting's "
                           f"{', '.join(missing) or VTYSH} (Debian: apt-get install frr)")
    try:
        pwd.getpwnam(FRR_USER)
    except KeyError:
        raise CommandError(f"FRRouting's user '{FRR_USER}' does not exist (Debian: apt-get "
                           "install frr)") from None
    for router in topology.routers():
        if topology.nodes[router].frr:
            _check_fragment(router, topology.nodes[router].frr)


def _check_fragment(router: str, fragment: str) -> None:
    """vtysh's own dry run of a raw fragment (every line, wherever `exit` leaves the
    configuration: applied to running daemons a line after the last `exit` would be
    silently ignored), before anything is built: the first bad line, named."""
    with tempfile.NamedTemporaryFile("w", suffix=".conf") as text:
        text.write(fragment)
        text.flush()
        done = subprocess.run([VTYSH, "--dryrun", "-f", text.name], capture_output=True,
                              text=True, timeout=START_SECONDS)
    if done.returncode != 0:
        said = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        detail = said[0].strip() if said else f"vtysh exited with {done.returncode}"
        raise CommandError(f"node {router}: its frr fragment was refused: {detail}")


def start(record: ownership.LabRecord, topology: Topology) -> None:
    """Write every router's configuration, start zebra everywhere, then the protocol
    daemons (they connect to zebra), then apply the raw fragments with vtysh."""
    base = ownership.RECORD_DIR / f"{record.lab}.frr"
    ownership.add_folder(record, base)
    user = pwd.getpwnam(FRR_USER)
    routers = topology.routers()
    for router in routers:
        place = folder(record.lab, router)
        place.mkdir(parents=True, exist_ok=True)
        for daemon, text in config.configs(topology, router).items():
            # what the console's timeline reads (log.py), stamped to the microsecond (the
            # command line's log is not)
            (place / f"{daemon}.conf").write_text(
                text + f"log file {events_log(record.lab, router, daemon)} informational\n")
        if topology.nodes[router].frr:
            (place / "fragment.conf").write_text(topology.nodes[router].frr)
    for path in [base, *base.rglob("*")]:
        os.chown(path, user.pw_uid, user.pw_gid)
    started = [_start(record, router, "zebra") for router in routers]
    _wait_for_sockets(started)
    others = [_start(record, router, daemon) for router in routers
              for daemon in config.daemons(topology, router)[1:]]
    _wait_for_sockets(others)
    for router in routers:
        if topology.nodes[router].frr:
            _apply_fragment(record.lab, router)


def _start(record: ownership.LabRecord, router: str, daemon: str
           ) -> tuple[subprocess.Popen, Path, str]:
    place = folder(record.lab, router)
    command = [str(FRR_PROGRAMS / daemon), "-f", str(place / f"{daemon}.conf"),
               "-i", str(place / f"{daemon}.pid"), "-z", str(place / "zserv.api"),
               "--vty_socket", str(place), "-P", "0", "--log", f"file:{place}/{daemon}.log"]
    if daemon == "bfdd":
        command += ["--bfdctl", str(place / "bfdd.sock")]
    with open(place / f"{daemon}.out", "w") as output:
        process = ownership.start_recorded(record, router, command, f"{daemon} on {router}",
                                           stdout=output, stderr=subprocess.STDOUT)
    return process, place / f"{daemon}.vty", f"{daemon} on {router}"


def _wait_for_sockets(started: list[tuple[subprocess.Popen, Path, str]]) -> None:
    """Until every daemon listens on its vty socket (it has read its configuration); one
    line naming the first that died or did not get there."""
    deadline = time.monotonic() + START_SECONDS
    waiting = list(started)
    while waiting:
        for process, socket, what in list(waiting):
            if socket.exists():
                refused = _refused_lines(socket)
                if refused:  # our configuration is wrong: never run half-configured
                    raise CommandError(f"{what} refused a line of its configuration: "
                                       f"{refused[0][:200]}")
                waiting.remove((process, socket, what))
            elif process.poll() is not None:
                raise CommandError(f"{what} stopped at start: {_last_words(socket)}")
        if waiting and time.monotonic() > deadline:
            raise CommandError(f"{waiting[0][2]} did not start within {START_SECONDS:g} s: "
                               f"{_last_words(waiting[0][1])}")
        time.sleep(POLL_SECONDS)


def _refused_lines(socket: Path) -> list[str]:
    """What a daemon printed about its configuration file: it reads the file before it
    listens, and prints each line it refuses, without the timestamp its log lines carry."""
    try:
        text = socket.with_name(f"{socket.stem}.out").read_text(errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines()
            if line.strip() and not LOG_LINE.match(line)]


def _last_words(socket: Path) -> str:
    """The last line a daemon wrote (its .out or its log), for an error message."""
    daemon = socket.stem
    for path in (socket.with_name(f"{daemon}.out"), socket.with_name(f"{daemon}.log")):
        try:
            lines = path.read_text(errors="replace").strip().splitlines()
        except OSError:
            continue
        if lines:
            return lines[-1][-200:]
    return "it wrote nothing"


def vtysh_command(lab: str, router: str, *arguments: str) -> list[str]:
    """vtysh talking to one router's daemons (their sockets are in the router's folder)."""
    return [VTYSH, "--vty_socket", str(folder(lab, router)), *arguments]


def _apply_fragment(lab: str, router: str) -> None:
    done = subprocess.run(vtysh_command(lab, router, "-f",
                                        str(folder(lab, router) / "fragment.conf")),
                          capture_output=True, text=True, timeout=START_SECONDS)
    problems = [line for line in (done.stdout + done.stderr).splitlines()
                if "%" in line or "rror" in line]
    if done.returncode != 0 or problems:
        detail = problems[0] if problems else f"vtysh exited with {done.returncode}"
        raise CommandError(f"node {router}: its frr fragment was refused: {detail.strip()}")


def show(lab: str, router: str, command: str) -> str:
    """A vtysh `show` command's output for one router ('' if its daemons do not answer)."""
    try:
        done = subprocess.run(vtysh_command(lab, router, "-c", command), capture_output=True,
                              text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode == 0 else ""


def neighbours(lab: str, router: str, topology: Topology) -> list[str]:
    """What the router's daemons say of their neighbours, a line each: protocol, address,
    state (Full and Established are up)."""
    lines = []
    if "ospfd" in config.daemons(topology, router):
        found = _json(show(lab, router, "show ip ospf neighbor json")).get("neighbors", {})
        for router_id, entries in sorted(found.items()):
            for entry in entries if isinstance(entries, list) else [entries]:
                lines.append(f"ospf {entry.get('ifaceAddress', '?')} (router {router_id}) "
                             f"{entry.get('converged') or entry.get('nbrState', '?')} on "
                             f"{str(entry.get('ifaceName', '?')).split(':')[0]}")
    if "bgpd" in config.daemons(topology, router):
        summary = _json(show(lab, router, "show bgp ipv4 unicast summary json"))
        for address, peer in sorted(summary.get("peers", {}).items()):
            lines.append(f"bgp {address} AS {peer.get('remoteAs', '?')} "
                         f"{peer.get('state', '?')}, {peer.get('pfxRcd', 0)} prefixes received")
    return lines


def adjacencies(lab: str, router: str, topology: Topology) -> dict[str, int]:
    """Adjacencies that are up: OSPF neighbours Full per interface, and 'bgp ADDRESS': 1
    for each BGP session Established."""
    up: dict[str, int] = {}
    daemons = config.daemons(topology, router)
    if "ospfd" in daemons:
        found = _json(show(lab, router, "show ip ospf neighbor json")).get("neighbors", {})
        for entries in found.values():
            for entry in entries if isinstance(entries, list) else [entries]:
                if entry.get("converged") == "Full" or str(entry.get("nbrState", "")
                                                          ).startswith("Full"):
                    interface = str(entry.get("ifaceName", "")).split(":")[0]
                    up[interface] = up.get(interface, 0) + 1
    if "bgpd" in daemons:
        summary = _json(show(lab, router, "show bgp ipv4 unicast summary json"))
        for address, peer in summary.get("peers", {}).items():
            if peer.get("state") == "Established":
                up[f"bgp {address}"] = 1
    return up


def _json(text: str) -> dict:
    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
