"""Changing a running lab: links and nodes down and up, a link's shaping set anew.

As on real equipment, a link that goes down loses its carrier at both ends: the routers see
their interface go down at once (OSPF and BGP react without waiting for a dead timer), the
kernel stops using routes through it. A link through the wire namespace goes down at the
wire's ports, so the nodes' own interfaces, addresses and routes stay as they were; a plain
veth pair goes down at both ends, and its nodes' static routes are put back when it comes
up. Every change is kept in the lab's record, so `lab status` and theory see the lab as it
is now.
"""

from __future__ import annotations

import json
import os
import signal
from contextlib import suppress
from dataclasses import dataclass, replace
from typing import Any

from ..model import link_properties, topology
from ..model.topology import Link, Shaping, Topology
from . import build, ownership, stages
from .shaping.probe import probe
from .system import CommandError, run


class ChangeError(CommandError):
    """A change the lab cannot make; one line for the user."""


@dataclass(frozen=True)
class Change:
    """One change to a running lab, as `lab link`, `lab node` and experiment events say it:
    `target` is a link's or a node's name; action is down, up or set (with `shaping`)."""

    target: str
    action: str
    shaping: dict[str, Any] | None = None  # Mininet's link fields: bw, delay, jitter, loss

    def describe(self) -> str:
        if self.action != "set":
            return f"{self.target} {self.action}"
        fields = ", ".join(f"{k} {v}" for k, v in (self.shaping or {}).items())
        return f"{self.target} set {fields}"


def current(record: ownership.LabRecord, model: Topology) -> Topology:
    """The model with the record's shaping changes applied (links set at run time)."""
    if not record.link_changes:
        return model
    links = tuple(_reshaped(link, record.link_changes[link.name])
                  if link.name in record.link_changes else link for link in model.links)
    return replace(model, links=links)


def _reshaped(link: Link, fields: dict[str, Any]) -> Link:
    where = f"link {link.name}"
    a_to_b = topology.reshape(fields, where, link.a_to_b)
    b_to_a = topology.reshape(fields, where, link.b_to_a)
    return replace(link, a_to_b=a_to_b, b_to_a=b_to_a)


def apply(record: ownership.LabRecord, model: Topology, change: Change) -> None:
    """Make one change on the running lab and record it."""
    if change.action in ("down", "up"):
        if change.target in model.nodes:
            for _, link in model.endpoints_of(change.target):
                _set_state(record, model, link, change.action == "up")
        else:
            _set_state(record, model, find_link(model, change.target),
                       change.action == "up")
    else:
        check_target(model, change)
        link = find_link(model, change.target)
        _require_queues(record, model, link, change.shaping or {})
        _set_shaping(record, model, link, change.shaping or {})
    record.save()


def _require_queues(record: ownership.LabRecord, model: Topology, link: Link,
                    fields: dict[str, Any]) -> None:
    """Before anything changes: the kernel has the disciplines the link will need of it."""
    if "qdisc" not in fields:
        return
    now = current(record, model)
    after = _reshaped(find_link(now, link.name), fields)
    changed = replace(now, links=tuple(after if x.name == link.name else x for x in now.links))
    wanted = build.kernel_queues(changed, record.backend, only=link.name)
    if wanted:
        try:
            probe().require_queues(wanted, record.backend)
        except ValueError as error:
            raise ChangeError(str(error)) from None


def find_link(model: Topology, name: str) -> Link:
    for link in model.links:
        if link.name == name:
            return link
    names = ", ".join(link.name for link in model.links)
    raise ChangeError(f"lab {model.name} has no link {name} (links: {names})")


def check_target(model: Topology, change: Change) -> None:
    """Before anything runs: the target exists and the change is possible on it."""
    if change.action not in ("down", "up", "set"):
        raise ChangeError(f"{change.action!r} is not a change: down, up or set")
    if change.action != "set" and change.target in model.nodes:
        return
    link = find_link(model, change.target)
    if change.action == "set" and build.wire_ports(model, link) is None and not _to_switch(
            model, link):
        raise ChangeError(f"link {link.name} was built unshaped (a plain veth pair): give it "
                          "a bw or delay in the topology to change it while the lab runs")


def _to_switch(model: Topology, link: Link) -> bool:
    return any(model.nodes[e.node].kind == "switch" for e in (link.a, link.b))


def _set_state(record: ownership.LabRecord, model: Topology, link: Link, up: bool) -> None:
    state = "up" if up else "down"
    ports = build.wire_ports(model, link)
    if ports is not None:
        wire = build.wire_namespace(model.name)
        lines = [f"link set {port} {state}" for port in ports]
        if up:  # a port that went down took its routes and neighbour entries with it
            lines += _wire_forwarding(model, record.backend, ports)
        run(["ip", "-n", wire, "-batch", "-"], stdin="".join(f"{line}\n" for line in lines))
    else:
        for end in (link.a, link.b):
            run(["ip", "-n", end.node, "link", "set", end.interface, state])
        if up:
            _restore_static_routes(model, link)
    down = set(record.links_down)
    down.discard(link.name) if up else down.add(link.name)
    record.links_down = sorted(down)


def _wire_forwarding(model: Topology, backend: str, ports: tuple[str, str]) -> list[str]:
    """The wire's neighbour entries and routes for one link's ports, as lab up made them."""
    plan = build.plan(model, backend).namespaces[build.wire_namespace(model.name)]
    mine = [line for line in plan.ip_then if line.startswith(("neigh ", "route "))
            and any(line.endswith(f"dev {p} nud permanent") or f" dev {p} " in line
                    for p in ports)]
    return [line.replace("route add", "route replace", 1) for line in mine]


def _restore_static_routes(model: Topology, link: Link) -> None:
    """An interface that went down took its routes with it; put the topology's back."""
    for end in (link.a, link.b):
        if end.address is None:
            continue
        routes = [r for r in model.nodes[end.node].routes if r.via in end.address.network]
        if routes:
            run(["ip", "-n", end.node, "-batch", "-"],
                stdin="".join(f"route replace {route}\n" for route in routes))


def _set_shaping(record: ownership.LabRecord, model: Topology, link: Link,
                 fields: dict[str, Any]) -> None:
    before = find_link(current(record, model), link.name)
    _reshape(record, model, before, _reshaped(before, fields), fields)
    changes = dict(record.link_changes)
    changes[link.name] = {**changes.get(link.name, {}), **fields}
    record.link_changes = changes


def restore(record: ownership.LabRecord, model: Topology) -> list[str]:
    """Every link as the topology built it: up, with its own shaping (after a step whose
    events changed the network). What was restored, a name each."""
    restored = []
    for name in list(record.link_changes):
        link = find_link(model, name)
        _reshape(record, model, find_link(current(record, model), name), link,
                 dict(record.link_changes[name]))
        del record.link_changes[name]
        restored.append(name)
    for name in list(record.links_down):
        _set_state(record, model, find_link(model, name), True)
        restored.append(name)
    record.save()
    return sorted(set(restored))


def _reshape(record: ownership.LabRecord, model: Topology, before: Link, after: Link,
             fields: dict[str, Any]) -> None:
    """Make the running link `before` into `after`; `fields` say what is set."""
    link = find_link(model, before.name)
    now = current(record, model)
    ports = build.wire_ports(model, link)
    if ports is None:  # a link to a switch: only a rate at each end's egress
        allowed = [p.mininet for p in link_properties.PROPERTIES if p.at_switch]
        if any(key not in allowed for key in fields):
            raise ChangeError(f"link {link.name} joins a switch: only its "
                              f"{', '.join(allowed)} can be set")
        for end, old, new in ((link.a, before.a_to_b, after.a_to_b),
                              (link.b, before.b_to_a, after.b_to_a)):
            if model.nodes[end.node].kind == "switch":
                continue
            _replace_stages(end.node, stages.egress(end.interface, old),
                            stages.egress(end.interface, new))
    else:
        wire = build.wire_namespace(model.name)
        port_a, port_b = ports
        directions = ((port_a, port_b, before.a_to_b, after.a_to_b),
                      (port_b, port_a, before.b_to_a, after.b_to_a))
        for ingress, egress, old, new in directions:
            _replace_stages(wire, stages.wire_stages(egress, old, record.backend),
                            stages.wire_stages(egress, new, record.backend))
            if record.backend == "netem":
                _replace_ifb(wire, ingress, old, new)
        if record.backend != "netem":
            _own_shaper(record, replace(now, links=tuple(
                after if x.name == link.name else x for x in now.links)), link, after)


def _replace_stages(namespace: str, before: tuple[stages.Stage, ...],
                    after: tuple[stages.Stage, ...]) -> None:
    """A device's stages from `before` to `after` (rate limiter, then queue). A queue of
    another kind cannot be replaced in place (the kernel changes a qdisc only into its own
    kind): it is removed, and the new one added under the rate limiter. A class tree
    (DiffServ classes) on either side is removed whole and the new stages added."""
    if before == after:
        return
    trees = len(before) != 2 or len(after) != 2  # a class tree, CAKE, netem after CAKE
    if not after or (before and trees):
        lines = [f"qdisc del dev {before[0].device} root"]
        lines += [stage.command("add") for stage in after]
    elif not before:
        lines = [stage.command("add") for stage in after]
    else:
        bucket, queue = after
        assert isinstance(queue, stages.Qdisc) and isinstance(before[1], stages.Qdisc)
        lines = [bucket.command("replace")]
        if before[1].kind != queue.kind:
            lines += [f"qdisc del dev {queue.device} parent {queue.parent}",
                      queue.command("add")]
        else:
            lines.append(queue.command("replace"))
    run(["ip", "netns", "exec", namespace, "tc", "-batch", "-"], stdin="\n".join(lines) + "\n")


def _replace_ifb(wire: str, ingress: str, before: Shaping, after: Shaping) -> None:
    """The ifb behind a wire port's ingress from `before` to `after`: netem (delay, jitter,
    loss) or the kernel's CAKE where it comes first (stages.cake_first); a qdisc of
    another kind is removed and the new one added."""
    device = build.ifb_of(ingress)
    exists = run(["ip", "-n", wire, "link", "show", device], check=False).returncode == 0
    if not exists:  # built without one: build this direction's now, if it needs one
        scratch = build.NamespacePlan()
        build.netem_direction(scratch, ingress, after)
        if scratch.tc:
            run(["ip", "netns", "exec", wire, "sh", "-c",
                 build.NamespacePlan(ip_first=scratch.ip_first, tc=scratch.tc).script()])
        return
    qdisc = stages.ifb_stage(device, after, keep=True)
    assert qdisc is not None
    if stages.cake_first(before) != stages.cake_first(after):
        lines = [f"qdisc del dev {device} root", qdisc.command("add")]
    else:
        lines = [qdisc.command("replace")]
    run(["ip", "netns", "exec", wire, "tc", "-batch", "-"], stdin="\n".join(lines) + "\n")


def _own_shaper(record: ownership.LabRecord, changed: Topology, link: Link, after: Link
                ) -> None:
    """Loss: the wire's raw table anew. Delay, jitter and the own discipline: the delay lines
    read their plan again (SIGHUP); a direction built without a delay line cannot gain one."""
    for built, new, side in ((link.a_to_b, after.a_to_b, "a_to_b"),
                             (link.b_to_a, after.b_to_a, "b_to_a")):
        if (stages.uses_delay_line(new, record.backend)
                and not stages.uses_delay_line(built, record.backend)):
            raise ChangeError(f"link {link.name} {side} was built without delay or a queue "
                              "discipline: the own shaper's delay lines are made at lab up, "
                              "so give the link a delay in the topology (even '0.1ms') to "
                              "change it later")
    wire = build.wire_namespace(changed.name)
    plan = build.plan(changed, record.backend)
    raw = ["*raw", *plan.namespaces[wire].iptables, "COMMIT"]
    run(["ip", "netns", "exec", wire, "iptables-restore", "--table", "raw"],
        stdin="\n".join(raw) + "\n")
    wanted = {queue["queue"]: queue for queue in plan.delay_line_entries(record.created)}
    for config in sorted(ownership.RECORD_DIR.glob(f"{record.lab}.delayline*.json")):
        queues = json.loads(config.read_text())
        updated = [wanted.get(queue["queue"], queue) for queue in queues]
        if updated != queues:
            # replaced whole: the delay line may be reading the file for an earlier change
            fresh = config.with_suffix(".new")
            fresh.write_text(json.dumps(updated))
            os.replace(fresh, config)
            _signal_delay_line(record, config.stem.rsplit("delayline", 1)[1])


def _signal_delay_line(record: ownership.LabRecord, number: str) -> None:
    for process in record.processes:
        if process.what == f"delay line {number}":
            with suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGHUP)
