"""Labs past one machine: topologies exported to containerlab and clabernetes (checked with
the jsonschema library against containerlab's own schema and clabernetes' CRD, kept in
../shared/reference as test data), and containerlab topologies brought up by `lab up` in
namespaces without Docker: containerlab's own frr01 example, and our exports round-tripped.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from helpers import SIMPLEPERF, free_port
from jsonschema.validators import validator_for
from lab_helpers import assert_gone, lab, needs_lab, ping_rtts

from simpleperf.lab.containerlab import export, load
from simpleperf.lab.model import theory, topology
from simpleperf.lab.model.errors import TopologyError
from simpleperf.lab.net.routing import tables

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference"
FRR01 = REFERENCE / "containerlab" / "frr01" / "frr01.clab.yml"
SHIPPED = ("campus", "wan", "portfolio", "portfolio-ospf")

# Every queue discipline and impairment the stages write, each direction its own: what the
# containerlab export's tc lines must carry and the import must read back.
VARIED = """
name = "varied"
routing = "ospf"
[hosts]
h1 = { ecn = true, congestion = "reno" }
h2 = {}
h3 = {}
[routers]
r1 = { frr = "interface r1-eth1\\n ip ospf cost 7\\nexit\\n" }
r2 = {}
[switches]
s1 = {}
[[links]]
a = "h1"
a_address = "10.0.1.2/24"
b = "s1"
bw = "50M"
max_queue_size = 40
[[links]]
a = "r1"
a_address = "10.0.1.1/24"
b = "s1"
bw = "80M"
qdisc = "fq_codel"
target = "3ms"
[[links]]
name = "core"
a = "r1"
a_address = "10.0.12.1/30"
b = "r2"
b_address = "10.0.12.2/30"
[links.a_to_b]
bw = "20M"
delay = "5ms"
jitter = "1ms"
loss = 0.5
qdisc = "dualpi2"
step = "2ms"
coupling = 3
any_ect = true
[links.b_to_a]
bw = "30M"
delay = "7ms"
jitter = "2ms"
qdisc = "cake"
interval = "40ms"
max_queue_size = 300
[[links]]
a = "r2"
a_address = "10.0.2.1/24"
b = "h2"
b_address = "10.0.2.2/24"
a_to_b = { bw = "10M", qdisc = "classes", max_queue_size = 60 }
[links.b_to_a]
bw = "12M"
qdisc = "pie"
tupdate = "20ms"
ecn = true
delay = "2ms"
jitter = "1ms"
reorder = true
[[links]]
a = "r2"
a_address = "10.0.3.1/24"
b = "h3"
b_address = "10.0.3.2/24"
bw = "100M"
qdisc = "fq_pie"
flows = 64
quantum = 3000
"""


def _validator(schema: dict):
    # Built without checking the schema itself: containerlab's uses ECMAScript's \p{...}
    # in patterns of fields (IPv6) that Python's re cannot compile and no export uses.
    return validator_for(schema)(schema)


CLAB_SCHEMA = _validator(json.loads((REFERENCE / "containerlab" / "clab.schema.json")
                                    .read_text()))
_CRD = yaml.safe_load((REFERENCE / "clabernetes" / "topologies.crd.yaml").read_text())
TOPOLOGY_SCHEMA = _validator(_CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def exported(model: topology.Topology, folder: Path) -> Path:
    export.write(export.containerlab(model), folder)
    return folder / f"{model.name}.clab.yml"


def errors_of(validator, document) -> list[str]:
    return [error.message for error in validator.iter_errors(document)]


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_topology_exports_as_containerlab_and_clabernetes_accept_it(name):
    model = topology.load(name)
    files = export.containerlab(model)
    document = yaml.safe_load(files[f"{model.name}.clab.yml"])
    assert errors_of(CLAB_SCHEMA, document) == []
    assert set(document["topology"]["nodes"]) == set(model.nodes)
    assert len(document["topology"]["links"]) == len(model.links)
    for router in model.routers():
        if model.runs_daemons:
            assert f"{router}/frr.conf" in files and f"{router}/daemons" in files
    (resources,) = export.clabernetes(model).values()
    documents = list(yaml.safe_load_all(resources))
    wrapped = documents[-1]
    assert errors_of(TOPOLOGY_SCHEMA, wrapped) == []
    assert wrapped["kind"] == "Topology"
    # The definition is the containerlab file, and every file a node binds is mounted
    # from a ConfigMap where its bind looks for it.
    assert yaml.safe_load(wrapped["spec"]["definition"]["containerlab"]) == document
    maps = {d["metadata"]["name"]: d for d in documents if d["kind"] == "ConfigMap"}
    for node, spec in document["topology"]["nodes"].items():
        mounted = {m["filePath"]: m for m in
                   wrapped["spec"]["deployment"]["filesFromConfigMap"].get(node, [])}
        for bind in spec.get("binds", []):
            mount = mounted[f"{export.CLABERNETES_DIR}/{bind.split(':')[0]}"]
            held = maps[mount["configMapName"]]
            assert mount["configMapPath"] in {**held.get("data", {}),
                                              **held.get("binaryData", {})}


def test_the_schemas_refuse_what_containerlab_and_clabernetes_would():
    for field, wrong in (("kind", "no-such-kind"), ("exec", "one string, not a list"),
                         ("binds", [])):
        document = yaml.safe_load(export.containerlab(topology.load("campus"))
                                  ["campus.clab.yml"])
        document["topology"]["nodes"]["h1"][field] = wrong
        assert errors_of(CLAB_SCHEMA, document), field
    for change in ("naming", "connectivity"):
        wrapped = list(yaml.safe_load_all(*export.clabernetes(topology.load("campus")).values()))
        if change == "naming":
            del wrapped[-1]["spec"]["naming"]
        else:
            wrapped[-1]["spec"]["connectivity"] = "carrier-pigeon"
        assert errors_of(TOPOLOGY_SCHEMA, wrapped[-1]), change


@pytest.mark.parametrize("name", [*SHIPPED, "varied"])
def test_export_then_import_gives_back_the_same_topology(name, tmp_path):
    """Links (names, ends, addresses, every shaping property both ways), hosts' routes and
    TCP settings survive the trip through containerlab's file and tc lines."""
    model = topology.parse(VARIED) if name == "varied" else topology.load(name)
    back, notes = load.load(str(exported(model, tmp_path)))
    assert notes == []
    names = export.interface_names(model)  # the containers' names, kept as the file has them

    def contained(end: topology.Endpoint) -> topology.Endpoint:
        return dataclasses.replace(end, interface=names[(end.node, end.interface)])

    assert [(link.name, link.a, link.b, link.a_to_b, link.b_to_a) for link in back.links] == \
        [(link.name, contained(link.a), contained(link.b), link.a_to_b, link.b_to_a)
         for link in model.links]
    for node in model.nodes.values():
        again = back.nodes[node.name]
        assert (again.kind, again.ecn, again.congestion) == (node.kind, node.ecn,
                                                             node.congestion)
        if node.kind == "host":
            assert again.routes == node.routes
    if model.runs_daemons:  # the routers run the configuration the lab's own would
        assert all(back.nodes[r].frr for r in model.routers())
        assert "ip ospf cost 7" in back.nodes["r1"].frr if name == "varied" else True


def test_exported_frr_configurations_are_ones_frr_accepts(tmp_path):
    for name in ("campus", "wan"):
        for relative, content in export.containerlab(topology.load(name)).items():
            if relative.endswith("frr.conf"):
                (tmp_path / "frr.conf").write_text(content)
                done = subprocess.run(["vtysh", "--dryrun", "-f", str(tmp_path / "frr.conf")],
                                      capture_output=True, text=True, timeout=60)
                assert done.returncode == 0, (name, relative, done.stdout, done.stderr)
    daemons = export.containerlab(topology.load("wan"))["r1/daemons"]
    assert "bgpd=yes" in daemons and "ospfd=yes" in daemons and "isisd=no" in daemons


def test_a_link_that_follows_a_trace_is_refused_in_one_line():
    model = topology.pair(trace="lte-walk")
    with pytest.raises(TopologyError, match=r"^link h1-h2: it follows trace lte-walk.*give "
                                            r"the link a bw"):
        export.containerlab(model)


@pytest.mark.loopback
def test_the_exported_server_archive_serves_a_test_with_only_python(tmp_path):
    archive = tmp_path / export.ARCHIVE
    archive.write_bytes(export.server_archive())
    port = free_port()
    # -I: no site packages, so nothing but the archive and the standard library.
    server = subprocess.Popen([sys.executable, "-I", str(archive), "-s", "-p", str(port),
                               "-1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = 50
        while deadline and "listening" not in (server.stdout.readline() if server.stdout
                                                 else ""):
            deadline -= 1
        done = subprocess.run(SIMPLEPERF + ["-c", "127.0.0.1", "-p", str(port), "-t", "1",
                                            "-J"], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["end"]["sum_received"]["bytes"] > 0
        assert server.wait(timeout=10) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


BAD = {
    "kind": ("kind: nokia_srlinux\n", r"node n1: kind 'nokia_srlinux'; the lab builds linux"),
    "exec": ("exec: [\"curl http://example.com\"]\n",
             r"node n1: exec line 'curl http://example.com' is not one the lab understands"),
    "netem": ("exec: [\"tc qdisc add dev eth1 root handle 1: netem delay 5ms duplicate 1%\"]\n",
              r"netem's 'duplicate' is not a setting the lab models"),
    "bind": ("binds: [\"nowhere/frr.conf:/etc/frr/frr.conf\"]\n",
             r"cannot read .*nowhere/frr.conf"),
    "sysctl": ("sysctls: {kernel.panic: 1}\n", r"node n1: sysctl kernel.panic is not one"),
    # wrong types: one line naming node and field, not a traceback
    "kind-list": ("kind: [linux]\n", r"node n1: kind must be a string, not a list"),
    "group-list": ("group: [g]\n", r"node n1: group must be a string, not a list"),
    "sysctls-list": ("sysctls: [1, 2]\n", r"node n1: sysctls must be a mapping, not a list"),
    "binds-int": ("binds: 5\n", r"node n1: binds must be a list of strings, not a number"),
    "exec-int": ("exec: 5\n", r"node n1: exec must be a list of strings, not a number"),
    # a tc line left unquoted: YAML reads "handle 1: tbf ..." as a mapping
    "exec-mapping": ("exec: [ip link set eth1 up, tc qdisc add dev eth1 root handle 1: tbf]\n",
                     r"node n1: exec must be a list of strings; its item 2 is a mapping "
                     r"\(YAML reads a line that holds ': ' as a mapping: quote it\)"),
    # binds read only regular files inside the topology's folder, and never quote them
    "bind-outside": ("binds: [\"/etc/passwd:/etc/frr/frr.conf\"]\n",
                     r"node n1: bind '/etc/passwd:/etc/frr/frr.conf' reaches outside"),
    "bind-up": ("binds: [\"../outside/frr.conf:/etc/frr/frr.conf\"]\n", r"reaches outside"),
    "bind-link": ("binds: [\"linked.conf:/etc/frr/frr.conf\"]\n", r"reaches outside"),
    "bind-folder-link": ("binds: [\"etc:/etc/frr\"]\n", r"frr.conf reaches outside"),
    "bind-fifo": ("binds: [\"fifo.conf:/etc/frr/frr.conf\"]\n", r"not a regular file"),
    "bind-folder": ("binds: [\"sub:/etc/frr/frr.conf\"]\n", r"not a regular file"),
    "frr-daemon": ("binds: [\"isis.conf:/etc/frr/frr.conf\"]\n",
                   r"frr.conf line 2 configures a daemon the lab does not run"),
}
# an exec line whose tail would be ignored: refused, never half read
for number, (line, operator) in enumerate((
        ("ip addr add 10.0.0.1/24 dev eth1; touch /tmp/owned", ";"),
        ("ip link set eth1 up && touch /tmp/owned", "&&"),
        ("simpleperf -s > /tmp/owned", ">"),
        ("sysctl -w net.ipv4.tcp_ecn=1 | tee /tmp/owned", "|")), start=1):
    BAD[f"exec-operator-{number}"] = (f"exec: [\"{line}\"]\n",
                                      rf"exec line '.*' has '\{operator[0]}")
BAD["exec-extra-word"] = ("exec: [\"ip addr add 10.0.0.1/24 dev eth1 extra\"]\n",
                          r"exec line 'ip addr add 10.0.0.1/24 dev eth1 extra' is not one")
LINK_BAD = {
    "vars": ("vars: [1]", r"link 1: vars must be a mapping, not a list"),
    "ipv4": ("ipv4: 5", r"link 1: ipv4 must be a list of strings, not a number"),
}
SECRET = "root:$6$s3cret-hash:19000:0:99999:7:::"


def _hostile_folder(tmp_path: Path) -> Path:
    """The topology's folder, beside one outside it holding a file that must not leak."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "frr.conf").write_text(SECRET + "\n")
    folder = tmp_path / "lab"
    folder.mkdir()
    (folder / "linked.conf").symlink_to(outside / "frr.conf")
    (folder / "etc").mkdir()
    (folder / "etc" / "frr.conf").symlink_to(outside / "frr.conf")
    (folder / "sub").mkdir()
    os.mkfifo(folder / "fifo.conf")
    (folder / "isis.conf").write_text("hostname r1\nrouter isis " + SECRET + "\n")
    return folder


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_containerlab_file_the_lab_cannot_build_is_one_line(case, tmp_path):
    spec, said = BAD[case]
    body = "".join(f"      {line}\n" for line in spec.splitlines())
    text = ("name: bad\ntopology:\n  nodes:\n    n1:\n      kind: linux\n" + body.replace(
        "      kind: linux\n", "") + "    n2:\n      kind: linux\n  links:\n"
        "    - endpoints: [\"n1:eth1\", \"n2:eth1\"]\n")
    if case.startswith("kind"):
        text = text.replace("      kind: linux\n      kind:", "      kind:")
    path = _hostile_folder(tmp_path) / "bad.clab.yml"
    path.write_text(text)
    with pytest.raises(TopologyError, match=said) as refused:
        load.load(str(path))
    assert "\n" not in str(refused.value) and "s3cret" not in str(refused.value)


KINDS_AND_LONG_LINKS = """name: kinds
topology:
  nodes:
    Client-1:
      kind: linux
      exec: ["ip addr add 10.0.0.1/24 dev e1-1"]
    Server_2:
      kind: host
      exec: ["ip addr add 10.0.0.2/24 dev eth9"]
    br-clab:
      kind: bridge
  links:
    - type: veth
      endpoints:
        - node: Client-1
          interface: e1-1
        - node: br-clab
          interface: port1
    - endpoints: ["Server_2:eth9", "br-clab:port2"]
"""


def test_names_are_kept_and_bridge_host_kinds_and_long_form_links_are_read(tmp_path):
    """containerlab's names as written (PC1 was pc1, eth1 was pc1-eth0), its bridge kind
    (a switch here), its host kind (a host namespace, said in a note) and its long-form
    links (type: veth, endpoints of node: and interface:)."""
    path = tmp_path / "kinds.clab.yml"
    path.write_text(KINDS_AND_LONG_LINKS)
    model, notes = load.load(str(path))
    assert {name: node.kind for name, node in model.nodes.items()} == {
        "Client-1": "host", "Server_2": "host", "br-clab": "switch"}
    assert [(e.node, e.interface, str(e.address)) for link in model.links
            for e in (link.a, link.b)] == [("Client-1", "e1-1", "10.0.0.1/24"),
                                           ("br-clab", "port1", "None"),
                                           ("Server_2", "eth9", "10.0.0.2/24"),
                                           ("br-clab", "port2", "None")]
    assert any("kind host" in note and "Server_2" in note for note in notes)
    for line, said in (("    - type: macvlan\n      endpoint: {node: Client-1, interface: e1}"
                        "\n      host-interface: eno1\n",
                        "link 3: type macvlan reaches past the lab"),
                       ('    - endpoints: ["Client-1:e1-2", "host:veth9"]\n',
                        "link 3: host is not a node")):
        path.write_text(KINDS_AND_LONG_LINKS + line)
        with pytest.raises(TopologyError, match=said):
            load.load(str(path))
    path.write_text(KINDS_AND_LONG_LINKS.replace("Client-1", "Client 1"))
    with pytest.raises(TopologyError, match="node Client 1: the lab keeps a node's name as "
                                            "its namespace's, which takes 1-15 letters"):
        load.load(str(path))


@pytest.mark.parametrize("case", sorted(LINK_BAD))
def test_a_link_field_of_the_wrong_type_is_one_line(case, tmp_path):
    field, said = LINK_BAD[case]
    path = tmp_path / "bad.clab.yml"
    path.write_text("name: bad\ntopology:\n  nodes:\n    n1: {kind: linux}\n"
                    "    n2: {kind: linux}\n  links:\n"
                    f"    - endpoints: [\"n1:eth1\", \"n2:eth1\"]\n      {field}\n")
    with pytest.raises(TopologyError, match=said):
        load.load(str(path))


@pytest.mark.parametrize("where", ["exec: *i", "binds: *i", "sysctls: {a: *i}"])
def test_an_alias_bomb_is_refused_before_it_grows(where, tmp_path):
    """587 bytes of nine nested aliases: a billion strings once followed (lab up took
    1.24 GB and grew); refused within the bound, in one line."""
    lines = ["name: bomb", 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
    lines += ["topology:", "  nodes:", f"    n1: {{kind: linux, {where}}}",
              "    n2: {kind: linux}", "  links:", "    - endpoints: [\"n1:eth1\", \"n2:eth1\"]"]
    path = tmp_path / "bomb.clab.yml"
    path.write_text("\n".join(lines) + "\n")
    began = time.monotonic()
    with pytest.raises(TopologyError, match=r"more than 100000 values once its aliases"):
        load.load(str(path))
    assert time.monotonic() - began < 5


def test_broken_yaml_and_links_past_the_lab_are_one_line(tmp_path):
    path = tmp_path / "bad.clab.yml"
    path.write_text("name: bad\ntopology: [unclosed\n")
    with pytest.raises(TopologyError, match=r"is not YAML \(line \d+\)"):
        load.load(str(path))
    path.write_text("name: bad\ntopology:\n  nodes:\n    n1: {kind: linux}\n  links:\n"
                    "    - endpoints: [\"n1:eth1\", \"host:veth9\"]\n")
    with pytest.raises(TopologyError, match=r"link 1: host is not a node .*reach past"):
        load.load(str(path))


# ---------------------------------------------------------------- in namespaces


@needs_lab[0]
@needs_lab[1]
def test_containerlabs_frr01_comes_up_converges_and_every_pc_reaches_every_other():
    done = lab("up", str(FRR01), timeout=120)
    try:
        assert "routing: FRR daemons started on 3 routers" in done.stdout, done.stdout
        assert "ldpd" in done.stdout  # enabled in its daemons file, said not to run
        for router in ("router1", "router2", "router3"):
            shown = lab("exec", router, "--", "vtysh", "-c", "show ip ospf neighbor").stdout
            assert shown.count("Full/") == 2, (router, shown)
        pcs = {"PC1": "192.168.11.2", "PC2": "192.168.12.2", "PC3": "192.168.13.2"}
        for source in pcs:
            for target, address in pcs.items():
                if source != target:
                    assert ping_rtts(source, address, 2), (source, target)
        # Names as the file writes them: the node PC1 (it was pc1), its eth1 (it was
        # pc1-eth0), the routers' eth3 that their own configuration names.
        shown = lab("exec", "PC1", "--", "ip", "-br", "addr", "show", "eth1").stdout
        assert "192.168.11.2/24" in shown, shown
        assert "PC1" in lab("status").stdout
        # Its OSPF runs the example's own configuration: passive towards the PCs.
        passive = lab("exec", "router1", "--", "vtysh", "-c", "show ip ospf interface "
                      "eth3").stdout
        assert "No Hellos (Passive interface)" in passive, passive
        capture = lab("capture", "PC1:eth1", "--duration", "1", "-w",
                      str(Path(tempfile.gettempdir()) / "frr01-pc1.pcapng"), timeout=30)
        assert capture.returncode == 0, capture.stderr
    finally:
        lab("down", "frr01")
    assert_gone({"PC1", "PC2", "PC3", "router1", "router2", "router3"})


def _measured(spec: str, model: topology.Topology, pairs: list[tuple[str, str]]) -> dict:
    """Paths along the installed routes, their theory, and ping's median RTT, per pair."""
    lab("up", spec, timeout=120)
    try:
        nodes = [n.name for n in model.nodes.values() if n.kind != "switch"]
        routed = tables.installed(model, tables.read(nodes))
        found = {}
        for source, target in pairs:
            path = theory.path(routed, source, target)
            address = str(model.address_of(target))
            rtts = ping_rtts(source, address, 10, interval=0.02)
            assert rtts, (spec, source, target)
            found[(source, target)] = ([(link.name, node) for link, node in path.hops],
                                       path.one_way_delay, statistics.median(rtts))
        return found
    finally:
        lab("down", model.name)


@needs_lab[0]
@needs_lab[1]
def test_campus_exported_and_brought_up_again_has_the_same_paths_rtts_and_theory(tmp_path):
    model = topology.load("campus")
    pairs = [("h1", "h4"), ("h2", "h5"), ("h5", "h3")]
    original = _measured("campus", model, pairs)
    path = exported(model, tmp_path)
    back, _ = load.load(str(path))
    again = _measured(str(path), back, pairs)
    for pair in pairs:
        hops, one_way, rtt = original[pair]
        hops_again, one_way_again, rtt_again = again[pair]
        assert hops_again == hops, pair
        assert one_way_again == one_way, pair
        assert abs(rtt_again - rtt) < 1.0, (pair, rtt, rtt_again)
        assert 2 * one_way * 1e3 <= rtt_again, (pair, one_way, rtt_again)  # the delays apply
