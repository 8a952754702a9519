"""What a flow of an experiment is: its kind, as one object each (the fields it takes, how
long it runs, what theory may assume of it), and the validation of a flow's table.

Every kind is a row of KINDS. What a kind does when it runs (its server, its client's
command, how its output is read) belongs to its runner in run/kinds.py; what theory makes
of it follows the attributes here, never the kind's name. Adding a kind is a row here and a
runner there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...command_line.latency_flags import parse_isochronous
from ...description.options import (
    DSCP_RULE,
    MAX_LENGTH,
    MAX_PARALLEL,
    MAX_RATE,
    MAX_UDP_LENGTH,
    MAX_WINDOW,
    MIN_LENGTH,
    MIN_UDP_LENGTH,
    MIN_WINDOW,
    dscp_code,
    is_congestion_name,
)
from ...errors import UsageError
from ...protocol.native import MIN_ISOCHRONOUS_UDP_LENGTH
from ...units import parse_rate, parse_size
from . import datafiles
from .errors import ExperimentError

# What every flow's table takes, with what each says (the file-format reference's source);
# each kind's own fields are FIELDS below.
COMMON_KEYS = {
    "kind": "what runs: `tcp`, `udp`, `ping`, `rpm`, `scp`, `http` or `command` (the flow "
            "kinds' reference)",
    "from": "the node it runs from: its client, the sender unless it measures the other way",
    "to": "the node it runs to: its server",
    "address": "the address it reaches `to` at (default: `to`'s first)",
    "label": "its name in the report (default `FROM-TO`)",
    "duration": "seconds it runs, an application's longest (default: the timing's)",
}
COMMON_FIELDS = frozenset(COMMON_KEYS)
CONTENTS = ("random", "sparse")
# tcp and udp flows: whose server measures (simpleperf's client drives each, reading its
# own JSON: --iperf3 and --iperf2 against iperf3 -s and iperf -s)
TOOLS = ("simpleperf", "iperf3", "iperf2")
# rpm flows: the server of the responsiveness draft's endpoints (nginx set up as Apple's
# reference server), and who measures it: simpleperf's client over HTTP/2 and TLS, its
# native protocol's (a simpleperf server only), or Cloudflare's mach
RPM_SERVERS = ("simpleperf", "nginx")
METERS = ("simpleperf", "native", "mach")
DIRECTIONS = ("download", "upload")
DEFAULT_TRANSFER_SIZE = 10_000_000
MAX_TRANSFER_SIZE = 10 ** 11
MAX_OBJECTS = 1000
MAX_COMMAND = 2000  # characters of a command line
MAX_COUNT = 100_000
APPLICATION_TIMEOUT = 600.0  # seconds an scp, http or command flow may take without duration
# OpenSSH keeps at most 2 MiB unacknowledged per channel (and scp's SFTP transfers 64
# requests of 32 KiB): whatever TCP's window, scp moves at most that per round trip.
SSH_WINDOW_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class Timing:
    duration: float = 25.0
    ping_count: int = 25
    ping_interval: float = 1.0


@dataclass(frozen=True)
class FlowKind:
    """One kind of flow: what its table may hold, how long it runs, what theory assumes."""

    name: str
    fields: frozenset[str]  # what its table may hold besides COMMON_FIELDS
    ends: str = "duration"  # after its duration; "count" (of packets); "exit" (of a program)
    application: bool = False  # a real program's client (and server), timed start to exit
    tcp: bool = False  # its bytes ride TCP connections, which a congestion control drives
    paced: bool = False  # it sends at a rate it is given
    datagrams: bool = False  # UDP: its receiver counts what was lost, reordered, jittered
    loads_path: bool = True  # theory knows what it asks of its path (not ping, a command)
    share_judged: bool = False  # its goodput is judged against its share of a bottleneck
    window_cap: int | None = None  # bytes a connection may have in flight, whatever TCP's
    moves_size: bool = False  # moves `size` bytes (times `objects`) over one connection
    measured: bool = False  # a simpleperf test: intervals over time, both ends' view
    # a transfer: the round trips its program spends before its data flows (the TCP
    # handshake and the program's own: SSH's version, key exchange, keys, service,
    # authentication, channel and scp's header; HTTP's request)
    handshakes: int = 0
    tools: tuple[str, ...] = ()  # the servers its `tool` may name (the first: the default)
    responsiveness: bool = False  # its result is RPM, judged against theory's queues

    def duration(self, flow: Flow, timing: Timing) -> float:
        """Seconds the flow runs (an application: at most this long)."""
        if self.ends == "exit":
            return flow.duration or APPLICATION_TIMEOUT
        if self.ends == "count":
            count = flow.count or timing.ping_count
            return count * (flow.interval or timing.ping_interval) + 2
        return flow.duration or timing.duration

    def bytes_moved(self, flow: Flow) -> int | None:
        """What a transfer moves; None for a flow that measures it itself or moves none."""
        return (flow.size or 0) * flow.objects if self.moves_size else None


KINDS: dict[str, FlowKind] = {kind.name: kind for kind in (
    FlowKind("tcp", frozenset({"parallel", "length", "window", "congestion", "dscp",
                               "rtt_under_load", "tool", "mptcp"}), tcp=True, share_judged=True,
             measured=True, tools=TOOLS),
    FlowKind("udp", frozenset({"rate", "length", "frames", "dscp", "rtt_under_load", "l4s",
                               "tool"}), paced=True, datagrams=True, measured=True, tools=TOOLS),
    FlowKind("ping", frozenset({"count", "interval", "dscp"}), ends="count",
             loads_path=False),
    FlowKind("rpm", frozenset({"meter", "tool", "direction", "congestion"}), tcp=True,
             tools=RPM_SERVERS,
             responsiveness=True),
    FlowKind("scp", frozenset({"size", "content"}), ends="exit", application=True, tcp=True,
             window_cap=SSH_WINDOW_BYTES, moves_size=True, handshakes=8),
    FlowKind("http", frozenset({"size", "content", "objects"}), ends="exit",
             application=True, tcp=True, moves_size=True, handshakes=2),
    FlowKind("command", frozenset({"server", "client"}), ends="exit", application=True,
             loads_path=False),
)}
FLOW_FIELDS = COMMON_FIELDS.union(*(kind.fields for kind in KINDS.values()))


@dataclass(frozen=True)
class Flow:
    kind: str  # a key of KINDS
    source: str
    target: str
    address: str | None  # None: the target node's first address
    label: str
    parallel: int = 1
    duration: float | None = None  # None: the experiment's duration
    # udp: bits/s; "auto": 90 % of the path's bottleneck, from the topology; "probe": the
    # highest rate with loss under 1 %, found by simpleperf --probe without the topology
    rate: float | str | None = None
    length: int | None = None  # udp: datagram payload (default 1470); tcp: write size (-l)
    window: int | None = None  # tcp: socket buffers on both ends (-w), bytes
    congestion: str | None = None  # tcp: the sender's congestion control (-C)
    count: int | None = None  # ping: packets (None: the experiment's ping_count)
    interval: float | None = None  # ping: seconds between packets
    rtt_under_load: bool = False  # tcp/udp: ping alongside the flow
    size: int | None = None  # scp, http: bytes of the file or of each object
    objects: int = 1  # http: objects fetched one after another, like a page load
    content: str = "random"  # scp, http: "random" bytes, or "sparse" (zeros, not stored)
    server: str | None = None  # command: run in the target node, from before the start
    client: str | None = None  # command: run in the source node at the start, timed
    frames: str | None = None  # udp: video frames, iperf2's --isochronous FPS:MEAN,STDEV
    dscp: int | None = None  # tcp, udp, ping: the packets' DSCP code point (0..63)
    l4s: bool = False  # udp: ECT(1), at the rate CE marks set (--l4s); `rate` is a ceiling
    tool: str = "simpleperf"  # tcp, udp: the server, one of TOOLS
    mptcp: bool = False  # tcp: Multipath TCP, a subflow over each path (run/multipath.py)
    meter: str = "simpleperf"  # rpm: who measures, one of METERS
    direction: str = "download"  # rpm: the way the load runs (download: `to` sends)

    @property
    def spec(self) -> FlowKind:
        return KINDS[self.kind]


# ---------------------------------------------------------------- a flow's table


def parse(raw: Any, where: str) -> Flow:
    """A flow from its table in an experiment; every mistake is one ExperimentError."""
    if not isinstance(raw, dict):
        raise ExperimentError(f"{where}: must be a table such as "
                              "{ kind = \"tcp\", from = \"h1\", to = \"h4\" }")
    datafiles.only(raw, set(FLOW_FIELDS), where, ExperimentError)
    name = raw.get("kind")
    kind = KINDS.get(name) if isinstance(name, str) else None
    if kind is None:
        raise ExperimentError(f"{where}: kind must be one of {', '.join(KINDS)}, "
                              f"not {raw.get('kind')!r}")
    for name in raw:
        if name not in COMMON_FIELDS and name not in kind.fields:
            takers = [k.name for k in KINDS.values() if name in k.fields]
            named = ", ".join(takers[:-1]) + " and " + takers[-1] if len(takers) > 1 \
                else takers[0]
            raise ExperimentError(f"{where}: {name} only applies to {named} flows")
    for side in ("from", "to"):
        if not isinstance(raw.get(side), str) or not raw[side]:
            raise ExperimentError(f"{where}: '{side}' must name a node")
    values: dict[str, Any] = {}
    if "duration" in raw:
        values["duration"] = datafiles.seconds(raw["duration"], f"{where}: duration",
                                               ExperimentError)
    for name, (read, _) in FIELDS.items():
        if name in raw:
            values.update(read(raw, kind, name, f"{where}: {name}"))
    values.update(_defaults(raw, kind, where))
    label = datafiles.text(raw.get("label", f"{raw['from']}-{raw['to']}"), f"{where}: label",
                           ExperimentError)
    address = raw.get("address")
    if address is not None and not isinstance(address, str):
        raise ExperimentError(f"{where}: address must be a string")
    return Flow(kind.name, raw["from"], raw["to"], address, label, **values)


def _defaults(raw: dict[str, Any], kind: FlowKind, where: str) -> dict[str, Any]:
    """What a kind needs that its table left out: a paced flow's rate, a transfer's size
    and content; a command's client is not optional."""
    values: dict[str, Any] = {}
    if kind.paced and "rate" not in raw and "frames" not in raw and not raw.get("l4s"):
        values["rate"] = "auto"
    if kind.moves_size:
        if "size" not in raw:
            values["size"] = DEFAULT_TRANSFER_SIZE
        if "content" not in raw:
            values["content"] = "random"
    if "client" in kind.fields and "client" not in raw:
        raise ExperimentError(f"{where}: a command flow needs client = \"...\" (run in "
                              "the source node; {address} is the target's address, "
                              "{port} the flow's port)")
    return values


def _count_of(low: int, high: int) -> Any:
    def read(raw: dict[str, Any], kind: FlowKind, name: str, where: str) -> dict[str, Any]:
        return {name: datafiles.count(raw[name], where, low, high, ExperimentError)}
    return read


def _rate(raw: dict[str, Any], kind: FlowKind, name: str, where: str) -> dict[str, Any]:
    rate = raw["rate"]
    if rate not in ("auto", "probe"):
        try:
            rate = parse_rate(rate) if isinstance(rate, str) else float(rate)
        except (TypeError, ValueError):
            raise ExperimentError(f"{where} = {raw['rate']!r} is not a rate such as '25M', "
                                  "\"auto\" or \"probe\"") from None
        if not 0 < rate <= MAX_RATE:
            raise ExperimentError(f"{where} = {raw['rate']!r} is out of range")
    return {"rate": rate}


def _length(raw: dict[str, Any], kind: FlowKind, name: str, where: str) -> dict[str, Any]:
    low, high = (MIN_UDP_LENGTH, MAX_UDP_LENGTH) if kind.paced else (MIN_LENGTH, MAX_LENGTH)
    return {"length": datafiles.count(raw["length"], where, low, high, ExperimentError)}


def _frames(raw: dict[str, Any], kind: FlowKind, name: str, where: str) -> dict[str, Any]:
    """A udp flow of video frames: its FPS:MEAN,STDEV, and MEAN as the flow's rate."""
    text = raw["frames"]
    flow = where.removesuffix(f": {name}")
    if "rate" in raw:
        raise ExperimentError(f"{flow}: frames applies to udp flows, "
                              "which then take their rate from it (leave out rate)")
    if not isinstance(text, str) or not text:
        raise ExperimentError(f"{where} must be a string such as \"60:20M,2M\"")
    if isinstance(raw.get("length"), int) and raw["length"] < MIN_ISOCHRONOUS_UDP_LENGTH:
        raise ExperimentError(f"{flow}: frames need a length of at least "
                              f"{MIN_ISOCHRONOUS_UDP_LENGTH} bytes")
    try:
        frames = parse_isochronous(text)
    except UsageError as error:
        raise ExperimentError(f"{where} = {text!r}: "
                              f"{str(error).removeprefix('--isochronous')}") from None
    return {"frames": text, "rate": frames["frame_load"]}


def _congestion(raw: dict[str, Any], kind: FlowKind, name: str, where: str) -> dict[str, Any]:
    congestion = raw["congestion"]
    if not is_congestion_name(congestion):
        raise ExperimentError(f"{where} names a tcp flow's congestion control, such as "
                              f"\"cubic\", not {congestion!r}")
    return {"congestion": congestion}


def _dscp(raw: dict[str, Any], kind: FlowKind, name: str, where: str) -> dict[str, Any]:
    """A name (EF, AF41, CS1, ...) or a number, as the tool's --dscp takes it."""
    code = dscp_code(raw["dscp"])
    if code is None:
        raise ExperimentError(f"{where} must be {DSCP_RULE}, not {raw['dscp']!r}")
    return {"dscp": code}


def _window(raw: dict[str, Any], kind: FlowKind, name: str, where: str) -> dict[str, Any]:
    window = raw["window"]
    try:
        size = parse_size(window) if isinstance(window, str) else int(window)
    except (TypeError, ValueError, OverflowError):
        raise ExperimentError(f"{where} = {window!r} is not a size such as '64K'") from None
    if not MIN_WINDOW <= size <= MAX_WINDOW:
        raise ExperimentError(f"{where} = {window!r} is out of range "
                              f"({MIN_WINDOW}..{MAX_WINDOW} bytes)")
    return {"window": size}


def _interval(raw: dict[str, Any], kind: FlowKind, name: str, where: str) -> dict[str, Any]:
    return {"interval": datafiles.seconds(raw["interval"], where, ExperimentError)}


def _rtt_under_load(raw: dict[str, Any], kind: FlowKind, name: str, where: str) -> dict[str, Any]:
    if not isinstance(raw["rtt_under_load"], bool):
        raise ExperimentError(f"{where} is true or false")
    return {"rtt_under_load": raw["rtt_under_load"]}


def _l4s(raw: dict[str, Any], kind: FlowKind, name: str, where: str) -> dict[str, Any]:
    if not isinstance(raw["l4s"], bool):
        raise ExperimentError(f"{where} is true or false")
    flow = where.removesuffix(f": {name}")
    if raw["l4s"] and "frames" in raw:
        raise ExperimentError(f"{flow}: an l4s flow sets its own rate: leave out frames")
    if raw["l4s"] and raw.get("rate") in ("auto", "probe"):
        raise ExperimentError(f"{flow}: an l4s flow sets its own rate from CE marks: its "
                              "rate can only be a ceiling such as '50M'")
    return {"l4s": raw["l4s"]}


def _tool(raw: dict[str, Any], kind: FlowKind, name: str, where: str) -> dict[str, Any]:
    """Whose server the flow measures against; what only a simpleperf server does is
    refused with another."""
    tool = raw["tool"]
    if tool not in kind.tools:
        raise ExperimentError(f"{where} must be one of {', '.join(kind.tools)}, not {tool!r}")
    flow = where.removesuffix(f": {name}")
    needs_ours = [field for field, given in (
        ("frames", "frames" in raw), ("l4s", raw.get("l4s") is True),
        ('rate = "probe"', raw.get("rate") == "probe"),
        ("mptcp", raw.get("mptcp") is True),
        ('meter = "native"', raw.get("meter") == "native")) if given]
    if tool != "simpleperf" and needs_ours:
        raise ExperimentError(f"{flow}: {needs_ours[0]} needs a simpleperf server, not "
                              f"tool = {tool!r}")
    return {"tool": tool}


def _mptcp(raw: dict[str, Any], kind: FlowKind, name: str, where: str) -> dict[str, Any]:
    if not isinstance(raw["mptcp"], bool):
        raise ExperimentError(f"{where} must be true or false")
    return {"mptcp": raw["mptcp"]}


def _one_of(values: tuple[str, ...]) -> Any:
    def read(raw: dict[str, Any], kind: FlowKind, name: str, where: str) -> dict[str, Any]:
        if raw[name] not in values:
            raise ExperimentError(f"{where} must be one of {', '.join(values)}, "
                                  f"not {raw[name]!r}")
        return {name: raw[name]}
    return read


def _size(raw: dict[str, Any], kind: FlowKind, name: str, where: str) -> dict[str, Any]:
    return {"size": datafiles.size(raw["size"], where, 1, MAX_TRANSFER_SIZE, ExperimentError)}


def _content(raw: dict[str, Any], kind: FlowKind, name: str, where: str) -> dict[str, Any]:
    if raw["content"] not in CONTENTS:
        raise ExperimentError(f"{where} must be one of {', '.join(CONTENTS)}, "
                              f"not {raw['content']!r}")
    return {"content": raw["content"]}


def _command(raw: dict[str, Any], kind: FlowKind, name: str, where: str) -> dict[str, Any]:
    command = raw[name]
    if (not isinstance(command, str) or not command.strip() or len(command) > MAX_COMMAND
            or "\x00" in command):
        raise ExperimentError(f"{where} must be a command line of at most {MAX_COMMAND} "
                              "characters")
    return {name: command}


# Each field a kind may take: how it is read, in this order (frames after rate, which it
# refuses), and what it says (the file-format reference's source).
FIELDS: dict[str, tuple[Any, str]] = {
    "parallel": (_count_of(1, MAX_PARALLEL), f"TCP connections at once, 1..{MAX_PARALLEL} (`-P`)"),
    "rate": (_rate, "a UDP flow's rate: `\"25M\"`; `\"auto\"` (the default), 90 % of its "
                    "path's bottleneck; or `\"probe\"`, found by `--probe` before it runs"),
    "frames": (_frames, "UDP video frames, `\"60:20M,2M\"`: frames a second, their mean "
                        "rate and its deviation (iperf2's `--isochronous`)"),
    "length": (_length, "a UDP datagram's bytes, or a TCP write's (`-l`)"),
    "congestion": (_congestion, "the sender's congestion control, e.g. `\"bbr\"` (`-C`)"),
    "window": (_window, "TCP's socket buffers at both ends, e.g. `\"64K\"` (`-w`)"),
    "dscp": (_dscp, "the DSCP its packets carry: `\"EF\"`, `\"AF41\"`, `\"CS1\"` or 0..63"),
    "count": (_count_of(1, MAX_COUNT), "echo requests a ping sends (default: the timing's)"),
    "interval": (_interval, "seconds between them (default: the timing's)"),
    "rtt_under_load": (_rtt_under_load, "`true`: a ping runs beside it, reported with it"),
    "l4s": (_l4s, "`true`: a scalable (L4S) UDP sender, ECT(1), that answers CE marks"),
    "mptcp": (_mptcp, "`true`: Multipath TCP, a subflow over each path that shares no "
                      "link with another"),
    "tool": (_tool, "whose server measures: tcp and udp `\"simpleperf\"` (the default), "
                    "`\"iperf3\"` or `\"iperf2\"`; rpm `\"simpleperf\"` (the default) or "
                    "`\"nginx\"` (set up as Apple's responsiveness server)"),
    "meter": (_one_of(METERS), "who measures an rpm flow: `\"simpleperf\"` (the default: "
                               "`-c URL --rpm`, HTTP/2 and TLS), `\"native\"` (`-c HOST "
                               "--rpm`, a simpleperf server only) or `\"mach\"` "
                               "(Cloudflare's client)"),
    "direction": (_one_of(DIRECTIONS), "the way an rpm flow's load runs: `\"download\"` "
                                       "(the default: `to` sends) or `\"upload\"`"),
    "size": (_size, f"bytes it moves, `\"100M\"` (default {DEFAULT_TRANSFER_SIZE / 1e6:g} MB)"),
    "content": (_content, "what the bytes are: `\"random\"` (the default; no compression "
                          "shrinks them) or `\"sparse\"` (zeros)"),
    "objects": (_count_of(1, MAX_OBJECTS), "HTTP objects fetched one after another over "
                                           "one connection (default 1)"),
    "server": (_command, "a command run in `to` first (`{port}` filled in); with "
                         "`--allow-commands`"),
    "client": (_command, "the command run in `from`, timed to its exit (`{address}` and "
                         "`{port}` filled in)"),
}
