"""How a topology's routers find their routes: static (the default), or OSPF and BGP run by
real routing daemons, with the timers an emulated network wants.

The vocabulary is FRR's: `routing = "ospf"` for the whole topology (every router-router link
in area 0, every connected subnet announced), `asn` per router to form autonomous systems
(OSPF inside each, eBGP between routers of different ones, iBGP inside one), `cost` per link,
`frr` per router for a raw configuration fragment. Nothing here touches the system.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ...units import parse_duration
from . import datafiles
from .errors import TopologyError

PROTOCOLS = ("static", "ospf")
# How a router spreads packets over equal-cost paths: each flow on one path, chosen by a hash
# of its addresses and ports (the kernel's and most routers' default), or packet by packet in
# turn (what shows what reordering across paths of different delay does to jitter and TCP).
MULTIPATH_MODES = ("per-flow", "per-packet")
# A topology's [timers], each key with what it sets (the file-format reference's source)
TIMER_KEYS = {
    "ospf_hello": "seconds between OSPF hellos (default 1; FRR's own is 10)",
    "ospf_dead": "seconds without a hello before an OSPF neighbour is down (default 4)",
    "bgp_keepalive": "seconds between BGP keepalives (default 1)",
    "bgp_hold": "seconds without a keepalive before a BGP session ends (default 3, at "
                "least 3 keepalives)",
    "bfd": "`true`: BFD beside OSPF and BGP, which notices a silent failure in a fraction "
           "of a second",
    "bfd_interval": "seconds between BFD packets, down after 3 missed (default 0.1)",
}
MAX_COST = 65535  # OSPF's interface cost is 16 bits
MAX_ASN = 4294967295  # four-octet AS numbers
MAX_FRAGMENT = 20_000  # characters of a router's raw FRR configuration
MAX_TIMER_SECONDS = 65535  # OSPF and BGP timers are 16-bit counts of seconds


@dataclass(frozen=True)
class Timers:
    """Emulation timers: a lab is small and its links are short, so failures are noticed in
    seconds rather than the minutes of FRR's defaults (OSPF hello 10 s / dead 40 s, BGP
    keepalive 60 s / hold 180 s)."""

    ospf_hello: int = 1  # seconds between OSPF hellos
    ospf_dead: int = 4  # seconds without a hello before a neighbour is declared down
    bgp_keepalive: int = 1
    bgp_hold: int = 3
    bfd: bool = False  # BFD beside OSPF and BGP, for sub-second detection of silent failures
    bfd_interval: float = 0.1  # seconds between BFD packets; down after 3 missed

    def describe(self) -> str:
        text = (f"OSPF hello {self.ospf_hello} s, dead {self.ospf_dead} s; BGP keepalive "
                f"{self.bgp_keepalive} s, hold {self.bgp_hold} s")
        if self.bfd:
            text += f"; BFD every {self.bfd_interval * 1e3:g} ms, down after 3 missed"
        return text


@dataclass(frozen=True)
class Routing:
    protocol: str = "static"
    timers: Timers = field(default_factory=Timers)
    multipath: str = "per-flow"

    @property
    def per_packet(self) -> bool:
        return self.multipath == "per-packet"

    @property
    def dynamic(self) -> bool:
        return self.protocol != "static"


def parse(data: dict[str, Any]) -> Routing:
    """The topology's top-level `routing`, `multipath` and `[timers]`."""
    protocol = _one_of(data.get("routing", "static"), PROTOCOLS, "routing")
    multipath = _one_of(data.get("multipath", "per-flow"), MULTIPATH_MODES, "multipath")
    raw = data.get("timers", {})
    if not isinstance(raw, dict):
        raise TopologyError("[timers] must be a table, e.g. timers = { ospf_hello = 1 }")
    if raw and protocol == "static":
        raise TopologyError("[timers] are routing timers: they need routing = 'ospf'")
    datafiles.only(raw, set(TIMER_KEYS), "timers", TopologyError)
    values: dict[str, Any] = {}
    for name in ("ospf_hello", "ospf_dead", "bgp_keepalive", "bgp_hold"):
        if name in raw:
            values[name] = _seconds(raw[name], f"timers: {name}")
    if "bfd" in raw:
        if not isinstance(raw["bfd"], bool):
            raise TopologyError("timers: bfd must be true or false")
        values["bfd"] = raw["bfd"]
    if "bfd_interval" in raw:
        values["bfd_interval"] = _bfd_interval(raw["bfd_interval"])
    timers = Timers(**values)
    if timers.ospf_dead <= timers.ospf_hello:
        raise TopologyError(f"timers: ospf_dead ({timers.ospf_dead} s) must be longer than "
                            f"ospf_hello ({timers.ospf_hello} s)")
    if timers.bgp_hold < 3 * timers.bgp_keepalive:
        raise TopologyError(f"timers: bgp_hold ({timers.bgp_hold} s) must be at least 3 x "
                            f"bgp_keepalive ({timers.bgp_keepalive} s)")
    return Routing(protocol, timers, multipath)


def _one_of(value: Any, choices: tuple[str, ...], where: str) -> str:
    if value not in choices:
        raise TopologyError(f"{where} = {value!r} must be one of: "
                            + ", ".join(f"'{c}'" for c in choices))
    return str(value)


def _seconds(value: Any, where: str) -> int:
    """A whole number of seconds, as OSPF and BGP count them: 3 or '3s'."""
    seconds: float
    if isinstance(value, bool):
        seconds = -1
    elif isinstance(value, int):
        seconds = value
    else:
        try:
            seconds = parse_duration(str(value))
        except ValueError:
            seconds = -1
    if seconds != int(seconds) or not 1 <= seconds <= MAX_TIMER_SECONDS:
        raise TopologyError(f"{where} = {value!r} must be a whole number of seconds from 1 "
                            f"to {MAX_TIMER_SECONDS}, such as 1 or '4s'")
    return int(seconds)


def _bfd_interval(value: Any) -> float:
    try:
        seconds = parse_duration(value) if isinstance(value, str) else -1.0
    except ValueError:
        seconds = -1.0
    if not 0.01 <= seconds <= 60:
        raise TopologyError(f"timers: bfd_interval = {value!r} must be a time from '10ms' to "
                            "'60s'")
    return round(seconds, 3)


def asn(value: Any, node: str, routing: Routing) -> int | None:
    if value is None:
        return None
    if not routing.dynamic:
        raise TopologyError(f"node {node}: asn needs routing = 'ospf' (OSPF runs inside each "
                            "autonomous system, BGP between them)")
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ASN:
        raise TopologyError(f"node {node}: asn = {value!r} must be an AS number from 1 to "
                            f"{MAX_ASN}, such as 65001")
    return value


def fragment(value: Any, node: str) -> str:
    """A raw FRR configuration fragment, applied with vtysh after the daemons start."""
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > MAX_FRAGMENT or "\x00" in value:
        raise TopologyError(f"node {node}: frr must be text of FRR configuration commands "
                            f"(at most {MAX_FRAGMENT} characters)")
    return value


def cost(value: Any, link: str, routing: Routing) -> int | None:
    if value is None:
        return None
    if routing.protocol != "ospf":
        raise TopologyError(f"link {link}: cost is an OSPF cost and needs routing = 'ospf'")
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COST:
        raise TopologyError(f"link {link}: cost = {value!r} must be a whole number from 1 to "
                            f"{MAX_COST}")
    return value


def check_autonomous_systems(asns: dict[str, int | None],
                             adjacencies: Iterable[tuple[str, str]]) -> None:
    """Every router or none has an AS number, and each AS's routers reach one another
    without leaving it (its OSPF and iBGP run over its own links)."""
    given = {router for router, number in asns.items() if number is not None}
    if given and given != set(asns):
        missing = sorted(set(asns) - given)[0]
        raise TopologyError(f"node {missing}: asn is missing (when one router has an asn, "
                            "every router needs one)")
    if not given:
        return
    inside: dict[str, set[str]] = {router: set() for router in asns}
    for a, b in adjacencies:
        if asns[a] == asns[b]:
            inside[a].add(b)
            inside[b].add(a)
    for number in sorted({n for n in asns.values() if n is not None}):
        members = sorted(r for r, n in asns.items() if n == number)
        reached, frontier = {members[0]}, [members[0]]
        while frontier:
            for neighbour in inside[frontier.pop()]:
                if neighbour not in reached:
                    reached.add(neighbour)
                    frontier.append(neighbour)
        stranded = [r for r in members if r not in reached]
        if stranded:
            raise TopologyError(f"AS {number}: {stranded[0]} cannot reach {members[0]} over "
                                "links inside the AS (its OSPF and iBGP need a path inside it)")
