"""A containerlab topology of `linux` nodes (and `bridge` and `host` ones) read into the
lab's own, so that `lab up` builds it in namespaces without Docker. Node and interface names
are kept as the file writes them: `lab exec PC1`, and a node's scripts and FRR name `eth1`.

A node binding FRR's `frr.conf` (and `daemons`) is a router: its interfaces' addresses come
from the configuration and the rest of it runs as the router's raw FRR configuration, on the
lab's own daemons. A node that sets `net.ipv4.ip_forward` is a router without daemons; one
whose exec makes a bridge is a switch; any other node is a host. `exec` lines are read as the
lab's own commands: `ip` addresses, routes and bridges, `tc` shaping as the lab's stages
write it (net/stages.py reads it back), `sysctl -w`, and a simpleperf server (the lab starts
its own where it needs one). Anything else is one line naming node and line, and nothing is
built. The result is a topology file's table, checked by the same code as any topology's.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..model import datafiles, routing
from ..model.link_properties import to_file
from ..model.topology import (
    LAB_NAME,
    NODE_NAME,
    NODE_NAME_RULE,
    Topology,
    TopologyError,
    from_dict,
)
from ..net import build, stages
from .export import LINK_NAME_VAR

MAX_YAML_BYTES = 1 << 20
# Values a document may hold once its aliases are followed: a 587-byte file of nested
# aliases (a billion-item list) took lab up to gigabytes before this bound.
MAX_YAML_VALUES = 100_000
STRINGS = "a list of strings"
# The type of each field the lab reads, checked before any is converted (a wrong one is a
# line naming node and field, not a traceback); others are containerlab's own, not read.
NODE_FIELDS: dict[str, type | str] = {"kind": str, "group": str, "sysctls": dict,
                                      "binds": STRINGS, "exec": STRINGS}
LINK_FIELDS: dict[str, type | str] = {"endpoints": list, "vars": dict, "ipv4": STRINGS,
                                      "ipv6": STRINGS, "type": str}
FRR_CONFIG = "/etc/frr/frr.conf"
FRR_DAEMONS_FILE = "/etc/frr/daemons"
LAB_DAEMONS = ("zebra", "staticd", "ospfd", "bgpd", "bfdd")  # net/routing/config.daemons
# Lines of an frr.conf that the lab sets itself for every router (its name, logging,
# forwarding) and that running daemons would not take from vtysh.
GLOBAL_LINES = re.compile(r"(frr version|frr defaults|hostname|log |service |no ipv6 forwarding"
                          r"|ipv6 forwarding|ip forwarding|no ip forwarding|line vty|end$)")
# What the lab can run of an FRR configuration's sections.
UNSUPPORTED_SECTIONS = re.compile(r"(router (?!ospf\b|bgp\b)\S+|mpls ldp|router ospf6)")
SETTINGS = {"net.ipv4.tcp_ecn": "ecn", "net.ipv4.tcp_congestion_control": "congestion"}
ROUTING_SETTINGS = {line.split("=")[0] for line in build.ROUTING_SYSCTLS}
FORWARDING = "net.ipv4.ip_forward"
SHELL_OPERATORS = set(";&|<>()")
# containerlab's node kinds the lab builds, as the lab's: a bridge (on containerlab's host)
# is a switch here, containerlab's host a host namespace
CONTAINERLAB_KINDS = {"linux": "host", "bridge": "switch", "host": "host"}
# Long-form links of these types join two nodes; the others reach past one machine
INSIDE_LINK_TYPES = ("veth",)
SERVER_LINE = re.compile(r"(python3 \S*simpleperf\S*|simpleperf) -s( .*)?")


@dataclass
class _Node:
    """What one containerlab node says, as the lab reads it."""

    name: str  # the lab's name for it
    kind: str = "host"
    addresses: dict[str, str] = field(default_factory=dict)  # interface: address
    routes: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)  # ecn, congestion
    frr: str = ""
    egress: dict[str, list[tuple[str, list[str]]]] = field(default_factory=dict)
    classes: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # device: an
    # htb tree's classes, by classid (DiffServ classes)
    leaves: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # device: the
    # qdiscs under those classes, by their parent class
    ingress: dict[str, str] = field(default_factory=dict)  # interface: its ifb
    netem: dict[str, dict[str, Any]] = field(default_factory=dict)  # device: what it does


def is_containerlab(path: str) -> bool:
    return path.endswith((".clab.yml", ".clab.yaml"))


def load(path: str) -> tuple[Topology, list[str]]:
    """The topology a containerlab file describes, and notes on what was left out."""
    import yaml

    source = Path(path)
    data = datafiles.read_bounded(source, MAX_YAML_BYTES, TopologyError)
    if len(data) > MAX_YAML_BYTES:
        raise TopologyError(f"{path} is larger than {MAX_YAML_BYTES >> 20} MB")
    try:
        document = yaml.safe_load(data.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        where = getattr(error, "problem_mark", None)
        at = f" (line {where.line + 1})" if where is not None else ""
        raise TopologyError(f"{path} is not YAML{at}: "
                            f"{str(getattr(error, 'problem', error)).strip()}") from None
    _within_bounds(document)
    notes: list[str] = []
    table = to_table(document, source.parent, notes)
    import tomli_w

    return from_dict(table, source=tomli_w.dumps(table)), notes


def _within_bounds(document: Any) -> None:
    """Refuse a document whose values, aliases followed, are more than MAX_YAML_VALUES
    (an alias bomb: PyYAML shares what an alias names, the lab's reading would not)."""
    seen, pending = 0, [document]
    while pending:
        value = pending.pop()
        seen += 1
        if seen > MAX_YAML_VALUES:
            raise TopologyError(f"the file holds more than {MAX_YAML_VALUES} values once its "
                                "aliases are followed: not a topology the lab reads")
        if isinstance(value, dict):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)


def _typed(where: str, spec: dict[str, Any], fields: dict[str, type | str]) -> None:
    """Each field the lab reads of `spec` of its type, else one line naming it."""
    for key, wanted in fields.items():
        value = spec.get(key)
        if value is None:
            continue
        if wanted == STRINGS and isinstance(value, list):
            for number, item in enumerate(value, 1):
                if not isinstance(item, (str, int, float)) or isinstance(item, bool):
                    hint = (" (YAML reads a line that holds ': ' as a mapping: quote it)"
                            if isinstance(item, dict) else "")
                    raise TopologyError(f"{where}: {key} must be {STRINGS}; its item "
                                        f"{number} is {_kind(item)}{hint}")
        elif isinstance(wanted, str) or not isinstance(value, wanted):  # str: STRINGS
            name = wanted if isinstance(wanted, str) else _WORDS[wanted]
            raise TopologyError(f"{where}: {key} must be {name}, not {_kind(value)}")


# A YAML value's type in words, for a refusal
_WORDS: dict[type, str] = {dict: "a mapping", list: "a list", str: "a string",
                           bool: "true or false", int: "a number", float: "a number"}


def _kind(value: object) -> str:
    """A YAML value's kind in words, for a refusal."""
    if value is None:
        return "empty"
    return _WORDS.get(type(value), type(value).__name__)


def to_table(document: Any, folder: Path, notes: list[str]) -> dict[str, Any]:
    """A containerlab topology (parsed YAML) as a topology file's table; bound files are
    read from `folder`."""
    if not isinstance(document, dict) or not isinstance(document.get("topology"), dict):
        raise TopologyError("a containerlab file needs name: and topology: with nodes: and "
                            "links:")
    lab = _lab_name(document.get("name"))
    topology = document["topology"]
    raw_nodes = topology.get("nodes")
    if not isinstance(raw_nodes, dict) or not raw_nodes:
        raise TopologyError("topology.nodes must name at least one node")
    names = _node_names(raw_nodes)
    nodes = {clab: _read_node(clab, names[clab], _merged(topology, clab, raw_nodes[clab]),
                              folder, notes) for clab in raw_nodes}
    links = _links(topology.get("links"), nodes)
    table: dict[str, Any] = {"name": lab, "description": f"containerlab topology "
                             f"{document.get('name')}, as the lab builds it"}
    for kind, plural in (("host", "hosts"), ("router", "routers"), ("switch", "switches")):
        chosen = {node.name: _node_table(node) for node in nodes.values() if node.kind == kind}
        if chosen:
            table[plural] = chosen
    table["links"] = links
    return _with_fragments(table, nodes)


def _lab_name(value: Any) -> str:
    name = str(value or "").lower()
    if not LAB_NAME.fullmatch(name):
        raise TopologyError(f"name: {value!r}: the lab needs 1-10 lowercase letters, digits "
                            "or '-', starting with a letter")
    return name


def _node_names(raw_nodes: dict[str, Any]) -> dict[str, str]:
    """containerlab's node names, kept as written: each becomes a namespace (and a switch's
    bridge), which carry such names; one that cannot is one line."""
    names: dict[str, str] = {}
    for clab in raw_nodes:
        name = str(clab)
        if not NODE_NAME.fullmatch(name):
            raise TopologyError(f"node {clab}: the lab keeps a node's name as its namespace's,"
                                f" which takes {NODE_NAME_RULE}: rename it in the file")
        names[clab] = name
    return names


def _merged(topology: dict[str, Any], clab: str, spec: Any) -> dict[str, Any]:
    """A node's settings as containerlab resolves them: the node's own over its group's
    over its kind's over the defaults."""
    spec = spec or {}
    if not isinstance(spec, dict):
        raise TopologyError(f"node {clab}: must be a mapping")
    _typed(f"node {clab}", spec, NODE_FIELDS)
    groups, kinds = _layers(topology, "groups"), _layers(topology, "kinds")
    group = groups.get(str(spec.get("group"))) or {}
    defaults = topology.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise TopologyError("topology.defaults must be a mapping")
    _typed("topology.defaults", defaults, NODE_FIELDS)
    kind = spec.get("kind") or group.get("kind") or defaults.get("kind")
    merged: dict[str, Any] = {}
    for layer in (defaults, kinds.get(str(kind)) or {}, group, spec):
        merged.update(layer)
    merged["kind"] = kind
    return merged


def _layers(topology: dict[str, Any], key: str) -> dict[str, dict[str, Any]]:
    """topology.groups or topology.kinds: settings by name, each checked."""
    layers = topology.get(key) or {}
    if not isinstance(layers, dict) or not all(isinstance(v, dict) or v is None
                                               for v in layers.values()):
        raise TopologyError(f"topology.{key} must map names to settings")
    for name, layer in layers.items():
        _typed(f"topology.{key}.{name}", layer or {}, NODE_FIELDS)
    return {str(name): layer or {} for name, layer in layers.items()}


def _read_node(clab: str, name: str, spec: dict[str, Any], folder: Path,
               notes: list[str]) -> _Node:
    kind = spec["kind"]
    if kind not in CONTAINERLAB_KINDS:
        raise TopologyError(f"node {clab}: kind {kind!r}; the lab builds linux, bridge and "
                            "host nodes (namespaces) only")
    node = _Node(name, kind=CONTAINERLAB_KINDS[kind])
    if kind == "host":
        notes.append(f"node {clab}: kind host (containerlab's own host) is a namespace of its "
                     "own here: the lab never changes this machine's own network")
    if kind == "bridge":
        return node  # a bridge the lab makes, its ports the links' ends
    for key, value in (spec.get("sysctls") or {}).items():
        _setting(node, clab, str(key), str(value))
    config, daemons = _bound_frr(clab, spec.get("binds") or [], folder)
    if config is not None:
        node.kind = "router"
        node.frr = _router_config(clab, config, node)
        if daemons is not None:
            _note_daemons(clab, daemons, notes)
    for line in spec.get("exec") or []:
        _exec_line(node, clab, str(line))
    return node


def _setting(node: _Node, clab: str, key: str, value: str) -> None:
    if key == FORWARDING:
        if value == "1" and node.kind == "host":
            node.kind = "router"
    elif key in SETTINGS:
        if key == "net.ipv4.tcp_ecn":
            if value in ("0", "1"):
                node.settings["ecn"] = value == "1"
        else:
            node.settings["congestion"] = value
    elif key not in ROUTING_SETTINGS:
        raise TopologyError(f"node {clab}: sysctl {key} is not one the lab sets (ip_forward, "
                            "tcp_ecn, tcp_congestion_control)")


def _bound_frr(clab: str, binds: list[Any], folder: Path
               ) -> tuple[str | None, str | None]:
    """The frr.conf and daemons file a node binds (each file, or the folder /etc/frr),
    read (None: not bound; a daemons file that is not there is left out). Only regular
    files inside the topology's folder (symbolic links followed) are read; a refusal names
    the bind, never what the file holds."""
    found: dict[str, str] = {}
    inside = folder.resolve()
    for bind in binds:
        parts = str(bind).split(":")
        if len(parts) < 2:
            continue
        source, destination = folder / parts[0], parts[1].rstrip("/")
        if destination in ("/etc/frr", FRR_CONFIG, FRR_DAEMONS_FILE) and \
                not source.resolve().is_relative_to(inside):
            raise TopologyError(f"node {clab}: bind '{bind}' reaches outside the topology's "
                                "folder: the lab reads bound files only from inside it")
        if destination == "/etc/frr":
            wanted = {FRR_CONFIG: source / "frr.conf", FRR_DAEMONS_FILE: source / "daemons"}
        elif destination in (FRR_CONFIG, FRR_DAEMONS_FILE):
            wanted = {destination: source}
        else:
            continue
        for target, path in wanted.items():
            if target == FRR_DAEMONS_FILE and not path.exists():
                continue
            if not path.resolve().is_relative_to(inside):
                raise TopologyError(f"node {clab}: bind '{bind}': {path.name} reaches outside "
                                    "the topology's folder: the lab reads bound files only "
                                    "from inside it")
            text = datafiles.read_bounded(path, routing.MAX_FRAGMENT * 4, TopologyError)
            found[target] = text.decode("utf-8", errors="replace")
    return found.get(FRR_CONFIG), found.get(FRR_DAEMONS_FILE)


def _router_config(clab: str, text: str, node: _Node) -> str:
    """An frr.conf as the router's raw configuration: its interfaces' addresses taken out
    (the lab gives them), the lines the lab sets itself left out."""
    kept: list[str] = []
    interface: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if UNSUPPORTED_SECTIONS.match(stripped):  # named by its line: never its text
            raise TopologyError(f"node {clab}: frr.conf line {number} configures a daemon "
                                f"the lab does not run (it runs {', '.join(LAB_DAEMONS)})")
        if not line.startswith((" ", "\t")):
            interface = stripped.split()[1] if stripped.startswith("interface ") and \
                len(stripped.split()) > 1 else None
        if interface not in (None, "lo") and stripped.startswith("ip address ") \
                and interface not in node.addresses:
            node.addresses[interface] = stripped.split()[2]
            continue
        if GLOBAL_LINES.match(stripped) or stripped == "!":
            continue
        kept.append(line)
    return "\n".join(kept).strip() + "\n"


def _note_daemons(clab: str, text: str, notes: list[str]) -> None:
    enabled = [match.group(1) for match in re.finditer(r"(?m)^(\w+)=yes\b", text)]
    left = [d for d in enabled if d not in LAB_DAEMONS and d != "vtysh_enable"]
    if left:
        notes.append(f"node {clab}: its daemons file enables {', '.join(left)}, which the "
                     "lab does not run (nothing in its frr.conf needs it): not started")


def _exec_line(node: _Node, clab: str, line: str) -> None:
    try:
        words = shlex.split(line)
        operators = [w for w in shlex.shlex(line, posix=True, punctuation_chars=True)
                     if w and all(c in SHELL_OPERATORS for c in w)]
    except ValueError:
        words, operators = [], []
    if operators:  # a second command, a redirection: nothing of it may pass unread
        raise TopologyError(f"node {clab}: exec line '{line}' has '{operators[0]}': the lab "
                            "reads one command a line, with no shell operators")
    if _ip_line(node, words) or _tc_line(node, clab, words, line):
        return
    if words[:2] == ["sysctl", "-w"] and len(words) == 3 and "=" in words[2]:
        _setting(node, clab, *words[2].split("=", 1))
        return
    if SERVER_LINE.fullmatch(line.strip()):
        return  # the lab starts servers where its experiments need them
    raise TopologyError(f"node {clab}: exec line '{line}' is not one the lab understands "
                        "(ip addresses, routes and bridges; tc; sysctl -w; a simpleperf "
                        "server)")


def _ip_line(node: _Node, words: list[str]) -> bool:
    """An `ip` line of a form the lab reads, every word of it (more is not one)."""
    if words[:1] != ["ip"] or len(words) < 4:
        return False
    verb = words[1:3]
    if verb in (["addr", "add"], ["address", "add"], ["a", "add"]) and len(words) == 6 \
            and words[4] == "dev":
        node.addresses[words[5]] = words[3]
        return True
    if verb in (["route", "add"], ["route", "replace"], ["r", "add"]) and words[4:5] == \
            ["via"] and (len(words) == 6 or (len(words) == 8 and words[6] == "dev")):
        node.routes.append(f"{words[3]} via {words[5]}")
        return True
    if verb == ["link", "add"] and words[4:6] == ["type", "bridge"] and (
            words[6:] == [] or (words[6] == "stp_state" and words[7:] in (["0"], ["1"]))):
        node.kind = "switch"
        return True
    if verb == ["link", "add"] and words[4:] == ["type", "ifb"]:
        return True
    return verb == ["link", "set"] and (words[4:] == ["up"] or (
        len(words) == 6 and words[4] == "master"))


def _tc_line(node: _Node, clab: str, words: list[str], line: str) -> bool:
    if words[:1] != ["tc"]:
        return False
    try:
        _read_tc(node, words[1:])
    except (ValueError, IndexError) as error:
        raise TopologyError(f"node {clab}: exec line '{line}': {error}") from None
    return True


def _read_tc(node: _Node, words: list[str]) -> None:
    """One `tc` line, as the lab's stages write them."""
    what, verb, device = words[0], words[1], words[3]
    if verb not in ("add", "replace") or words[2] != "dev":
        raise ValueError("the lab reads 'tc qdisc|class|filter add dev DEVICE ...'")
    rest = words[4:]
    if what == "qdisc":
        if rest[:3] == ["handle", "ffff:", "ingress"]:
            return
        parent = "root" if rest[0] == "root" else rest[1]
        rest = rest[1:] if rest[0] == "root" else rest[2:]
        if rest[:1] == ["handle"]:
            rest = rest[2:]
        kind, options = rest[0], rest[1:]
        if kind == "netem":  # on an ifb behind an ingress, or on the egress itself
            node.netem[device] = stages.read_netem(options)
        elif kind == "htb":
            node.classes.setdefault(device, {})
        elif device in node.classes:
            node.leaves.setdefault(device, {})[parent] = options
        else:
            stages.read_qdisc(kind, options)  # what it cannot read, named at its line
            node.egress.setdefault(device, []).append((kind, options))
    elif what == "class":
        node.classes.setdefault(device, {})[rest[rest.index("classid") + 1]] = rest
    elif what == "filter":
        if "redirect" in rest:
            node.ingress[device] = rest[rest.index("dev") + 1]
        elif "flowid" not in rest:
            raise ValueError("a filter the lab does not build (it redirects an ingress to "
                             "an ifb, or sends DSCPs to classes)")
    else:
        raise ValueError(f"tc {what} is not one the lab builds")


def _direction(sender: _Node, out: str, receiver: _Node, into: str) -> dict[str, Any]:
    """One direction's shaping: the sender's egress stages, the receiver's ingress netem."""
    values: dict[str, Any] = {}
    if out in sender.classes:
        values.update(stages.read_class_tree(sender.classes[out], sender.leaves.get(out, {})))
    for kind, options in sender.egress.get(out, []):
        values.update(stages.read_qdisc(kind, options))
    values.update(sender.netem.get(out, {}))
    ifb = receiver.ingress.get(into)
    if ifb is not None:
        values.update(receiver.netem.get(ifb, {}))
    return values


def _ends(index: int, spec: Any) -> tuple[tuple[str, str], tuple[str, str]]:
    """A link's two ends (node, interface) as containerlab writes them: brief
    (endpoints: ["node:interface", ...]) or long (type: veth, endpoints: [{node:,
    interface:}, ...]); a link that reaches past the lab is one line."""
    kind = spec.get("type", "veth") if isinstance(spec, dict) else None
    if kind is not None and kind not in INSIDE_LINK_TYPES:
        raise TopologyError(f"link {index}: type {kind} reaches past the lab (it joins two "
                            "nodes: veth)")
    ends = spec.get("endpoints") if isinstance(spec, dict) else None
    found: list[tuple[str, str]] = []
    for end in ends if isinstance(ends, list) and len(ends) == 2 else []:
        if isinstance(end, str) and end.count(":") == 1:
            node, interface = end.split(":")
        elif isinstance(end, dict) and isinstance(end.get("node"), str) and \
                isinstance(end.get("interface"), str):
            node, interface = end["node"], end["interface"]
        else:
            break
        found.append((node, interface))
    if len(found) != 2:
        raise TopologyError(f"link {index}: the lab reads links as endpoints: "
                            "[\"node:interface\", \"node:interface\"] between two nodes (or "
                            "their long form: node: and interface: each)")
    return found[0], found[1]


def _links(raw: Any, nodes: dict[str, _Node]) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw:
        raise TopologyError("topology.links must list at least one link")
    links: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for index, spec in enumerate(raw, start=1):
        if isinstance(spec, dict):
            _typed(f"link {index}", spec, LINK_FIELDS)
        (a, a_if), (b, b_if) = _ends(index, spec)
        for clab in (a, b):
            if clab not in nodes:
                raise TopologyError(f"link {index}: {clab} is not a node of the topology "
                                    "(host:, macvlan: and mgmt-net: links reach past the lab)")
        # both ends' interfaces keep their names: a node's scripts and FRR name them so
        link: dict[str, Any] = {"a": nodes[a].name, "a_interface": a_if,
                                "b": nodes[b].name, "b_interface": b_if}
        named = (spec.get("vars") or {}).get(LINK_NAME_VAR)
        default = f"{nodes[a].name}-{nodes[b].name}"
        seen[default] = seen.get(default, 0) + 1
        if named or seen[default] > 1:
            link["name"] = str(named or f"{default}-{seen[default]}")
        for side, (clab, interface) in (("a", (a, a_if)), ("b", (b, b_if))):
            address = nodes[clab].addresses.get(interface)
            ipv4 = spec.get("ipv4") or []
            address = address or (ipv4[0 if side == "a" else 1] if len(ipv4) == 2 else None)
            if address:
                link[f"{side}_address"] = address
        a_to_b = to_file(_direction(nodes[a], a_if, nodes[b], b_if))
        b_to_a = to_file(_direction(nodes[b], b_if, nodes[a], a_if))
        if a_to_b == b_to_a:
            link.update(a_to_b)
        else:
            link.update({key: value for key, value in (("a_to_b", a_to_b),
                                                       ("b_to_a", b_to_a)) if value})
        links.append(link)
    return links


def _node_table(node: _Node) -> dict[str, Any]:
    table: dict[str, Any] = dict(node.settings)
    if node.routes and node.kind != "switch":
        table["routes"] = node.routes
    return table


def _with_fragments(table: dict[str, Any], nodes: dict[str, _Node]) -> dict[str, Any]:
    """The routers' own FRR configurations, as written: their interfaces keep the names
    they give them."""
    for node in nodes.values():
        if node.frr.strip():
            table["routers"][node.name]["frr"] = node.frr
    return table
