"""The test description: what both ends of a test run, whatever protocol carried it. The
native protocol encodes it field by field (protocol/native.py: spec_message, parse_spec),
iperf3's as its parameter JSON (protocol/iperf3.py: parameters_message,
spec_from_parameters); the engine runs it. As iperf3's one `struct iperf_test`: one
description, several encodings."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .delays import Binning
from .options import (
    DEFAULT_FRAME_LOAD,
    DEFAULT_HISTOGRAM_BIN_WIDTH,
    DEFAULT_HISTOGRAM_BINS,
    DEFAULT_NATIVE_INTERVAL,
    DEFAULT_UDP_RATE,
    MAX_SERVER_SAMPLE,
    MIN_SERVER_SAMPLE,
    ClientOptions,
)

DIRECTIONS = ("forward", "reverse", "bidir")


@dataclass(frozen=True)
class TestSpec:
    """What the client asks the server to run. Sizes in bytes, rates in bits/s."""

    __test__ = False  # a test description, not a pytest test class

    protocol: str = "tcp"  # tcp | udp
    direction: str = "forward"  # forward: client sends; reverse: server sends; bidir: both
    parallel: int = 1
    duration: float | None = 10.0  # seconds of measurement after the omitted ones
    num_bytes: int | None = None  # per stream, instead of a duration
    length: int = 128 * 1024  # write size (TCP) or datagram size (UDP)
    rate: float = 0.0  # per stream; 0 is unlimited
    window: int | None = None
    congestion: str | None = None
    mss: int | None = None
    nodelay: bool = False
    omit: float = 0.0
    zerocopy: bool = False  # TCP senders use sendfile
    tos: int = 0  # the IP TOS byte of every data packet, both ends (-S, --dscp)
    sample: float = DEFAULT_NATIVE_INTERVAL  # seconds per interval the server keeps
    repeating_payload: bool = False  # payload '0123456789...' rather than zeros, both ends
    affinity: int | None = None  # the CPU the server's streams of this test run on (-A n,m)
    trip_times: bool = False  # receivers time every datagram or write from send to read
    histogram_bin_width: float = DEFAULT_HISTOGRAM_BIN_WIDTH  # seconds, for those delays
    histogram_bins: int = DEFAULT_HISTOGRAM_BINS
    frame_rate: float = 0.0  # --isochronous: frames a second (0: a steady stream)
    frame_load: float = DEFAULT_FRAME_LOAD  # ... their mean load, bits/s
    frame_stdev: float = 0.0  # ... its standard deviation (log-normal frame sizes)
    whole_segments: bool = False  # TCP senders round writes down to whole segments (no -l)
    fq_rate: float = 0.0  # bits/s a sender's socket paces itself to (iperf3's --fq-rate)
    l4s: bool = False  # UDP: ECT(1) datagrams, the rate set by CE-mark feedback (engine/l4s)
    write_prefetch: int = 0  # TCP senders: bytes that may wait unsent (TCP_NOTSENT_LOWAT)

    @classmethod
    def from_options(cls, options: ClientOptions) -> TestSpec:
        """What a client's command line asks for (--l4s: -b is a ceiling, none by default)."""
        rate = options.rate if options.rate is not None else (
            DEFAULT_UDP_RATE if options.udp and not options.l4s else 0.0)
        return cls(
            protocol="udp" if options.udp else "tcp", direction=options.direction,
            parallel=options.parallel,
            duration=None if options.num_bytes is not None else options.duration,
            num_bytes=options.num_bytes, length=options.length, rate=rate,
            window=options.window, congestion=options.congestion, mss=options.mss,
            nodelay=options.nodelay, omit=options.omit, zerocopy=options.zerocopy,
            tos=options.tos, sample=min(max(options.rows_every or DEFAULT_NATIVE_INTERVAL,
                                            MIN_SERVER_SAMPLE), MAX_SERVER_SAMPLE),
            repeating_payload=options.repeating_payload, affinity=options.server_affinity,
            trip_times=options.trip_times or options.frame_rate > 0,
            histogram_bin_width=options.histogram_bin_width,
            histogram_bins=options.histogram_bins,
            frame_rate=options.frame_rate, frame_load=options.frame_load,
            frame_stdev=options.frame_stdev,
            whole_segments=not options.udp and not options.length_given, l4s=options.l4s,
            fq_rate=options.fq_rate, write_prefetch=options.write_prefetch)

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
    def binning(self) -> Binning:
        return Binning(self.histogram_bin_width, self.histogram_bins)

    @property
    def end(self) -> float | None:
        """Seconds after the start at which a timed test ends (after -O); None for a test
        of an amount of data."""
        return None if self.duration is None else self.omit + self.duration

    def stream_count(self) -> int:
        return self.parallel * (2 if self.direction == "bidir" else 1)

    def client_sends(self, stream: int) -> bool:
        """Streams 1..P carry the forward direction; with bidir P+1..2P the reverse."""
        if self.direction == "forward":
            return True
        if self.direction == "reverse":
            return False
        return stream <= self.parallel
