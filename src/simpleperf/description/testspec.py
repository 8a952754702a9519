"""The test description: what both ends of a test run, whatever protocol carried it. The
command line builds it (command_line/cli.py, into ClientOptions.test); the native protocol
encodes it field by field (protocol/native.py: spec_message, parse_spec), iperf3's as its
parameter JSON (protocol/iperf3.py: parameters_message, spec_from_parameters), iperf2's as
its header (protocol/iperf2.py); the engine runs it. As iperf3's one `struct iperf_test`:
one description, several encodings. Each field says once its default, its rule, what
iperf3 and a classic peer make of it and, where it declares it, its flag."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .options import (
    CLASSIC_MAX_PARALLEL,
    DEFAULT_FRAME_LOAD,
    DEFAULT_HISTOGRAM_BIN_WIDTH,
    DEFAULT_HISTOGRAM_BINS,
    DEFAULT_NATIVE_INTERVAL,
    DEFAULT_UDP_RATE,
    MAX_CPU,
    MAX_FRAME_RATE,
    MAX_HISTOGRAM_BIN_WIDTH,
    MAX_HISTOGRAM_BINS,
    MAX_LENGTH,
    MAX_MSS,
    MAX_NUM_BYTES,
    MAX_OMIT,
    MAX_PARALLEL,
    MAX_RATE,
    MAX_SERVER_SAMPLE,
    MAX_TEST_SECONDS,
    MAX_WINDOW,
    MIN_HISTOGRAM_BIN_WIDTH,
    MIN_LENGTH,
    MIN_MSS,
    MIN_SERVER_SAMPLE,
    MIN_WINDOW,
    is_congestion_name,
    is_int,
    is_number,
    stream_count,
)
from .transports import NAMES, Transport, transport_of

DIRECTIONS = ("forward", "reverse", "bidir")
PROTOCOLS = NAMES


@dataclass(frozen=True)
class Rule:
    """What one field of the test description may hold when a peer sends it: its kind
    (bool, int, float: any number, str), its bounds (inclusive; `above`: the lower one
    excluded), a word's choices or test, and whether None (not given) is allowed."""

    kind: type
    low: float | None = None
    high: float | None = None
    above: bool = False
    choices: tuple[str, ...] = ()
    word: Callable[[object], bool] | None = None
    optional: bool = False

    def allows(self, value: object) -> bool:
        if value is None:
            return self.optional
        if self.kind is bool or isinstance(value, bool):
            return self.kind is bool and isinstance(value, bool)
        if self.kind is str:
            return isinstance(value, str) and (
                value in self.choices if self.choices else bool(self.word and self.word(value)))
        if not is_number(value) or (self.kind is int and not is_int(value)):
            return False
        low_ok = self.low is None or (value > self.low if self.above else value >= self.low)
        return low_ok and (self.high is None or value <= self.high)


@dataclass(frozen=True)
class Uncarried:
    """A field no iperf3 parameter carries that the peer must honour all the same: the flag
    that sets it, the end of each stream that honours it (sender, receiver or both) and
    what an iperf3 server lacks, for the line that refuses the test."""

    flag: str
    end: str
    lacks: str


@dataclass(frozen=True)
class Flag:
    """The client's flag that sets a field, declared with the field: named `name`, shown
    with `help` in --help, the man page and the reference, in the section of its `family`'s
    flags ("native": ours, "iperf2", "iperf3"). A switch where the field is a bool; else
    `value` names the command line's reader of its text (command_line/flag_values.py: a
    key of cli.READERS, such as "rate"), shown as `metavar`. The command line adds it,
    refuses it on a server and hands its value to from_options by itself."""

    name: str
    help: str
    family: str = "native"
    value: str | None = None
    metavar: str | None = None


# What a classic Simpleperf peer makes of a field (`classic` of _field): True, it runs the
# test with any value (its own -t, -n, -l, or what the client's sockets alone do); a Rule,
# within it; else only the default, and a test that asks more is refused naming the flag
# given here (a str, or one per value), or the field's own Flag.
Classic = bool | Rule | str | dict[str, str] | None
# What carries a field to a peer of another tool: the parts of its message that do (iperf3:
# its parameters' keys; iperf2: ClientHeader's fields, "transport" for the socket's kind);
# () none, and that peer runs the same test without it; Uncarried: none, and a test that
# needs it of that peer's server is refused.
Carried = tuple[str, ...] | Uncarried


def _field(default: Any, rule: Rule, iperf3: Carried, flag: Flag | None = None, *,
           iperf2: Carried, classic: Classic = None) -> Any:
    """A field of TestSpec, declared together: its default, its rule, what carries it to
    an iperf3 and to an iperf2 peer (Carried), the flag that sets it where the field
    declares its own (Flag), and what a classic peer makes of it (Classic)."""
    return field(default=default, metadata={"rule": rule, "iperf3": iperf3, "iperf2": iperf2,
                                            "flag": flag, "classic": classic})


# Nothing in that peer's message carries the field, and the peer runs the same test without
# it (only what our end keeps or shows differs, or our socket alone does it)
IPERF3_IGNORES: tuple[str, ...] = ()
IGNORED: tuple[str, ...] = ()
FLAG = Rule(bool)
RATE = Rule(float, 0, MAX_RATE)  # bits/s; 0 is none
ONE_WAY = Uncarried("--trip-times", "both", "measures no one-way delay")
HISTOGRAMS = Uncarried("--histograms", "receiver", "measures no one-way delay")
FRAMES = Uncarried("--isochronous", "both", "measures no one-way delay")
L4S = Uncarried("--l4s", "both", "sends no feedback of CE marks")
PREFETCH = Uncarried("--tcp-write-prefetch", "sender",
                     "cannot be asked to limit what it leaves unsent")
# iperf2's header flags frames (UPPER_ISOCH); our client leaves out their rate and sizes,
# which a sending iperf2 server would need
FRAMES_IPERF2 = Uncarried("--isochronous", "sender", "is not told the frames' rate and sizes")


@dataclass(frozen=True)
class TestSpec:
    """What the client asks the server to run. Sizes in bytes, rates in bits/s."""

    __test__ = False  # a test description, not a pytest test class

    # Each field: its default, its rule, what carries it to an iperf3 and an iperf2 peer
    # (or that nothing does), and what a classic peer makes of it
    protocol: str = _field("tcp", Rule(str, choices=PROTOCOLS), ("tcp", "udp"),
                           iperf2=("transport",), classic="-u")
    # forward: the client sends; reverse: the server sends; bidir: both
    direction: str = _field("forward", Rule(str, choices=DIRECTIONS),
                            ("reverse", "bidirectional"), iperf2=("upper", "flags"),
                            classic={"reverse": "-R", "bidir": "--bidir"})
    parallel: int = _field(1, Rule(int, 1, MAX_PARALLEL), ("parallel",), iperf2=("threads",),
                           classic=Rule(int, 1, CLASSIC_MAX_PARALLEL))
    # seconds of measurement after the omitted ones; None: an amount instead (num_bytes)
    duration: float | None = _field(
        10.0, Rule(float, 0, MAX_TEST_SECONDS, above=True, optional=True), ("time",),
        iperf2=("amount",), classic=True)
    num_bytes: int | None = _field(  # per stream
        None, Rule(int, 0, MAX_NUM_BYTES, above=True, optional=True), ("num",),
        iperf2=("amount",), classic=True)
    # the write size (TCP) or datagram size (UDP)
    length: int = _field(128 * 1024, Rule(int, MIN_LENGTH, MAX_LENGTH), ("len",),
                         iperf2=("buffer_length",), classic=True)
    # per stream; 0: unlimited (to iperf2: where its server sends, or UDP)
    rate: float = _field(0.0, RATE, ("bandwidth",), iperf2=("rate",), classic="-b")
    # the client's sockets alone, for a classic peer (and MSS for an iperf2 one: the SYN)
    window: int | None = _field(None, Rule(int, MIN_WINDOW, MAX_WINDOW, optional=True),
                                ("window",), iperf2=("window",), classic=True)
    congestion: str | None = _field(
        None, Rule(str, word=is_congestion_name, optional=True), ("congestion",),
        iperf2=Uncarried("-C/--congestion", "sender", "is not told a congestion control"),
        classic=True)
    mss: int | None = _field(None, Rule(int, MIN_MSS, MAX_MSS, optional=True), ("MSS",),
                             iperf2=IGNORED, classic=True)
    nodelay: bool = _field(False, FLAG, ("nodelay",), iperf2=Uncarried(
        "-N/--no-delay", "sender", "is not told to send at once"), classic=True)
    omit: float = _field(0.0, Rule(float, 0, MAX_OMIT), ("omit",), iperf2=Uncarried(
        "-O/--omit", "both", "counts from the first byte"), classic="-O")
    zerocopy: bool = _field(False, FLAG, ("zerocopy",), iperf2=Uncarried(  # senders: sendfile
        "--zerocopy", "sender", "is not told to send without copies"), classic="-Z")
    # the IP TOS byte of every data packet, both ends (-S, --dscp)
    tos: int = _field(0, Rule(int, 0, 255), ("TOS",), iperf2=("tos",), classic="-S/--dscp")
    # seconds per interval the server keeps (from the client's -i)
    sample: float = _field(DEFAULT_NATIVE_INTERVAL,
                           Rule(float, MIN_SERVER_SAMPLE, MAX_SERVER_SAMPLE), IPERF3_IGNORES,
                           iperf2=IGNORED, classic=True)
    # payload '0123456789...' rather than zeros, both ends (an iperf2 server's always is)
    repeating_payload: bool = _field(False, FLAG, ("repeating_payload",), Flag(
        "--repeating-payload", "payload '0123456789...' (as iperf3's) instead of zeros, "
        "both ends"), iperf2=IGNORED)
    # the CPU the server's streams of this test run on (-A n,m)
    affinity: int | None = _field(None, Rule(int, 0, MAX_CPU, optional=True),
                                  ("server_affinity",), iperf2=Uncarried(
                                      "-A N,M", "both", "is not told a CPU for its streams"),
                                  classic="-A N,M")
    # receivers time every datagram or write from send to read (with frames too)
    trip_times: bool = _field(False, FLAG, ONE_WAY, iperf2=("upper",), classic="--trip-times")
    # seconds, for those delays (an iperf2 server bins its own as it is told on its side)
    histogram_bin_width: float = _field(
        DEFAULT_HISTOGRAM_BIN_WIDTH,
        Rule(float, MIN_HISTOGRAM_BIN_WIDTH, MAX_HISTOGRAM_BIN_WIDTH), HISTOGRAMS,
        iperf2=IGNORED, classic=True)
    histogram_bins: int = _field(DEFAULT_HISTOGRAM_BINS, Rule(int, 1, MAX_HISTOGRAM_BINS),
                                 HISTOGRAMS, iperf2=IGNORED, classic=True)
    # --isochronous: frames a second (0: a steady stream), their mean load (bits/s) and
    # its standard deviation (log-normal frame sizes)
    frame_rate: float = _field(0.0, Rule(float, 0, MAX_FRAME_RATE), FRAMES,
                               iperf2=FRAMES_IPERF2, classic="--isochronous")
    frame_load: float = _field(DEFAULT_FRAME_LOAD, Rule(float, 0, MAX_RATE, above=True),
                               FRAMES, iperf2=FRAMES_IPERF2, classic=True)
    frame_stdev: float = _field(0.0, RATE, FRAMES, iperf2=FRAMES_IPERF2, classic=True)
    # TCP senders round writes down to whole segments (no -l)
    whole_segments: bool = _field(False, FLAG, IPERF3_IGNORES, iperf2=IGNORED, classic=True)
    # bits/s a sender's socket paces itself to (iperf3's --fq-rate)
    fq_rate: float = _field(0.0, RATE, ("fqrate",), Flag(
        "--fq-rate", "every sending socket paces itself to RATE (SO_MAX_PACING_RATE, as "
        "iperf3's: TCP on any qdisc, UDP under fq); against a simpleperf or iperf3 server "
        "its senders too", "iperf3", value="rate", metavar="RATE"), iperf2=Uncarried(
        "--fq-rate", "sender", "is not told a pacing rate"))
    # UDP: ECT(1) datagrams, the rate set by CE-mark feedback (engine/l4s)
    l4s: bool = _field(False, FLAG, L4S, iperf2=L4S, classic="--l4s")
    # TCP senders: bytes that may wait unsent (TCP_NOTSENT_LOWAT); a classic client's own
    write_prefetch: int = _field(0, Rule(int, 0, MAX_LENGTH), PREFETCH, iperf2=PREFETCH,
                                 classic=True)
    # TCP receivers acknowledge at once: TCP_QUICKACK before every read, as iperf2's
    quickack: bool = _field(False, FLAG, Uncarried(
        "--tcp-quickack", "receiver", "cannot be asked to acknowledge at once"), Flag(
        "--tcp-quickack", "TCP receivers, ours and the server's: TCP_QUICKACK before every "
        "read, so no ACK waits for the delayed-ACK timer (iperf2's)", "iperf2"),
        iperf2=("upper",))

    def settled(self, given: frozenset[str], rows_every: float | None) -> TestSpec:
        """What the command line's values make of the fields no flag gave (`given`: those
        a flag did): -b's default (iperf3's 1 Mbit/s for UDP; none for TCP and --l4s,
        whose -b is a ceiling), the server's sample step from -i, whole TCP segments
        without -l, a test of an amount without a time, frames timed."""
        rate = self.rate if "rate" in given else (
            DEFAULT_UDP_RATE if self.transport.datagrams and not self.l4s else 0.0)
        return replace(
            self, rate=rate,
            duration=None if self.num_bytes is not None else self.duration,
            sample=min(max(rows_every or DEFAULT_NATIVE_INTERVAL, MIN_SERVER_SAMPLE),
                       MAX_SERVER_SAMPLE),
            whole_segments=not self.transport.datagrams and "length" not in given,
            trip_times=self.trip_times or self.frame_rate > 0)

    @property
    def transport(self) -> Transport:
        """TCP or UDP: what differs between them (transports.py)."""
        return transport_of(self.protocol)

    @property
    def isochronous(self) -> bool:
        return self.frame_rate > 0

    @property
    def omitted_frames(self) -> int:
        """Frames -O leaves out, at both ends: those due before omitting ends (one every
        1 / frame_rate seconds from the start)."""
        return math.ceil(self.omit * self.frame_rate - 1e-9) if self.isochronous else 0

    @property
    def timed(self) -> bool:
        """Receivers time what arrives (--trip-times, or frames), so TCP writes carry
        WRITE_HEADER."""
        return self.trip_times or self.isochronous

    @property
    def end(self) -> float | None:
        """Seconds after the start at which a timed test ends (after -O); None for a test
        of an amount of data."""
        return None if self.duration is None else self.omit + self.duration

    def stream_count(self) -> int:
        return stream_count(self.parallel, self.direction)

    def client_sends(self, stream: int) -> bool:
        """Streams 1..P carry the forward direction; with bidir P+1..2P the reverse."""
        if self.direction == "forward":
            return True
        if self.direction == "reverse":
            return False
        return stream <= self.parallel


_DEFAULTS = TestSpec()
# Every field's rule, by name: what a peer's description is checked against
RULES: dict[str, Rule] = {item.name: item.metadata["rule"] for item in fields(TestSpec)}
# The fields that declare the flag that sets them, by name
FLAGS: dict[str, Flag] = {item.name: item.metadata["flag"] for item in fields(TestSpec)
                          if item.metadata["flag"] is not None}
# The fields no iperf3 parameter carries that the peer must honour, by name
def _uncarried(peer: str) -> dict[str, Uncarried]:
    return {item.name: item.metadata[peer] for item in fields(TestSpec)
            if isinstance(item.metadata[peer], Uncarried)}


# The fields no iperf3 (iperf2) message carries that the peer must honour, by name
UNCARRIED = _uncarried("iperf3")
UNCARRIED_IPERF2 = _uncarried("iperf2")

# What a classic peer makes of each field, by name (Classic)
CLASSIC: dict[str, Classic] = {item.name: item.metadata["classic"] for item in fields(TestSpec)}


def _classic_allows(name: str, value: object) -> bool:
    classic = CLASSIC[name]
    if isinstance(classic, Rule):
        return classic.allows(value)
    return classic is True or value == getattr(_DEFAULTS, name)


def needs_more_than_classic(spec: TestSpec, given: frozenset[str]) -> bool:
    """Whether the fields a flag gave (`given`) ask what a classic test cannot run."""
    return any(not _classic_allows(name, getattr(spec, name)) for name in given)


def beyond_classic(spec: TestSpec, given: frozenset[str]) -> list[str]:
    """The flags of what a classic peer cannot run in this test, as a refusal names them
    (in the fields' order; those a Rule bounds are not named)."""
    named = []
    for name in RULES:
        value = getattr(spec, name)
        if name not in given or _classic_allows(name, value):
            continue
        classic = CLASSIC[name]
        if isinstance(classic, str):
            named.append(classic)
        elif isinstance(classic, dict):
            named.append(classic[value])
        elif classic is None:
            named.append(FLAGS[name].name)
    return named


def beyond_iperf3(spec: TestSpec) -> tuple[str, str] | None:
    """What an iperf3 server would have to honour in this test and cannot be told (what
    _beyond says); None: an iperf3 server runs this test."""
    return _beyond(spec, UNCARRIED)


def beyond_iperf2(spec: TestSpec) -> tuple[str, str] | None:
    """What an iperf2 server would have to honour in this test and cannot be told by its
    header (what _beyond says); None: an iperf2 server runs this test."""
    return _beyond(spec, UNCARRIED_IPERF2)


def _beyond(spec: TestSpec, uncarried_fields: dict[str, Uncarried]) -> tuple[str, str] | None:
    """What a server would have to honour in this test (at the end its streams have there:
    it receives forward, sends reverse, both with bidir) and its protocol cannot tell it:
    the flags, as "--a and --b need a simpleperf server", and what it lacks."""
    server_ends = {"forward": {"receiver"}, "reverse": {"sender"}}.get(
        spec.direction, {"sender", "receiver"})
    flags: list[str] = []
    lacks = ""
    for name, uncarried in uncarried_fields.items():
        if getattr(spec, name) == getattr(_DEFAULTS, name) or not (
                uncarried.end == "both" or uncarried.end in server_ends):
            continue
        lacks = lacks or uncarried.lacks
        if uncarried.lacks == lacks and uncarried.flag not in flags:
            flags.append(uncarried.flag)
    if not flags:
        return None
    named = flags[0] if len(flags) == 1 else ", ".join(flags[:-1]) + " and " + flags[-1]
    return f"{named} need{'s' if len(flags) == 1 else ''} a simpleperf server", lacks
