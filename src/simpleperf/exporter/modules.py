"""The exporter's modules: what one probe measures, as blackbox_exporter's modules say what
one of its probes does. Built-in modules run with no file; a TOML file adds or replaces
them:

    [modules.tcp_reverse]
    prober = "tcp"          # tcp, udp, rtt, rpm
    server = "simpleperf"   # simpleperf, iperf3, http (rpm: any responsiveness server)
    duration = "5s"
    direction = "reverse"   # forward (the exporter sends), reverse, bidir
    parallel = 2
    congestion = "bbr"
    dscp = "AF41"

Every mistake is one line naming the module and the field.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..description.options import MAX_PARALLEL, dscp_code, is_congestion_name
from ..description.transports import TCP, UDP, Transport
from ..units import parse_duration, parse_rate


@dataclass(frozen=True)
class Prober:
    """What a module's probe runs: a transfer over a transport (tcp, udp), round trips
    (rtt) or responsiveness (rpm)."""

    name: str
    transport: Transport  # its transfer's, or what its round trips go over
    transfer: bool  # a test of our client's (-t, -P, -R, --bidir, -b, -l, -C, --dscp)
    loads_path: bool  # one at a time per server: it would disturb another's figures
    rate: float | None = None  # bits/s when the module names none


PROBER_ROWS = (
    Prober("tcp", TCP, transfer=True, loads_path=True),
    Prober("udp", UDP, transfer=True, loads_path=True, rate=10e6),
    Prober("rtt", TCP, transfer=False, loads_path=False),
    Prober("rpm", TCP, transfer=False, loads_path=True),
)
PROBER_OF = {prober.name: prober for prober in PROBER_ROWS}
PROBERS = tuple(PROBER_OF)
DIRECTIONS = ("forward", "reverse", "bidir")
# What the targets are: http is any server of draft-ietf-ippm-responsiveness's endpoints
# over HTTPS (Apple's, Cloudflare's, nginx set up as Apple's, a simpleperf server), which
# the rpm prober measures as the draft does (-c URL --rpm)
SERVERS = ("simpleperf", "iperf3", "http")
HTTPS_PORT = 443
WELL_KNOWN = "/.well-known/nq"
MAX_DURATION = 300.0  # seconds: a probe must fit a scrape, and Prometheus' are minutes at most
MIN_DURATION = 0.5
MAX_CONFIG_BYTES = 1 << 20
MAX_MODULES = 1000
RTT_INTERVAL = 0.1  # seconds between the rtt prober's probes
# A module's keys in the --config file ([modules.NAME]), with what each says (the
# file-format reference's source); anything else is refused
MODULE_KEYS = {
    "prober": f"what a probe runs: {', '.join(repr(p) for p in PROBERS)} (default 'tcp')",
    "duration": f"seconds the test runs, {MIN_DURATION:g}..{MAX_DURATION:g} (default 5; "
                "rpm's time limit)",
    "direction": f"{', '.join(repr(d) for d in DIRECTIONS)} (default 'forward')",
    "parallel": "streams at once (default 1)",
    "rate": "bits/s a UDP test sends, `\"50M\"` (default 10 Mbit/s)",
    "length": "bytes a write or datagram",
    "congestion": "the sender's congestion control, e.g. `\"bbr\"`",
    "dscp": "the DSCP its packets carry: `\"EF\"` or 0..63",
    "server": f"what the targets run: {', '.join(repr(s) for s in SERVERS)} (default "
              "'simpleperf')",
    "trip_times": "`true`: one-way delays too (the two ends' clocks must agree)",
    "port": "the target's port when the target names none",
    "path": f"server = 'http': the configuration's path (default '{WELL_KNOWN}')",
    "insecure": "server = 'http': `true` accepts the target's certificate unchecked "
                "(a self-signed one)",
}


class ConfigError(ValueError):
    """A mistake in the modules file: one line."""


@dataclass(frozen=True)
class Module:
    name: str
    prober: str = "tcp"
    duration: float = 5.0  # seconds the test runs (rpm: its time limit)
    direction: str = "forward"
    parallel: int = 1
    rate: float | None = None  # bits/s (udp's default: 10 Mbit/s)
    length: int | None = None  # bytes per write or datagram
    congestion: str | None = None
    dscp: int | None = None
    server: str = "simpleperf"
    trip_times: bool = False  # one-way delays: the two ends' clocks must agree
    port: int | None = None  # the target's port when it names none
    path: str = WELL_KNOWN  # server = "http": the configuration's path
    insecure: bool = False  # server = "http": its certificate accepted unchecked
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def probes(self) -> Prober:
        return PROBER_OF[self.prober]

    @property
    def loads_the_path(self) -> bool:
        return self.probes.loads_path

    @property
    def transport(self) -> Transport:
        return self.probes.transport

    def directions(self) -> tuple[str, ...]:
        """The directions its results come in (bidir: both)."""
        if not self.probes.transfer:
            return ("forward",)
        return ("forward", "reverse") if self.direction == "bidir" else (self.direction,)


BUILT_IN = {module.name: module for module in (
    Module("tcp"),
    Module("tcp_reverse", direction="reverse"),
    Module("tcp_bidir", direction="bidir"),
    Module("udp", prober="udp", rate=10e6),
    Module("rtt", prober="rtt", duration=2.0),
    Module("rpm", prober="rpm", duration=10.0),
    Module("rpm_http", prober="rpm", duration=10.0, server="http"),
    Module("iperf3_tcp", server="iperf3"),
    Module("iperf3_udp", prober="udp", rate=10e6, server="iperf3"),
)}


def load(path: str | None) -> dict[str, Module]:
    """The built-in modules, with a file's added (a module of the same name replaced)."""
    modules = dict(BUILT_IN)
    if path is None:
        return modules
    try:
        with open(path, "rb") as source:
            data = source.read(MAX_CONFIG_BYTES + 1)
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path} is larger than {MAX_CONFIG_BYTES >> 20} MB")
    tables = _toml(data, path)
    unknown = sorted(set(tables) - {"modules"})
    if unknown:
        raise ConfigError(f"{path}: '{unknown[0]}' is not a table the exporter reads "
                          "(modules)")
    given = tables.get("modules", {})
    if not isinstance(given, dict) or len(given) > MAX_MODULES:
        raise ConfigError(f"{path}: modules must be tables, [modules.NAME], at most "
                          f"{MAX_MODULES}")
    for name, spec in given.items():
        modules[name] = parse(name, spec)
    return modules


def _toml(data: bytes, path: str) -> dict[str, Any]:
    """The file's tables. Its own reader, not the lab's: the exporter stands on the tool,
    beside the lab, and never imports it."""
    try:
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover - Python 3.10
            import tomli as tomllib
    except ImportError:
        raise ConfigError("reading a modules file on Python 3.10 needs tomli: pip install "
                          "'simpleperf[exporter]'") from None
    try:
        return tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"{Path(path).name}: not valid TOML: {error}") from None


def parse(name: str, spec: Any) -> Module:
    """One module's table."""
    where = f"module {name}"
    if not name.replace("_", "").replace("-", "").isalnum() or len(name) > 64:
        raise ConfigError(f"{where}: a name is letters, digits, '_' or '-' (at most 64)")
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: must be a table")
    unknown = sorted(set(spec) - set(MODULE_KEYS))
    if unknown:
        raise ConfigError(f"{where}: '{unknown[0]}' is not a field "
                          f"({', '.join(sorted(MODULE_KEYS))})")
    module = Module(name)
    values: dict[str, Any] = {}
    for key, choices in (("prober", PROBERS), ("direction", DIRECTIONS), ("server", SERVERS)):
        if key in spec:
            if spec[key] not in choices:
                raise ConfigError(f"{where}: {key} must be one of {', '.join(choices)}, not "
                                  f"{spec[key]!r}")
            values[key] = spec[key]
    if "duration" in spec:
        values["duration"] = _seconds(spec["duration"], f"{where}: duration")
    if "parallel" in spec:
        values["parallel"] = _whole(spec["parallel"], f"{where}: parallel", 1, MAX_PARALLEL)
    if "length" in spec:
        values["length"] = _whole(spec["length"], f"{where}: length", 16, 1 << 20)
    if "port" in spec:
        values["port"] = _whole(spec["port"], f"{where}: port", 1, 65535)
    if "rate" in spec:
        try:
            values["rate"] = parse_rate(str(spec["rate"]))
        except ValueError:
            raise ConfigError(f"{where}: rate {spec['rate']!r} is not a rate such as "
                              "'10M'") from None
    if "congestion" in spec:
        if not is_congestion_name(spec["congestion"]):
            raise ConfigError(f"{where}: congestion names a TCP congestion control, such as "
                              f"'cubic', not {spec['congestion']!r}")
        values["congestion"] = spec["congestion"]
    if "dscp" in spec:
        code = dscp_code(spec["dscp"])
        if code is None:
            raise ConfigError(f"{where}: dscp must be 0..63 or a name (EF, AF41, CS1, ...)")
        values["dscp"] = code
    for key in ("trip_times", "insecure"):
        if key in spec:
            if not isinstance(spec[key], bool):
                raise ConfigError(f"{where}: {key} must be true or false")
            values[key] = spec[key]
    if "path" in spec:
        path = spec["path"]
        if (not isinstance(path, str) or not path.startswith("/") or len(path) > 1000
                or any(c.isspace() or not c.isprintable() for c in path)):
            raise ConfigError(f"{where}: path must be a URL's path such as '{WELL_KNOWN}'")
        values["path"] = path
    module = replace(module, **values)
    if module.rate is None and module.probes.rate is not None:
        module = replace(module, rate=module.probes.rate)
    if module.server == "iperf3" and not module.probes.transfer:
        raise ConfigError(f"{where}: an iperf3 server runs tcp and udp tests only")
    if module.server == "iperf3" and module.trip_times:
        raise ConfigError(f"{where}: trip_times needs a simpleperf server (iperf3 has none)")
    if module.server == "http" and module.prober != "rpm":
        raise ConfigError(f"{where}: an http server is measured by the rpm prober only")
    if module.server != "http" and ("path" in spec or "insecure" in spec):
        raise ConfigError(f"{where}: path and insecure are for server = 'http'")
    return module


def _seconds(value: Any, where: str) -> float:
    try:
        seconds = parse_duration(str(value))
    except ValueError:
        raise ConfigError(f"{where}: {value!r} is not a time such as '5s'") from None
    if not MIN_DURATION <= seconds <= MAX_DURATION:
        raise ConfigError(f"{where}: must be from {MIN_DURATION:g} s to {MAX_DURATION:g} s")
    return seconds


def _whole(value: Any, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{where}: must be a whole number from {low} to {high}")
    return value
