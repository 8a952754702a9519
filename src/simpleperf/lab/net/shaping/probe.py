"""Find out, by trying in a throwaway namespace, what this kernel can do for link shaping."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ...model.disciplines import KERNEL_QDISCS
from ..system import CommandError, run
from .aqm import OWN_QDISCS

SHAPERS = ("auto", "netem", "own")
# The default of --shaper, for a user (or a test session) who always wants one backend.
SHAPER_ENV = "SIMPLEPERF_SHAPER"

# Active queue management the kernel may offer, for links whose qdisc is one of them.
AQM_QDISCS = KERNEL_QDISCS

# Runs under `unshare --net`: the namespace has no name and the kernel frees it when the
# shell exits, so nothing can be left behind, even if this process is killed meanwhile.
PROBE_SCRIPT = """
ip link add p0 type veth peer name p1 || exit 3
try() { if "$@" >/dev/null 2>&1; then echo "$PROBE=yes"; else echo "$PROBE=no"; fi; }
PROBE=tbf try sh -c 'tc qdisc add dev p0 root handle 1: tbf rate 1mbit burst 1600 \
peakrate 100mbit mtu 2200 limit 1000000 && tc qdisc add dev p0 parent 1:1 pfifo limit 10'
PROBE=netem try tc qdisc add dev p1 root netem delay 1ms
PROBE=htb try sh -c 'ip link add h0 type veth peer name h1 && tc qdisc add dev h0 root \
handle 1: htb default 1 && tc class add dev h0 parent 1: classid 1:1 htb rate 1mbit && \
tc filter add dev h0 parent 1: protocol ip prio 1 u32 match ip dsfield 0xb8 0xfc flowid 1:1'

for qdisc in AQM_QDISCS; do
    PROBE=$qdisc try tc qdisc replace dev p1 root $qdisc
done
PROBE=ifb try ip link add ifb9 type ifb
PROBE=nfqueue try iptables-restore <<'RULES'
*raw
-A PREROUTING -i p0 -m statistic --mode random --probability 0.5 -j DROP
-A PREROUTING -i p0 -j NFQUEUE --queue-num 1
COMMIT
*mangle
-A PREROUTING -m mark --mark 0x10000/0x10000 -j ECN --ecn-ip-ect 3
COMMIT
RULES
""".replace("AQM_QDISCS", " ".join(AQM_QDISCS))


@dataclass(frozen=True)
class Capabilities:
    tbf: bool  # token bucket with a peak rate, and a pfifo in it
    netem: bool
    ifb: bool
    nfqueue: bool  # iptables NFQUEUE target and statistic match
    aqm: frozenset[str] = frozenset()  # which of AQM_QDISCS the kernel has
    htb: bool = False  # htb classes and u32 filters: DiffServ classes in the kernel

    def describe(self) -> str:
        """One line per capability, as `simpleperf lab probe` prints them."""
        has = {"tbf (rate limits)": self.tbf, "netem (delay, jitter, loss)": self.netem,
               "ifb (netem on arriving packets)": self.ifb,
               "NFQUEUE, statistic, ECN (the own shaper)": self.nfqueue}
        lines = [f"  {name:<40} {'yes' if present else 'no'}" for name, present in has.items()]
        lines += [f"  {f'{name} (sch_{name})':<40} {'yes' if name in self.aqm else 'no'}; "
                  + ("the own shaper runs its own" if name in OWN_QDISCS
                     else "the own shaper uses the kernel's") for name in AQM_QDISCS]
        lines.append(f"  {'classes (DiffServ: htb, u32)':<40} {'yes' if self.htb else 'no'}; "
                     "the own shaper runs its own")
        return "\n".join(lines)

    def require_queues(self, wanted: dict[str, str], backend: str) -> None:
        """wanted: link direction -> the qdisc the kernel must run there (build.kernel_queues).
        ValueError naming the first this kernel lacks, and what would run it."""
        own = ", ".join(name for name in OWN_QDISCS if name in AQM_QDISCS)
        for where, name in wanted.items():
            if name in self.aqm or name == "classes" and self.htb:
                continue
            if name == "classes":
                raise ValueError(f"{where}: qdisc classes needs the kernel's htb qdisc and "
                                 "u32 filter, which this kernel lacks"
                                 + ("; --shaper own runs its own" if backend == "netem"
                                    else ": put the queue on a link between routers"))
            if name not in AQM_QDISCS:  # no kernel has it: the delay line's alone
                raise ValueError(f"{where}: qdisc {name} is the lab's own, run by the own "
                                 "shaper's delay line between hosts or routers: use "
                                 "--shaper own" + (", and put it on a link between routers"
                                                   if backend == "own" else ""))
            has = ", ".join(sorted(self.aqm)) or "none of them"
            lacks = (f"{where}: qdisc {name} needs the kernel's sch_{name}, which this kernel "
                     f"lacks (it has {has})")
            if backend == "netem" and name in OWN_QDISCS:
                raise ValueError(f"{lacks}; --shaper own runs {own} itself")
            if backend == "own" and name in OWN_QDISCS:  # only at a switch's port
                raise ValueError(f"{lacks}, and it joins a switch, where only the kernel's "
                                 "qdisc can sit: put the queue on a link between routers")
            raise ValueError(f"{lacks}, and the own shaper implements only {own}; Debian's "
                             "linux-image-amd64 has sch_cake (scripts/netem-guest boots it)")

    def choose(self, given: str | None) -> tuple[str, str]:
        """('netem' or 'own', why) for --shaper auto|netem|own, or for SHAPER_ENV when not
        given; ValueError if impossible."""
        wanted, asked_by = given, "--shaper"
        if wanted is None:
            wanted, asked_by = os.environ.get(SHAPER_ENV) or "auto", SHAPER_ENV
            if wanted not in SHAPERS:
                raise ValueError(f"{SHAPER_ENV}={wanted}: expected one of {', '.join(SHAPERS)}")
        asked = f"--shaper {wanted}" if asked_by == "--shaper" else f"{SHAPER_ENV}={wanted}"
        if not self.tbf:
            raise ValueError("this kernel has no tbf qdisc, which every shaper needs for rate "
                             "limits")
        netem_ok = self.netem and self.ifb
        if wanted == "netem" and not netem_ok:
            raise ValueError(f"{asked}: this kernel has no netem qdisc"
                             + ("" if self.ifb else " or no ifb device")
                             + "; use --shaper own")
        if wanted == "own" and not self.nfqueue:
            raise ValueError(f"{asked} needs the iptables NFQUEUE and ECN targets and the "
                             "statistic match (kernel netfilter), which this kernel lacks")
        if wanted != "auto":
            return wanted, f"chosen with {asked_by}"
        if netem_ok:
            return "netem", "auto: this kernel has netem"
        if self.nfqueue:
            return "own", ("auto: this kernel has no netem qdisc" if not self.netem
                           else "auto: this kernel has netem but no ifb device")
        raise ValueError("this kernel has neither netem nor NFQUEUE: links can have rate "
                         "and queue limits but no delay, jitter or loss")


def probe() -> Capabilities:
    done = run(["unshare", "--net", "sh", "-c", PROBE_SCRIPT], check=False)
    found = {name: value == "yes" for name, value in
             (line.split("=", 1) for line in done.stdout.split() if "=" in line)}
    basics = ("tbf", "netem", "ifb", "nfqueue", "htb")
    if done.returncode not in (0, 1) or set(found) != {*basics, *AQM_QDISCS}:
        raise CommandError("cannot probe the kernel in a scratch network namespace: "
                           + (done.stderr.strip().splitlines() or ["unshare failed"])[-1])
    return Capabilities(found["tbf"], found["netem"], found["ifb"], found["nfqueue"],
                        frozenset(name for name in AQM_QDISCS if found[name]), found["htb"])
