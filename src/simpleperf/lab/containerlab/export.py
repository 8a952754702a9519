"""A topology as a containerlab topology (NAME.clab.yml and the files it binds), or as a
clabernetes Topology resource with ConfigMaps holding those files.

Every node is a `linux` node. A router that runs routing daemons takes FRR's image, with the
`daemons` and `frr.conf` the lab's own daemons would run (net/routing/config.py writes both,
interface names changed to the container's). Hosts, switches and routers without daemons
take a general image and are configured by `exec` lines: addresses and routes with `ip`, a
switch as a Linux bridge, and each link's shaping with `tc`, as the lab's stages would build
it (net/stages.py): a direction's rate and queue at the sending interface's egress; its delay,
jitter and loss on an ifb behind the receiving interface's ingress. Each host runs a
simpleperf server, from a zip of this package bound into it (the measurement core needs
nothing beyond Python's standard library).

Containerlab's interfaces are eth1, eth2, ... in each node (eth0 is its management network);
a link's name goes in its `vars`.
"""

from __future__ import annotations

import base64
import io
import itertools
import re
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..model.topology import Link, Node, Topology, TopologyError
from ..net import build, stages
from ..net.routing import config

ROUTER_IMAGE = "quay.io/frrouting/frr:8.4.1"  # the FRR release the lab is tested with
# A general image with ip and tc (iproute2), a bridge and Python 3.10 or later.
HOST_IMAGE = "nicolaka/netshoot:v0.13"
ARCHIVE = "simpleperf.pyz"  # this package as a zip application, bound into every host
ARCHIVE_PATH = f"/opt/{ARCHIVE}"
SERVER = f"python3 {ARCHIVE_PATH} -s -D"  # a simpleperf server in the background
LINK_NAME_VAR = "simpleperf-link"  # the link's name, in containerlab's link vars
CLABERNETES_API = "clabernetes.containerlab.dev/v1alpha1"
CLABERNETES_DIR = "/clabernetes"  # where its launcher keeps the topology and its files
KNOWN_SUFFIXES = (".clab.yml", ".clab.yaml")


@dataclass(frozen=True)
class Images:
    router: str = ROUTER_IMAGE
    host: str = HOST_IMAGE


def interface_names(topology: Topology) -> dict[tuple[str, str], str]:
    """(node, the lab's interface name) -> the container's: a name the topology gave is
    kept (but eth0, the container's management interface); the lab's own (NODE-ethN) are
    eth1, eth2, ... in link order, past those kept."""
    names: dict[tuple[str, str], str] = {}
    for node in topology.nodes:
        ends = [end.interface for end, _ in topology.endpoints_of(node)]
        own = re.compile(re.escape(node) + r"-eth[0-9]+")
        kept = {name for name in ends if not own.fullmatch(name) and name != "eth0"}
        free = (f"eth{n}" for n in itertools.count(1) if f"eth{n}" not in kept)
        for name in ends:
            names[(node, name)] = name if name in kept else next(free)
    return names


def rename_interfaces(text: str, names: dict[str, str]) -> str:
    """Every whole-word interface name of `names` in a configuration, renamed."""
    if not names:
        return text
    pattern = re.compile(r"(?<![\w./-])(" + "|".join(
        re.escape(name) for name in sorted(names, key=len, reverse=True)) + r")(?![\w./-])")
    return pattern.sub(lambda match: names[match.group(1)], text)


def containerlab(topology: Topology, images: Images = Images()) -> dict[str, str | bytes]:
    """The files of a containerlab lab, by path relative to its folder."""
    names = interface_names(topology)
    inside = _renamed(topology, names)
    files: dict[str, str | bytes] = {}
    nodes = {name: _node(inside, node, images, files)
             for name, node in inside.nodes.items()}
    links = [{"endpoints": [f"{link.a.node}:{link.a.interface}",
                            f"{link.b.node}:{link.b.interface}"],
              "vars": {LINK_NAME_VAR: link.name}} for link in inside.links]
    document = {"name": topology.name, "topology": {"nodes": nodes, "links": links}}
    header = (f"# {topology.name}: {topology.description or 'a simpleperf lab'}\n"
              "# Written by `simpleperf lab export`; links are shaped by the tc lines in "
              "each node's exec.\n")
    files[f"{topology.name}.clab.yml"] = header + _yaml(document)
    if any(node.kind == "host" for node in topology.nodes.values()):
        files[ARCHIVE] = server_archive()
    return files


def clabernetes(topology: Topology, images: Images = Images()) -> dict[str, str | bytes]:
    """One file of Kubernetes resources: a ConfigMap per node with bound files, and the
    Topology that holds the containerlab topology and mounts them where its binds look."""
    files = containerlab(topology, images)
    definition = files.pop(f"{topology.name}.clab.yml")
    assert isinstance(definition, str)
    documents: list[dict[str, Any]] = []
    mounts: dict[str, list[dict[str, str]]] = {}
    by_node: dict[str, dict[str, str | bytes]] = {}
    for path, content in files.items():
        node = path.split("/")[0] if "/" in path else ""
        by_node.setdefault(node, {})[path] = content
    shared = f"{topology.name}-{ARCHIVE.replace('.', '-')}"
    if ARCHIVE in files:  # one copy of the tool, mounted in every host
        documents.append(_config_map(shared, {ARCHIVE: files[ARCHIVE]}))
    for node in topology.nodes:
        wanted = by_node.get(node, {})
        if wanted:
            config_map = f"{topology.name}-{node}-files"
            documents.append(_config_map(config_map, wanted))
            mounts[node] = [{"configMapName": config_map, "configMapPath": _key(path),
                             "filePath": f"{CLABERNETES_DIR}/{path}"} for path in wanted]
        if topology.nodes[node].kind == "host" and ARCHIVE in files:
            mounts.setdefault(node, []).append(
                {"configMapName": shared, "configMapPath": ARCHIVE,
                 "filePath": f"{CLABERNETES_DIR}/{ARCHIVE}"})
    documents.append({
        "apiVersion": CLABERNETES_API, "kind": "Topology",
        "metadata": {"name": topology.name},
        "spec": {"naming": "prefixed", "definition": {"containerlab": definition},
                 "deployment": {"filesFromConfigMap": mounts}}})
    return {f"{topology.name}.clabernetes.yaml": "---\n".join(_yaml(d) for d in documents)}


def write(files: dict[str, str | bytes], folder: Path) -> None:
    """The files, by their paths relative to `folder` (made if missing). OSError."""
    for relative, content in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def _config_map(name: str, files: dict[str, str | bytes]) -> dict[str, Any]:
    text = {_key(p): c for p, c in files.items() if isinstance(c, str)}
    binary = {_key(p): _base64(c) for p, c in files.items() if isinstance(c, bytes)}
    config_map: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": name}}
    if text:
        config_map["data"] = text
    if binary:
        config_map["binaryData"] = binary
    return config_map


def _key(path: str) -> str:
    """A ConfigMap key for a file (keys may not hold '/')."""
    return path.replace("/", ".")


def _base64(content: bytes) -> str:
    return base64.b64encode(content).decode()


def _yaml(document: dict[str, Any]) -> str:
    import yaml

    class Literal(yaml.SafeDumper):  # multi-line text (configurations) as | blocks
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Literal.add_representer(str, text)
    return yaml.dump(document, Dumper=Literal, sort_keys=False, default_flow_style=False,
                     width=100)


def _renamed(topology: Topology, names: dict[tuple[str, str], str]) -> Topology:
    """The topology with the containers' interface names (its routers' fragments too)."""
    def end(e):
        return replace(e, interface=names[(e.node, e.interface)])

    links = tuple(replace(link, a=end(link.a), b=end(link.b)) for link in topology.links)
    nodes = {name: replace(node, frr=rename_interfaces(node.frr, {
        lab: inside for (owner, lab), inside in names.items() if owner == name}))
        for name, node in topology.nodes.items()}
    return replace(topology, links=links, nodes=nodes)


def _node(topology: Topology, node: Node, images: Images,
          files: dict[str, str | bytes]) -> dict[str, Any]:
    frr = node.kind == "router" and topology.runs_daemons
    spec: dict[str, Any] = {"kind": "linux", "image": images.router if frr else images.host}
    sysctls = dict(_setting(line) for line in node.sysctls)
    if node.kind == "router":
        sysctls["net.ipv4.ip_forward"] = "1"
    if frr:
        sysctls.update(_setting(line) for line in build.ROUTING_SYSCTLS)
        files[f"{node.name}/daemons"] = config.daemons_file(topology, node.name)
        files[f"{node.name}/frr.conf"] = config.integrated(topology, node.name)
        spec["binds"] = [f"{node.name}/daemons:/etc/frr/daemons",
                         f"{node.name}/frr.conf:/etc/frr/frr.conf"]
    if node.kind == "host":
        spec["binds"] = [f"{ARCHIVE}:{ARCHIVE_PATH}:ro"]
    if sysctls:
        spec["sysctls"] = sysctls
    lines = _addressing(topology, node, frr) + _shaping(topology, node.name)
    if node.kind == "host":
        lines.append(SERVER)
    if lines:
        spec["exec"] = lines
    return spec


def _setting(line: str) -> tuple[str, str]:
    """'net.ipv4.ip_forward=1' as containerlab's sysctls take it."""
    key, _, value = line.partition("=")
    return key, value


def _addressing(topology: Topology, node: Node, frr: bool) -> list[str]:
    """A switch's bridge; a host's (or a router without daemons') addresses and routes."""
    ends = [end for end, _ in topology.endpoints_of(node.name)]
    if node.kind == "switch":
        return [f"ip link add {node.name} type bridge stp_state 0",
                f"ip link set {node.name} up",
                *(line for end in ends for line in (f"ip link set {end.interface} master "
                                                    f"{node.name}",
                                                    f"ip link set {end.interface} up"))]
    if frr:  # zebra sets the addresses and staticd the routes, from frr.conf
        return [f"ip link set {end.interface} up" for end in ends]
    lines = []
    for end in ends:
        lines += [f"ip link set {end.interface} up",
                  f"ip addr add {end.address} dev {end.interface}"]
    lines += [f"ip route add {route}" for route in node.routes]
    return lines


def _shaping(topology: Topology, node: str) -> list[str]:
    """tc lines for the node's side of each shaped link: the rate and queue of what it
    sends, the delay, jitter and loss of what it receives."""
    lines: list[str] = []
    for end, link in topology.endpoints_of(node):
        _exportable(link)
        sent = link.direction_from(node)
        received = link.direction_from(link.other(node).node)
        lines += [f"tc {stage.command('add')}" for stage in stages.egress(end.interface, sent)]
        ifb = f"ifb{end.interface[3:]}"
        ip_lines, tc_lines = stages.ingress_redirect(end.interface, ifb,
                                                     stages.receiver_stage(ifb, received))
        lines += [f"ip {line}" for line in ip_lines] + [f"tc {line}" for line in tc_lines]
    return lines


def _exportable(link: Link) -> None:
    for shaping in (link.a_to_b, link.b_to_a):
        if shaping.trace is not None:
            raise TopologyError(f"link {link.name}: it follows trace "
                                f"{Path(shaping.trace).stem}, which only the lab's own shaper "
                                "can; containerlab's nodes have the kernel's tc: give the link "
                                "a bw to export it")


def server_archive() -> bytes:
    """The measurement tool as a zip application (`python3 simpleperf.pyz -s`): this
    package's Python files without the lab, nothing compiled; it runs on any Python 3.10
    or later."""
    package = Path(__file__).parents[2]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("__main__.py", "import sys\nfrom simpleperf.__main__ import main\n"
                                        "sys.exit(main())\n")
        for path in sorted(package.rglob("*")):
            inner = path.relative_to(package)
            if path.is_file() and path.suffix == ".py" and inner.parts[0] != "lab":
                # A fixed time: the same package gives the same archive.
                info = zipfile.ZipInfo(str(Path("simpleperf") / inner),
                                       (2020, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, path.read_bytes())
    return buffer.getvalue()
