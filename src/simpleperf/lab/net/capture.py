"""Packet captures in a running lab, with Wireshark's capture engine (Debian's dumpcap,
which tshark installs): it writes pcapng, stops by itself at a size, a time or a count, and
is what Wireshark itself runs.

Where a link is captured. A link with shaping runs through the wire namespace (build.py);
there the capture takes what leaves the wire on both ports, after loss, delay and the rate
limit's queue: what the link carried, in the order it left, packets as the wire sends them
(the rate limiter splits aggregates). One capture socket on the namespace's `any` device,
filtered to the link's two ports and to outgoing packets, keeps both directions in time
order (two sockets would be written in batches, and Wireshark's analysis follows file
order). What the link dropped is counted by the link itself, not seen here. A link without
shaping is captured on one end's interface (a host's or router's, not a switch's), both
directions. NODE:IFACE captures one interface of a node, as the node sees it: a sender's
interface shows its 64 KB offload segments, not packets.
"""

from __future__ import annotations

import json
import re
import select
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..model.topology import Topology
from . import build
from .system import run

DUMPCAP = "dumpcap"
# Headers only: Linux cooked v2 (20) + IPv4 with options (60) + TCP with options (60), or
# UDP (8) and simpleperf's 16-byte datagram header.
HEADERS_SNAPLEN = 144
READY_SECONDS = 10.0
STOP_SECONDS = 10.0
_PACKETS = re.compile(r"Packets captured: (\d+)")
_FILTER_REASON = re.compile(r"\(([^()]*(?:syntax|unknown|parse|illegal)[^()]*)\)")
_DROPPED = re.compile(r"received/dropped on interface '[^']*': \d+/(\d+)")


NO_DPKT = "reading captures needs dpkt: pip install 'simpleperf[lab]'"


def require_dpkt() -> None:
    try:
        import dpkt  # noqa: F401 - only asked whether it is there
    except ImportError:
        raise CaptureError(NO_DPKT) from None


class CaptureError(Exception):
    """A capture that cannot be made; one line for the user."""


@dataclass(frozen=True)
class CapturePoint:
    where: str  # as the user named it: "L2", "h1:h1-eth0"
    namespace: str
    interface: str  # "any" with `ports` for a link through the wire
    ports: tuple[str, ...] = ()

    @property
    def describe(self) -> str:
        if self.ports:
            return (f"{self.where}: what the link carried, as it left the wire "
                    f"({' and '.join(self.ports)} in {self.namespace})")
        return f"{self.where}: {self.interface} in {self.namespace}, both directions"

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9_.-]", "_", self.where)


def resolve(model: Topology, where: str) -> CapturePoint:
    """LINK (a link's name), NODE:IFACE, or NODE (a node with one interface)."""
    links = {link.name: link for link in model.links}
    if where in links:
        link = links[where]
        ports = build.wire_ports(model, link)
        if ports is not None:
            return CapturePoint(where, build.wire_namespace(model.name), "any", ports)
        end = link.a if model.nodes[link.a.node].kind != "switch" else link.b
        return CapturePoint(where, end.node, end.interface)
    node, _, interface = where.partition(":")
    if node not in model.nodes:
        raise CaptureError(f"{where!r} is neither a link ({', '.join(links) or 'none'}) nor "
                           f"a node of lab {model.name}")
    names = [end.interface for end, _ in model.endpoints_of(node)]
    if model.nodes[node].kind == "switch":
        names.append(node)  # the bridge itself
    if not interface:
        if len(names) != 1:
            raise CaptureError(f"node {node} has {len(names)} interfaces: name one, e.g. "
                               f"{node}:{names[0]}")
        interface = names[0]
    if interface not in names:
        raise CaptureError(f"node {node} has no interface {interface!r} "
                           f"(it has {', '.join(names)})")
    return CapturePoint(where, node, interface)


def require_dumpcap() -> None:
    if shutil.which(DUMPCAP) is None:
        raise CaptureError("captures need dumpcap (Debian: apt-get install tshark, which "
                           "brings it)")


def capture_filter(point: CapturePoint, user_filter: str | None) -> str | None:
    """The BPF filter: for a wired link, its two ports' outgoing packets, and the user's."""
    parts = []
    if point.ports:
        try:
            links = json.loads(run(["ip", "-n", point.namespace, "-j", "link", "show"]).stdout)
        except ValueError:
            links = []
        indexes = [item["ifindex"] for item in links if item.get("ifname") in point.ports]
        if len(indexes) != len(point.ports):
            raise CaptureError(f"link {point.where}: its ports are missing from "
                               f"{point.namespace} (is the lab up?)")
        parts.append("outbound and (" + " or ".join(f"ifindex {i}" for i in indexes) + ")")
    if user_filter:
        parts.append(f"({user_filter})")
    return " and ".join(parts) or None


def dumpcap_command(point: CapturePoint, output: str, snaplen: int, bpf: str | None,
                    limit_kb: int | None = None, duration: float | None = None,
                    count: int | None = None) -> list[str]:
    """dumpcap's command line, to run inside point.namespace."""
    command = [DUMPCAP, "-q", "-i", point.interface, "-s", str(snaplen), "-w", output]
    if point.ports:
        command += ["-y", "LINUX_SLL2"]  # carries the interface index the filter reads
    if bpf:
        command += ["-f", bpf]
    if limit_kb:
        command += ["-a", f"filesize:{limit_kb}"]
    if duration:
        command += ["-a", f"duration:{max(1, round(duration))}"]
    if count:
        command += ["-c", str(count)]
    return command


def check_filter(point: CapturePoint, bpf: str | None, shown: str | None = None) -> None:
    """Compile the filter where the capture will run: a filter dumpcap rejects is one line
    before anything starts."""
    if not bpf:
        return
    done = subprocess.run(["ip", "netns", "exec", point.namespace, DUMPCAP, "-d", "-i",
                           point.interface, "-f", bpf]
                          + (["-y", "LINUX_SLL2"] if point.ports else []),
                          capture_output=True, text=True)
    # dumpcap -d exits 0 even for a filter it rejects; the compiled code is the proof.
    if done.returncode != 0 or "(000)" not in done.stdout:
        reason = _FILTER_REASON.search(done.stderr)
        raise CaptureError(f"capture filter {shown or bpf!r} is not valid"
                           + (f": {reason.group(1)}" if reason else ""))


@dataclass
class CaptureResult:
    point: CapturePoint
    path: Path
    packets: int | None
    dropped: int | None  # by the capture itself (its buffer overflowed), not by the link
    cut_short: bool  # the size cap ended it before the step did
    error: str | None = None


def wait_ready(process: subprocess.Popen) -> str | None:
    """dumpcap says 'Capturing on ...' once its socket is open: traffic after that is seen.
    None when ready, else why not."""
    assert process.stderr is not None
    lines: list[str] = []
    while True:
        ready, _, _ = select.select([process.stderr], [], [], READY_SECONDS)
        if not ready:
            return "dumpcap did not start capturing within 10 s"
        line = process.stderr.readline()
        if not line:
            return (lines[-1] if lines else f"dumpcap ended (exit status {process.wait()})")
        if line.startswith("Capturing on"):
            return None
        if line.strip():
            lines.append(line.strip())


def end(process: subprocess.Popen) -> str:
    """Stop a dumpcap (SIGINT: it closes its file properly; killed if it has not within
    STOP_SECONDS); what it said on stderr."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        _, stderr = process.communicate(timeout=STOP_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
    return stderr or ""


def summary(stderr: str) -> tuple[int | None, int | None]:
    """Packets captured and dropped by the capture, from dumpcap's closing lines."""
    packets = _PACKETS.search(stderr)
    dropped = [int(m) for m in _DROPPED.findall(stderr)]
    return (int(packets.group(1)) if packets else None), (sum(dropped) if dropped else None)
