"""Equal-cost paths taken packet by packet (a topology's `multipath = "per-packet"`).

Linux spreads an equal-cost multipath route per flow only: a hash of addresses and ports
picks one gateway (choosing per packet went with the route cache in 3.6). A per-packet
router therefore numbers the packets it receives in turn (iptables' statistic match: the
n-th gets mark n mod WAYS + 1) and looks marked packets up in a table of their own (an `ip
rule` per mark): a copy of the main table in which every multipath route keeps one gateway,
mark m taking gateway m mod n of a route with n. A follower in the router's namespace keeps
the copies equal to the main table as the daemons change it: it listens to the kernel's
notifications of routes, links and nexthops, and rewrites the copies once they stop.

A packet whose table has no usable route (a copy not yet rewritten after a link failed)
falls through to the main table, as every unmarked packet does: it is never dropped for
want of a copy.
"""

from __future__ import annotations

import json
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from typing import Any

from ...model.topology import Topology
from .. import ownership
from ..system import await_ready, module_command, run
from .daemons import folder

WAYS = 12  # marks, and tables: 2, 3, 4 or 6 equal paths each get an even share
TABLE_BASE = 3000  # mark m is looked up in table TABLE_BASE + m ...
RULE_BASE = 3000  # ... by the rule of this preference + m, before the main table's 32766
MODULE = "simpleperf.lab.net.routing.perpacket"
# Notifications come in bursts (a failure changes many routes): rewrite once they pause.
SETTLE_SECONDS = 0.01
MOST_SETTLE_SECONDS = 0.2

# rtnetlink, from <linux/rtnetlink.h> and <linux/netlink.h>
RTMGRP_LINK, RTMGRP_IPV4_ROUTE = 0x1, 0x40
RTNLGRP_NEXTHOP = 32  # beyond the 32-bit group mask of bind(): joined by setsockopt
SOL_NETLINK, NETLINK_ADD_MEMBERSHIP = 270, 1
RTM_NEWROUTE, RTM_DELROUTE = 24, 25
RT_TABLE_MAIN = 254
NLMSG_HEADER = struct.Struct("=IHHII")
UNUSABLE = {"linkdown", "dead"}


def setup_commands() -> list[str]:
    """What a per-packet router needs once: the numbering and the rule per mark."""
    marking = [f"iptables -w -t mangle -A PREROUTING -m statistic --mode nth --every {WAYS} "
               f"--packet {way} -j MARK --set-mark {way + 1}" for way in range(WAYS)]
    rules = [f"ip rule add pref {RULE_BASE + mark} fwmark {mark} lookup {TABLE_BASE + mark}"
             for mark in range(1, WAYS + 1)]
    return marking + rules


def start(record: ownership.LabRecord, topology: Topology) -> None:
    """Number packets and add the rules in every router, then start its follower (recorded,
    its log beside its daemons'), and return once every copy is in place."""
    for router in topology.routers():
        run(["ip", "netns", "exec", router, "sh", "-c", " && ".join(setup_commands())])
    command, environment = module_command(MODULE)
    started = []
    for router in topology.routers():
        log = folder(record.lab, router) / "perpacket.log"
        with open(log, "w") as errors:
            started.append((ownership.start_recorded(
                record, router, command, f"per-packet multipath on {router}",
                stdout=subprocess.PIPE, stderr=errors, env=environment), log, router))
    for process, log, router in started:
        await_ready(process, log, f"per-packet multipath on {router}")


def copies(main: list[dict[str, Any]]) -> dict[tuple[int, str, int], str]:
    """The routes of every mark's table (`ip route replace` lines, without the verb) by
    (table, destination, metric), from `ip -json route show table main`. Routes without a
    gateway come first: a gateway must be reachable in its table when its route is added."""
    wanted: dict[tuple[int, str, int], str] = {}
    ordered = sorted(main, key=lambda entry: "gateway" in entry or "nexthops" in entry)
    for mark in range(1, WAYS + 1):
        table = TABLE_BASE + mark
        for entry in ordered:
            if entry.get("type", "unicast") != "unicast" or "dst" not in entry:
                continue
            hops = [hop for hop in entry.get("nexthops") or [entry]
                    if not UNUSABLE & set(hop.get("flags", []))]
            if not hops:
                continue  # the main table cannot use it either
            hop = hops[mark % len(hops)]
            metric = int(entry.get("metric", 0))
            line = f"{entry['dst']} table {table}"
            if "gateway" in hop:
                line += f" via {hop['gateway']}"
            if "dev" in hop:
                line += f" dev {hop['dev']}"
            if entry.get("scope") in ("link", "host"):
                line += f" scope {entry['scope']}"
            if "prefsrc" in entry:
                line += f" src {entry['prefsrc']}"
            if "onlink" in hop.get("flags", []):
                line += " onlink"
            wanted[(table, entry["dst"], metric)] = line + f" metric {metric}"
    return wanted


def rewrite_script(before: set[tuple[int, str, int]],
                   wanted: dict[tuple[int, str, int], str]) -> str:
    """`ip -batch` lines that make the tables hold `wanted`, having held `before`: every
    route replaced in place (a packet never finds its table empty), then the gone deleted."""
    lines = [f"route replace {line}" for line in wanted.values()]
    lines += [f"route del {destination} table {table} metric {metric}"
              for table, destination, metric in sorted(before - set(wanted))]
    return "".join(f"{line}\n" for line in lines)


def _concerns_forwarding(data: bytes) -> bool:
    """Does a batch of notifications change what the main table forwards by? Routes of
    other tables (the copies themselves, the local table) do not."""
    offset = 0
    while offset + NLMSG_HEADER.size <= len(data):
        length, kind, _, _, _ = NLMSG_HEADER.unpack_from(data, offset)
        if length < NLMSG_HEADER.size:
            return True  # malformed: assume it matters
        if kind not in (RTM_NEWROUTE, RTM_DELROUTE):
            return True  # a link or a nexthop changed
        table_at = offset + NLMSG_HEADER.size + 4  # rtmsg: family, dst_len, src_len, tos
        if table_at < len(data) and data[table_at] == RT_TABLE_MAIN:
            return True
        offset += (length + 3) & ~3
    return False


def _listen() -> socket.socket:
    listener = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    listener.bind((0, RTMGRP_LINK | RTMGRP_IPV4_ROUTE))
    listener.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, RTNLGRP_NEXTHOP)
    return listener


def _main_table() -> list[dict[str, Any]]:
    done = subprocess.run(["ip", "-json", "route", "show", "table", "main"],
                          capture_output=True, text=True)
    try:
        return json.loads(done.stdout) if done.returncode == 0 and done.stdout.strip() else []
    except ValueError:
        return []


def _sync(before: set[tuple[int, str, int]]) -> set[tuple[int, str, int]]:
    wanted = copies(_main_table())
    script = rewrite_script(before, wanted)
    if script:
        done = subprocess.run(["ip", "-force", "-batch", "-"], input=script,
                              capture_output=True, text=True)
        for line in done.stderr.strip().splitlines():
            print(f"perpacket: {line}", file=sys.stderr, flush=True)
    return set(wanted)


def _changed(listener: socket.socket) -> bool:
    """Wait for notifications; were any about forwarding? A lost burst (the socket's
    buffer overflowed) counts as a change."""
    try:
        return _concerns_forwarding(listener.recv(1 << 16))
    except OSError:
        return True


def follow() -> None:
    """Keep the copies of the namespace this runs in equal to its main table, until
    SIGTERM. Prints "ready" once the first copies are in place."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    listener = _listen()  # before the first copy: a change from here on is not missed
    installed = _sync(set())
    print("ready", flush=True)
    while True:
        if not _changed(listener):
            continue
        began = time.monotonic()
        while (time.monotonic() - began < MOST_SETTLE_SECONDS
               and select.select([listener], [], [], SETTLE_SECONDS)[0]):
            _changed(listener)
        installed = _sync(installed)


if __name__ == "__main__":
    follow()
