"""Find out, by trying in a throwaway namespace, what this kernel can do for link shaping."""

from __future__ import annotations

from dataclasses import dataclass

from ..system import CommandError, run

# Runs under `unshare --net`: the namespace has no name and the kernel frees it when the
# shell exits, so nothing can be left behind, even if this process is killed meanwhile.
PROBE_SCRIPT = """
ip link add p0 type veth peer name p1 || exit 3
try() { if "$@" >/dev/null 2>&1; then echo "$PROBE=yes"; else echo "$PROBE=no"; fi; }
PROBE=tbf try sh -c 'tc qdisc add dev p0 root handle 1: tbf rate 1mbit burst 1600 \
peakrate 100mbit mtu 2200 limit 1000000 && tc qdisc add dev p0 parent 1:1 pfifo limit 10'
PROBE=netem try tc qdisc add dev p1 root netem delay 1ms
PROBE=ifb try ip link add ifb9 type ifb
PROBE=nfqueue try iptables-restore <<'RULES'
*raw
-A PREROUTING -i p0 -m statistic --mode random --probability 0.5 -j DROP
-A PREROUTING -i p0 -j NFQUEUE --queue-num 1
COMMIT
RULES
"""


@dataclass(frozen=True)
class Capabilities:
    tbf: bool  # token bucket with a peak rate, and a pfifo in it
    netem: bool
    ifb: bool
    nfqueue: bool  # iptables NFQUEUE target and statistic match

    def backend(self, wanted: str) -> str:
        """'netem' or 'own' for --shaper auto|netem|own; raises ValueError if impossible."""
        if not self.tbf:
            raise ValueError("this kernel has no tbf qdisc, which every shaper needs for rate "
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
    done = run(["unshare", "--net", "sh", "-c", PROBE_SCRIPT], check=False)
    found = dict(line.split("=", 1) for line in done.stdout.split() if "=" in line)
    if done.returncode not in (0, 1) or set(found) != {"tbf", "netem", "ifb", "nfqueue"}:
        raise CommandError("cannot probe the kernel in a scratch network namespace: "
                           + (done.stderr.strip().splitlines() or ["unshare failed"])[-1])
    return Capabilities(**{name: value == "yes" for name, value in found.items()})
