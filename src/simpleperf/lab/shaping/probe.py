"""Find out, by trying in a scratch namespace, what this kernel can do for link shaping."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

from ..system import run


@dataclass(frozen=True)
class Capabilities:
    htb: bool
    netem: bool
    ifb: bool
    nfqueue: bool  # iptables NFQUEUE target and statistic match

    def backend(self, wanted: str) -> str:
        """'netem' or 'own' for --shaper auto|netem|own; raises ValueError if impossible."""
        if not self.htb:
            raise ValueError("this kernel has no htb qdisc, which every shaper needs for rate "
                             "limits")
        netem_ok = self.netem and self.ifb
        if wanted == "netem" and not netem_ok:
            raise ValueError("--shaper netem: this kernel has no netem qdisc"
                             + ("" if self.ifb else " or no ifb device")
                             + "; use --shaper own")
        if wanted == "own" and not self.nfqueue:
            raise ValueError("--shaper own needs the iptables NFQUEUE target and statistic "
                             "match (kernel netfilter), which this kernel lacks")
        if wanted == "auto":
            if netem_ok:
                return "netem"
            if self.nfqueue:
                return "own"
            raise ValueError("this kernel has neither netem nor NFQUEUE: links can have rate "
                             "and queue limits but no delay, jitter or loss")
        return wanted


def probe() -> Capabilities:
    name = f"sp-probe-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    run(["ip", "netns", "add", name])
    try:
        def ok(*command: str, stdin: str | None = None) -> bool:
            return run(["ip", "netns", "exec", name, *command], stdin=stdin,
                       check=False).returncode == 0

        run(["ip", "-n", name, "link", "add", "p0", "type", "veth", "peer", "name", "p1"])
        htb = ok("tc", "qdisc", "add", "dev", "p0", "root", "handle", "1:", "htb")
        netem = ok("tc", "qdisc", "add", "dev", "p1", "root", "netem", "delay", "1ms")
        ifb = ok("ip", "link", "add", "ifb0", "type", "ifb")
        nfqueue = ok("iptables-restore", stdin=(
            "*raw\n-A PREROUTING -i p0 -m statistic --mode random --probability 0.5 -j DROP\n"
            "-A PREROUTING -i p0 -j NFQUEUE --queue-num 1\nCOMMIT\n"))
        return Capabilities(htb=htb, netem=netem, ifb=ifb, nfqueue=nfqueue)
    finally:
        run(["ip", "netns", "del", name], check=False)
