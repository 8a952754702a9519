"""A link direction's shaping as stages of data, chained by parent as Mininet's TCIntf chains
them: at the wire's egress the rate limiter (tbf, root) and under it the queue (a drop-tail
pfifo, or the kernel's AQM: codel, fq_codel, pie, fq_pie, cake, dualpi2); DiffServ
`classes` as an htb tree instead (rate at its root, a class per DSCP aggregate, u32 filters
on the DSCP); with
netem, delay, jitter and loss on the ifb the wire port's ingress is redirected to. `lab up`
adds each stage, `lab link set` and events replace them: the same data, another verb, so no
command text is ever edited.

With the own shaper, a direction with an active queue discipline has no kernel stages: the
delay line runs its rate, queue and discipline (shaping/bottleneck.py), and the plan entry
that tells it how is made here too (`delay_line_entry`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ...units import parse_duration, parse_rate
from ..model import diffserv
from ..model.disciplines import KERNEL_AQM
from ..model.link_properties import TIME_DIGITS
from ..model.theory import FRAME_BYTES
from ..model.topology import Shaping
from .shaping import aqm

DEFAULT_QUEUE = 1000  # Linux's default txqueuelen, as an unshaped NIC would have
# tbf sends a packet once its bucket holds the packet's size, and the bucket's capacity caps
# what a late timer leaves in it: a bucket of one frame loses every microsecond a timer is
# late (0.75-0.85 of the rate on a VM). So the bucket holds one frame plus LATE_SECONDS at
# the link rate, at least LATE_BYTES (what htb's default buffer tolerates). tbf cuts an
# aggregate into packets when it exceeds what the peak bucket holds: tc gives that bucket's
# size as a time in 64 ns ticks, so at PEAK_RATE an MTU of one tick makes it hold 2400
# bytes, one frame and never two. The gap the peak rate then asks between two frames (17
# ns) is shorter than sending one takes, so tbf hardly ever waits for it (at 20 Gbit/s it
# asked 315 ns: a timer per packet, microseconds of exits each on a VM, held a pair link
# with 10 ms delay to 0.63 x 1 Gbit/s; docs/lab-shaping.md).
LATE_SECONDS = 200e-6
LATE_BYTES = 1600
PEAK_RATE = 300e9  # above any link's rate (link_properties.MAX_RATE)
TICK_SECONDS = 64e-9
SEGMENTING_MTU = 3000  # 80 ns at PEAK_RATE: tc rounds it down to one tick
# netem sorts packets by their send times, so jitter alone reorders them. With a rate set,
# a packet leaves at its own delayed time or, if that is earlier, when the packet queued
# before it leaves: jitter in order, as the own shaper keeps it. A rate far above any link's
# adds 12 ns per 1500-byte packet; tbf does the limiting.
NETEM_IN_ORDER_RATE = "1000gbit"
NO_DELAY = "delay 0us"  # netem that does nothing: what a direction set back to unshaped keeps


@dataclass(frozen=True)
class Qdisc:
    """One stage: a queueing discipline on a device, below `parent` (None: the root)."""

    device: str
    handle: str
    kind: str
    options: str
    parent: str | None = None

    def command(self, verb: str) -> str:
        """The line for `tc -batch`: verb add (lab up) or replace (a link set anew)."""
        place = "root" if self.parent is None else f"parent {self.parent}"
        return f"qdisc {verb} dev {self.device} {place} handle {self.handle} {self.kind} " \
               f"{self.options}"


@dataclass(frozen=True)
class TcClass:
    """An htb class under `parent` (DiffServ classes)."""

    device: str
    classid: str
    parent: str
    options: str

    def command(self, verb: str) -> str:
        return f"class {verb} dev {self.device} parent {self.parent} classid {self.classid} " \
               f"htb {self.options}"


@dataclass(frozen=True)
class Filter:
    """A u32 filter at the root sending the packets `match` selects to class `flowid`."""

    device: str
    protocol: str
    prio: int
    match: str
    flowid: str

    def command(self, verb: str) -> str:
        return f"filter {verb} dev {self.device} parent 1: protocol {self.protocol} prio " \
               f"{self.prio} u32 {self.match} flowid {self.flowid}"


Stage = Qdisc | TcClass | Filter


def runs_own(shaping: Shaping, backend: str) -> bool:
    """Does the lab's own discipline run this routed direction's queue (in the delay line)?
    With the own shaper, for every active discipline it implements, and for every queue
    behind a trace (which only the delay line can follow); otherwise drop-tail stays the
    kernel's pfifo, and a discipline without an own implementation (cake) the kernel's."""
    if backend != "own" or shaping.rate is None:
        return False
    if shaping.trace is not None:
        return True
    return shaping.qdisc != "droptail" and shaping.qdisc in aqm.OWN_QDISCS


def queue_runner(shaping: Shaping, backend: str, routed: bool) -> str:
    """Who runs a direction's queue discipline, in words (lab up and lab status)."""
    if routed and runs_own(shaping, backend):
        follows = f", following trace {Path(shaping.trace).stem}" if shaping.trace else ""
        return f"{shaping.qdisc}: the lab's own, in the delay line (the own shaper){follows}"
    if shaping.qdisc == "droptail":
        return "drop-tail (the kernel's pfifo)"
    why = "netem shaper" if backend == "netem" else (
        "a switch's port" if not routed else "no own implementation")
    if shaping.qdisc == "classes":
        return (f"classes: the kernel's htb, a class per DSCP aggregate, EF policed by a tbf "
                f"({why})")
    if routed and cake_first(shaping):
        return (f"{shaping.qdisc}: the kernel's sch_{shaping.qdisc} ({why}), then netem giving "
                "each frame its time at the rate")
    return f"{shaping.qdisc}: the kernel's sch_{shaping.qdisc} ({why})"


def own_settings(shaping: Shaping) -> aqm.Settings:
    return aqm.Settings(limit=shaping.queue or DEFAULT_QUEUE, ecn=shaping.ecn,
                        target=shaping.target, interval=shaping.interval,
                        tupdate=shaping.tupdate, flows=shaping.flows, quantum=shaping.quantum,
                        rate=shaping.rate, step=shaping.step, coupling=shaping.coupling,
                        any_ect=shaping.any_ect)


def uses_delay_line(shaping: Shaping, backend: str) -> bool:
    """Does the own shaper give this routed direction a delay line (for its delay and jitter,
    or to run its queue)?"""
    return shaping.needs_delay_line or runs_own(shaping, backend)


def delay_line_entry(namespace: str, queue: int, shaping: Shaping, backend: str
                     ) -> dict[str, Any] | None:
    """What the delay line does to the packets of kernel queue `queue` (see
    delayline.serve): None when the direction needs no delay line."""
    if not uses_delay_line(shaping, backend):
        return None
    own = runs_own(shaping, backend)
    entry: dict[str, Any] = {"namespace": namespace, "queue": queue, "delay": shaping.delay,
                             "jitter": shaping.jitter, "reorder": shaping.reorder}
    if own:
        entry.update(qdisc=shaping.qdisc, rate=shaping.rate, trace=shaping.trace,
                     settings=asdict(own_settings(shaping)))
    return entry


def cake_first(shaping: Shaping) -> bool:
    """Does the kernel's CAKE come first on this routed direction, on the ifb behind the
    wire port's ingress, with netem after it at the egress? CAKE's own shaper sends a
    frame at the start of its time on the wire (it then waits that time before the next),
    where tbf sends it at the end; a veth then delivers it at once, so CAKE at the egress
    made the link a frame's time shorter than a wire of its rate (6 ms at 2 Mbit/s: four
    flows' regime changed, docs/lab-shaping.md). netem after it gives every frame that
    time at the link's rate, with the direction's delay, jitter and loss, as the own
    shaper's wire does."""
    return shaping.qdisc == "cake" and shaping.rate is not None


def wire_stages(device: str, shaping: Shaping, backend: str) -> tuple[Stage, ...]:
    """The kernel's stages at a routed direction's egress (none where the own discipline
    runs it; netem where CAKE comes first)."""
    if runs_own(shaping, backend):
        return ()
    if cake_first(shaping):
        return (_netem_after_cake(device, shaping),)
    return egress(device, shaping)


def egress(device: str, shaping: Shaping) -> tuple[Stage, ...]:
    """Rate, then queue: a drop-tail queue of `queue` packets drained at the link rate (no
    stage for a direction without a rate); DiffServ classes: their htb tree."""
    if shaping.rate is None:
        return ()
    rate = int(shaping.rate)
    burst = FRAME_BYTES + max(LATE_BYTES, int(rate / 8 * LATE_SECONDS))
    if shaping.qdisc == "classes":
        return class_tree(device, rate, burst, shaping.queue or DEFAULT_QUEUE)
    if shaping.qdisc == "cake":  # its own shaper at the rate, as CAKE is meant to run
        return (_cake(device, shaping),)
    # tbf's own limit sizes a default byte queue that the pfifo replaces.
    bucket = Qdisc(device, "1:", "tbf", f"rate {rate}bit burst {burst} peakrate "
                   f"{int(PEAK_RATE)}bit mtu {SEGMENTING_MTU} limit 1000000")
    return bucket, queue_stage(device, shaping)


def queue_stage(device: str, shaping: Shaping) -> Qdisc:
    """The queue below the rate limiter: drop-tail (a pfifo of `queue` packets) or the
    kernel's AQM with the same packet limit and the kernel's names for its parameters;
    what is not given keeps the kernel's default."""
    limit = shaping.queue or DEFAULT_QUEUE
    if shaping.qdisc == "droptail":
        return Qdisc(device, "10:", "pfifo", f"limit {limit}", parent="1:1")
    if shaping.qdisc == "dualpi2":
        return Qdisc(device, "10:", "dualpi2", _dualpi2_options(shaping, limit), parent="1:1")
    options = [f"limit {limit}"]
    for name in ("flows", "quantum"):
        if getattr(shaping, name) is not None:
            options.append(f"{name} {getattr(shaping, name)}")
    for name in ("target", "interval", "tupdate"):
        if getattr(shaping, name) is not None:
            options.append(f"{name} {getattr(shaping, name) * 1e6:.0f}us")
    options.append("ecn" if shaping.ecn else "noecn")
    return Qdisc(device, "10:", shaping.qdisc, " ".join(options), parent="1:1")


CLASS_IDS = {name: f"1:{16 + index:x}" for index, name in
             enumerate((diffserv.PRIORITY, *diffserv.WEIGHTS))}


def class_tree(device: str, rate: int, burst: int, limit: int) -> tuple[Stage, ...]:
    """The own `classes` (aqm/classes.py) as a router's kernel would run them: htb at the
    root holds the link rate; expedited forwarding is served first (htb prio 0), policed to
    PRIORITY_SHARE of it by a token bucket of the own policer's burst (a tbf leaf whose
    queue holds one frame: what exceeds the bucket is dropped, not queued; a policer
    without even that frame needs act_police, which a kernel may lack); the other classes
    get their WEIGHTS of the rest, may borrow up to the link rate, and borrow in proportion
    to their quanta (the own deficit round robin's), each a drop-tail pfifo of `limit`
    packets; u32 filters match the DSCP (IPv4 and IPv6), anything else is best effort
    (htb's default)."""
    priority_rate = int(rate * diffserv.PRIORITY_SHARE)
    policed = int(diffserv.priority_burst(rate, FRAME_BYTES))
    rest = rate - priority_rate
    smallest = min(diffserv.WEIGHTS.values())
    default = CLASS_IDS["be"].split(":")[1]
    stages: list[Stage] = [
        Qdisc(device, "1:", "htb", f"default {default}"),
        TcClass(device, "1:1", "1:", f"rate {rate}bit ceil {rate}bit burst {burst} "
                f"cburst {burst}")]
    for name, classid in CLASS_IDS.items():
        leaf = f"{classid.split(':')[1]}0:"
        if name == diffserv.PRIORITY:
            stages += [TcClass(device, classid, "1:1", f"rate {priority_rate}bit ceil {rate}bit "
                               f"prio 0 quantum {FRAME_BYTES} burst {burst} cburst {burst}"),
                       Qdisc(device, leaf, "tbf", f"rate {priority_rate}bit burst {policed} "
                             f"limit {FRAME_BYTES}", parent=classid)]
            continue
        weight = diffserv.WEIGHTS[name]
        stages += [TcClass(device, classid, "1:1", f"rate {max(1, rest * weight // 100)}bit "
                           f"ceil {rate}bit prio 1 quantum {weight // smallest * FRAME_BYTES} "
                           f"burst {burst} cburst {burst}"),
                   Qdisc(device, leaf, "pfifo", f"limit {limit}", parent=classid)]
    for dscp, name in sorted(diffserv.CLASS_OF_DSCP.items()):
        tos = f"0x{dscp << 2:02x} 0xfc"
        stages += [Filter(device, "ip", 1, f"match ip dsfield {tos}", CLASS_IDS[name]),
                   Filter(device, "ipv6", 2, f"match ip6 priority {tos}", CLASS_IDS[name])]
    return tuple(stages)


def _cake_options(shaping: Shaping, rate: int) -> str:
    """tc-cake's words: its bandwidth, the buffer as memory, its rtt (CoDel's interval); its
    defaults otherwise (diffserv3, triple-isolate, split-gso); it marks ECN-capable packets
    always (no ecn option)."""
    options = [f"bandwidth {rate}bit", f"memlimit {(shaping.queue or DEFAULT_QUEUE) * FRAME_BYTES}"]
    if shaping.interval is not None:
        options.append(f"rtt {shaping.interval * 1e6:.0f}us")
    return " ".join(options)


def _dualpi2_options(shaping: Shaping, limit: int) -> str:
    """tc-dualpi2's words; it marks ECN-capable packets always (no ecn option)."""
    options = [f"limit {limit}"]
    for name, word in (("target", "target"), ("tupdate", "tupdate"), ("step", "step_thresh")):
        if getattr(shaping, name) is not None:
            options.append(f"{word} {getattr(shaping, name) * 1e6:.0f}us")
    if shaping.coupling is not None:
        options.append(f"coupling_factor {shaping.coupling}")
    options.append("any_ect" if shaping.any_ect else "l4s_ect")
    return " ".join(options)


def netem(device: str, shaping: Shaping, keep: bool = False) -> Qdisc | None:
    """Delay, jitter and loss as one netem on `device` (an ifb); None when the direction has
    none of them, unless `keep` (a running link's netem stays, doing nothing)."""
    if not (shaping.delay or shaping.jitter or shaping.loss):
        return Qdisc(device, "1:", "netem", NO_DELAY) if keep else None
    return _netem(device, shaping)


def _netem(device: str, shaping: Shaping, rate: int | None = None) -> Qdisc:
    """netem's words for the direction's delay, jitter and loss; with `rate`, each frame
    also takes its time at that rate (which keeps jitter in order)."""
    options = f"limit 1000000 delay {shaping.delay * 1e6:.0f}us"
    if shaping.jitter:
        options += f" {shaping.jitter * 1e6:.0f}us distribution normal"
    if rate is not None:
        options += f" rate {rate}bit"
    elif shaping.jitter and not shaping.reorder:
        options += f" rate {NETEM_IN_ORDER_RATE}"
    if shaping.loss:
        options += f" loss {shaping.loss * 100:.6f}%"
    return Qdisc(device, "1:", "netem", options)


def _netem_after_cake(device: str, shaping: Shaping) -> Qdisc:
    """netem after the kernel's CAKE: the direction's delay, jitter and loss, and each frame
    its time at the link's rate (cake_first)."""
    return _netem(device, shaping, int(shaping.rate or 0))


def _cake(device: str, shaping: Shaping) -> Qdisc:
    """The kernel's CAKE at the root of `device`, its own shaper at the link's rate."""
    return Qdisc(device, "1:", "cake", _cake_options(shaping, int(shaping.rate or 0)))


def ifb_stage(ifb: str, shaping: Shaping, keep: bool = False) -> Qdisc | None:
    """What the ifb behind a routed direction's ingress holds: the kernel's CAKE where it
    comes first (cake_first), else netem for its delay, jitter and loss (see netem)."""
    if cake_first(shaping):
        return _cake(ifb, shaping)
    return netem(ifb, shaping, keep)


def receiver_stage(ifb: str, shaping: Shaping) -> Qdisc | None:
    """What the ifb behind a receiver's interface holds (containerlab's, where the sender's
    egress has the rate, queue and discipline): netem for the direction's delay, jitter and
    loss, and after the sender's CAKE each frame its time at the rate too (cake_first)."""
    return _netem_after_cake(ifb, shaping) if cake_first(shaping) else netem(ifb, shaping)


def ingress_redirect(ingress: str, ifb: str, qdisc: Qdisc | None
                     ) -> tuple[list[str], list[str]]:
    """Everything that arrives at `ingress` through `qdisc` on the ifb `ifb` (the lab's wire
    port: ifb_stage; a receiver's interface: receiver_stage). The lines for `ip -batch`
    and for `tc -batch` (none without a qdisc)."""
    if qdisc is None:
        return [], []
    return ([f"link add {ifb} type ifb", f"link set {ifb} up"],
            [f"qdisc add dev {ingress} handle ffff: ingress",
             f"filter add dev {ingress} parent ffff: protocol all u32 match u32 0 0 "
             f"action mirred egress redirect dev {ifb}", qdisc.command("add")])


# ---------------------------------------------------------------- reading the stages back
# What a topology written out as tc lines (containerlab's exec) says about a direction: the
# words egress() and netem() write, read back into Shaping's fields. Anything else is one
# line naming it.

_FLAGS = {"ecn": ("ecn", True), "noecn": ("ecn", False), "any_ect": ("any_ect", True),
          "l4s_ect": ("any_ect", False)}
_TIMES = {"target": "target", "interval": "interval", "tupdate": "tupdate",
          "step_thresh": "step", "rtt": "interval"}
LOSS_DIGITS = 12  # netem's loss is a 32-bit fraction: '0.500000%' is 0.005


def _seconds(text: str) -> float:
    return round(parse_duration(text), TIME_DIGITS)


_COUNTS = {"flows": "flows", "quantum": "quantum", "coupling_factor": "coupling"}
# Words of each discipline that the lab does not model: read past (a tbf's bucket, which
# the lab sizes itself).
_IGNORED = {"tbf": {"burst", "peakrate", "mtu", "limit", "buffer", "latency", "minburst"},
            "cake": {"diffserv3", "triple-isolate", "split-gso", "besteffort"}}


def read_qdisc(kind: str, words: list[str]) -> dict[str, Any]:
    """The Shaping fields one qdisc of a direction's egress gives (tbf: the rate; pfifo:
    the queue; an AQM: itself and its parameters). ValueError naming what it cannot read."""
    if kind == "pfifo" or kind in KERNEL_AQM:
        values: dict[str, Any] = {} if kind == "pfifo" else {"qdisc": kind}
    elif kind in ("tbf", "cake"):
        values = {"qdisc": "cake"} if kind == "cake" else {}
    else:
        raise ValueError(f"qdisc {kind} is not one the lab builds (tbf, pfifo, htb, "
                         f"{', '.join(KERNEL_AQM)}, netem)")
    position = 0
    while position < len(words):
        word = words[position]
        value = words[position + 1] if position + 1 < len(words) else ""
        position += 1
        if word in _FLAGS:
            values[_FLAGS[word][0]] = _FLAGS[word][1]
            continue
        position += 1
        if word in ("rate", "bandwidth"):
            values["rate"] = parse_rate(value)
        elif word == "limit" and kind != "tbf":
            values["queue"] = int(value)
        elif word == "memlimit":
            values["queue"] = int(value) // FRAME_BYTES
        elif word in _TIMES:
            values[_TIMES[word]] = _seconds(value)
        elif word in _COUNTS:
            values[_COUNTS[word]] = int(value)
        elif word not in _IGNORED.get(kind, ()):
            raise ValueError(f"{kind}'s '{word}' is not a setting the lab models")
    if values.get("queue") == DEFAULT_QUEUE:
        del values["queue"]  # what a queue without a limit gets
    return values


def read_netem(words: list[str]) -> dict[str, Any]:
    """Delay, jitter (in order when netem also has a rate: netem() writes one then) and
    loss from netem's words."""
    values: dict[str, Any] = {}
    position, in_order = 0, False
    while position < len(words):
        word = words[position]
        following = words[position + 1:position + 3]
        if word == "delay" and following:
            values["delay"] = _seconds(following[0])
            position += 2
            if len(following) > 1 and following[1][:1].isdigit():
                values["jitter"] = _seconds(following[1])
                position += 1
        elif word == "loss" and following:
            chance = following[1] if following[0] == "random" else following[0]
            values["loss"] = round(float(chance.rstrip("%")) / 100, LOSS_DIGITS)
            position += 3 if following[0] == "random" else 2
        elif word == "distribution" and following[:1] == ["normal"]:
            position += 2
        elif word in ("limit", "rate") and following:
            in_order = in_order or word == "rate"
            position += 2
        else:
            raise ValueError(f"netem's '{word}' is not a setting the lab models (delay, "
                             "jitter, loss)")
    if values.get("jitter"):
        values["reorder"] = not in_order
    if values.get("delay") == 0 and not values.get("jitter"):
        del values["delay"]
    return values


def read_class_tree(classes: dict[str, list[str]], leaves: dict[str, list[str]]
                    ) -> dict[str, Any]:
    """DiffServ classes as class_tree() writes them: the rate of class 1:1, the queue of
    best effort's leaf."""
    root = classes.get("1:1", [])
    if "rate" not in root:
        raise ValueError("an htb tree without class 1:1 and its rate is not the lab's classes")
    values: dict[str, Any] = {"qdisc": "classes",
                              "rate": parse_rate(root[root.index("rate") + 1])}
    leaf = leaves.get(CLASS_IDS["be"], [])
    if "limit" in leaf and int(leaf[leaf.index("limit") + 1]) != DEFAULT_QUEUE:
        values["queue"] = int(leaf[leaf.index("limit") + 1])
    return values
