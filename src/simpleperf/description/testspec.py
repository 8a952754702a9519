"""The test description: what both ends of a test run, whatever protocol carried it. The
native protocol encodes it field by field (protocol/native.py: spec_message, parse_spec),
iperf3's as its parameter JSON (protocol/iperf3.py: parameters_message,
spec_from_parameters); the engine runs it. As iperf3's one `struct iperf_test`: one
description, several encodings."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from .options import (
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
    ClientOptions,
    is_congestion_name,
    is_int,
    is_number,
    stream_count,
)
from .transports import NAMES, TCP, UDP, Transport, transport_of

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


def _field(default: Any, rule: Rule, iperf3: tuple[str, ...] | Uncarried,
           flag: Flag | None = None) -> Any:
    """A field of TestSpec: its default, its rule and the iperf3 parameters that carry it
    (IPERF3_IGNORES: none, and an iperf3 peer runs the same test without it; Uncarried:
    none, and a test that needs it of an iperf3 server is refused), and the flag that sets
    it where the field declares its own (Flag), declared together."""
    return field(default=default, metadata={"rule": rule, "iperf3": iperf3, "flag": flag})


# No iperf3 parameter carries the field, and an iperf3 peer runs the same test without it
# (only what our end keeps or shows differs)
IPERF3_IGNORES: tuple[str, ...] = ()
FLAG = Rule(bool)
RATE = Rule(float, 0, MAX_RATE)  # bits/s; 0 is none
ONE_WAY = Uncarried("--trip-times", "both", "measures no one-way delay")
HISTOGRAMS = Uncarried("--histograms", "receiver", "measures no one-way delay")
FRAMES = Uncarried("--isochronous", "both", "measures no one-way delay")


@dataclass(frozen=True)
class TestSpec:
    """What the client asks the server to run. Sizes in bytes, rates in bits/s."""

    __test__ = False  # a test description, not a pytest test class

    # Each field: its default, its rule, the iperf3 parameters that carry it (or that none do)
    protocol: str = _field("tcp", Rule(str, choices=PROTOCOLS), ("tcp", "udp"))
    # forward: the client sends; reverse: the server sends; bidir: both
    direction: str = _field("forward", Rule(str, choices=DIRECTIONS),
                            ("reverse", "bidirectional"))
    parallel: int = _field(1, Rule(int, 1, MAX_PARALLEL), ("parallel",))
    # seconds of measurement after the omitted ones; None: an amount instead (num_bytes)
    duration: float | None = _field(
        10.0, Rule(float, 0, MAX_TEST_SECONDS, above=True, optional=True), ("time",))
    num_bytes: int | None = _field(  # per stream
        None, Rule(int, 0, MAX_NUM_BYTES, above=True, optional=True), ("num",))
    # the write size (TCP) or datagram size (UDP)
    length: int = _field(128 * 1024, Rule(int, MIN_LENGTH, MAX_LENGTH), ("len",))
    rate: float = _field(0.0, RATE, ("bandwidth",))  # per stream; 0 is unlimited
    window: int | None = _field(None, Rule(int, MIN_WINDOW, MAX_WINDOW, optional=True),
                                ("window",))
    congestion: str | None = _field(None, Rule(str, word=is_congestion_name, optional=True),
                                    ("congestion",))
    mss: int | None = _field(None, Rule(int, MIN_MSS, MAX_MSS, optional=True), ("MSS",))
    nodelay: bool = _field(False, FLAG, ("nodelay",))
    omit: float = _field(0.0, Rule(float, 0, MAX_OMIT), ("omit",))
    zerocopy: bool = _field(False, FLAG, ("zerocopy",))  # TCP senders use sendfile
    # the IP TOS byte of every data packet, both ends (-S, --dscp)
    tos: int = _field(0, Rule(int, 0, 255), ("TOS",))
    # seconds per interval the server keeps
    sample: float = _field(DEFAULT_NATIVE_INTERVAL,
                           Rule(float, MIN_SERVER_SAMPLE, MAX_SERVER_SAMPLE), IPERF3_IGNORES)
    # payload '0123456789...' rather than zeros, both ends
    repeating_payload: bool = _field(False, FLAG, ("repeating_payload",), Flag(
        "--repeating-payload", "payload '0123456789...' (as iperf3's) instead of zeros, "
        "both ends"))
    # the CPU the server's streams of this test run on (-A n,m)
    affinity: int | None = _field(None, Rule(int, 0, MAX_CPU, optional=True),
                                  ("server_affinity",))
    # receivers time every datagram or write from send to read
    trip_times: bool = _field(False, FLAG, ONE_WAY)
    histogram_bin_width: float = _field(  # seconds, for those delays
        DEFAULT_HISTOGRAM_BIN_WIDTH,
        Rule(float, MIN_HISTOGRAM_BIN_WIDTH, MAX_HISTOGRAM_BIN_WIDTH), HISTOGRAMS)
    histogram_bins: int = _field(DEFAULT_HISTOGRAM_BINS, Rule(int, 1, MAX_HISTOGRAM_BINS),
                                 HISTOGRAMS)
    # --isochronous: frames a second (0: a steady stream), their mean load (bits/s) and
    # its standard deviation (log-normal frame sizes)
    frame_rate: float = _field(0.0, Rule(float, 0, MAX_FRAME_RATE), FRAMES)
    frame_load: float = _field(DEFAULT_FRAME_LOAD, Rule(float, 0, MAX_RATE, above=True),
                               FRAMES)
    frame_stdev: float = _field(0.0, RATE, FRAMES)
    # TCP senders round writes down to whole segments (no -l)
    whole_segments: bool = _field(False, FLAG, IPERF3_IGNORES)
    # bits/s a sender's socket paces itself to (iperf3's --fq-rate)
    fq_rate: float = _field(0.0, RATE, ("fqrate",), Flag(
        "--fq-rate", "every sending socket paces itself to RATE (SO_MAX_PACING_RATE, as "
        "iperf3's: TCP on any qdisc, UDP under fq); against a simpleperf or iperf3 server "
        "its senders too", "iperf3", value="rate", metavar="RATE"))
    # UDP: ECT(1) datagrams, the rate set by CE-mark feedback (engine/l4s)
    l4s: bool = _field(False, FLAG, Uncarried(
        "--l4s", "both", "sends no feedback of CE marks"))
    # TCP senders: bytes that may wait unsent (TCP_NOTSENT_LOWAT)
    write_prefetch: int = _field(0, Rule(int, 0, MAX_LENGTH), Uncarried(
        "--tcp-write-prefetch", "sender", "cannot be asked to limit what it leaves unsent"))
    # TCP receivers acknowledge at once: TCP_QUICKACK before every read, as iperf2's
    quickack: bool = _field(False, FLAG, Uncarried(
        "--tcp-quickack", "receiver", "cannot be asked to acknowledge at once"), Flag(
        "--tcp-quickack", "TCP receivers, ours and the server's: TCP_QUICKACK before every "
        "read, so no ACK waits for the delayed-ACK timer (iperf2's)", "iperf2"))

    @classmethod
    def from_options(cls, options: ClientOptions) -> TestSpec:
        """What a client's command line asks for (--l4s: -b is a ceiling, none by default)."""
        rate = options.rate if options.rate is not None else (
            DEFAULT_UDP_RATE if options.udp and not options.l4s else 0.0)
        return cls(
            protocol=(UDP if options.udp else TCP).name, direction=options.direction,
            parallel=options.parallel,
            duration=None if options.num_bytes is not None else options.duration,
            num_bytes=options.num_bytes, length=options.length, rate=rate,
            window=options.window, congestion=options.congestion, mss=options.mss,
            nodelay=options.nodelay, omit=options.omit, zerocopy=options.zerocopy,
            tos=options.tos, sample=min(max(options.rows_every or DEFAULT_NATIVE_INTERVAL,
                                            MIN_SERVER_SAMPLE), MAX_SERVER_SAMPLE),
            affinity=options.server_affinity,
            trip_times=options.trip_times or options.frame_rate > 0,
            histogram_bin_width=options.histogram_bin_width,
            histogram_bins=options.histogram_bins,
            frame_rate=options.frame_rate, frame_load=options.frame_load,
            frame_stdev=options.frame_stdev,
            whole_segments=not options.udp and not options.length_given, l4s=options.l4s,
            write_prefetch=options.write_prefetch, **dict(options.described))

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


# Every field's rule, by name: what a peer's description is checked against
RULES: dict[str, Rule] = {item.name: item.metadata["rule"] for item in fields(TestSpec)}
# The fields that declare the flag that sets them, by name
FLAGS: dict[str, Flag] = {item.name: item.metadata["flag"] for item in fields(TestSpec)
                          if item.metadata["flag"] is not None}
# The fields no iperf3 parameter carries that the peer must honour, by name
UNCARRIED: dict[str, Uncarried] = {item.name: item.metadata["iperf3"]
                                   for item in fields(TestSpec)
                                   if isinstance(item.metadata["iperf3"], Uncarried)}


def beyond_iperf3(spec: TestSpec) -> tuple[str, str] | None:
    """What an iperf3 server would have to honour in this test (at the end its streams
    have there: it receives forward, sends reverse, both with bidir) and cannot be told:
    the flags, as "--a and --b need a simpleperf server", and what it lacks; None: an
    iperf3 server runs this test."""
    server_ends = {"forward": {"receiver"}, "reverse": {"sender"}}.get(
        spec.direction, {"sender", "receiver"})
    defaults = TestSpec()
    flags: list[str] = []
    lacks = ""
    for name, uncarried in UNCARRIED.items():
        if getattr(spec, name) == getattr(defaults, name) or not (
                uncarried.end == "both" or uncarried.end in server_ends):
            continue
        lacks = lacks or uncarried.lacks
        if uncarried.lacks == lacks and uncarried.flag not in flags:
            flags.append(uncarried.flag)
    if not flags:
        return None
    named = flags[0] if len(flags) == 1 else ", ".join(flags[:-1]) + " and " + flags[-1]
    return f"{named} need{'s' if len(flags) == 1 else ''} a simpleperf server", lacks
