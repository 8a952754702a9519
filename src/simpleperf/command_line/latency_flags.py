"""iperf2's latency flags on the command line: --trip-times, --histograms, --isochronous and
UDP's --l4s, their parsing and the combinations they refuse (each a one-line UsageError)."""

from __future__ import annotations

import argparse
from typing import Any

from .. import ecn
from ..description.client_options import ClientOptions
from ..description.options import (
    DEFAULT_FRAME_LOAD,
    DEFAULT_FRAME_RATE,
    DEFAULT_HISTOGRAM_BIN_WIDTH,
    DEFAULT_HISTOGRAM_BINS,
    DEFAULT_HISTOGRAM_LOWER_CI,
    DEFAULT_HISTOGRAM_UPPER_CI,
    MAX_FRAME_RATE,
    MAX_HISTOGRAM_BIN_WIDTH,
    MAX_HISTOGRAM_BINS,
    MAX_RATE,
    MIN_HISTOGRAM_BIN_WIDTH,
)
from ..errors import UsageError
from ..protocol.native import MAX_FRAME_DATAGRAMS, MIN_ISOCHRONOUS_UDP_LENGTH, WRITE_HEADER
from ..units import parse_rate

HISTOGRAMS_SHAPE = "[WIDTH[u|m],BINS[,LOWER,UPPER]] (e.g. 100u,10000 or 1m,1000,5,95)"
ISOCHRONOUS_SHAPE = "FPS:MEAN[,STDEV] (frames a second, their mean and deviation in bits/s, " \
    "e.g. 60:20M,2M)"


def add_arguments(group: Any) -> None:
    group.add_argument("--trip-times", action="store_true", help="one-way delay of every "
                       "datagram (UDP) or write (TCP), send to read, and its distribution "
                       "(the two ends' clocks must agree, as in the lab); over TCP both the "
                       "path's (from the kernel's send of each write: one_way_delay) and the "
                       "application's write-to-read delay, which includes the write's wait "
                       "in the sender's socket buffer (write_to_read_delay, iperf2's)")
    group.add_argument("--histograms", nargs="?", const="", metavar="WIDTH,BINS",
                       help="with --trip-times or --isochronous: print the delays' histograms "
                            "(iperf2's PDF lines); bins of WIDTH (default 100u: 100 us; m for "
                            "ms), BINS of them (default 10000), confidence bins LOWER,UPPER "
                            "percent (default 5,95)")
    group.add_argument("--isochronous", nargs="?", const="", metavar="FPS:MEAN,STDEV",
                       help="frames of a video stream: FPS a second, sizes log-normal around "
                            "MEAN bits/s (default 60:20M,0); per-frame latency and loss")
    group.add_argument("--l4s", "--udp-l4s", action="store_true",
                       help="UDP marked ECT(1), the L4S identifier, at the rate the receiver's "
                            "counts of CE marks set (a scalable response, as DCTCP and TCP "
                            "Prague have; -b is its ceiling, none by default; --udp-l4s is "
                            "iperf2's name)")


def apply(options: ClientOptions, args: argparse.Namespace) -> ClientOptions:
    """The client options with these flags' values, checked against the rest."""
    changes: dict[str, Any] = {name: True for name, given in (
        ("trip_times", args.trip_times), ("l4s", args.l4s)) if given}
    if args.histograms is not None:
        changes.update(histograms=True, **_histograms(args.histograms))
    if args.isochronous is not None:
        changes.update(parse_isochronous(args.isochronous))
    options = options.asking(**changes)
    _check(options)
    return options


def _histograms(text: str) -> dict[str, Any]:
    parts = [part.strip() for part in text.split(",")] if text else []
    if len(parts) not in (0, 1, 2, 4):
        raise UsageError(f"--histograms must be {HISTOGRAMS_SHAPE}, not '{text}'")
    try:
        width = _bin_width(parts[0]) if parts and parts[0] else DEFAULT_HISTOGRAM_BIN_WIDTH
        bins = int(parts[1]) if len(parts) > 1 else DEFAULT_HISTOGRAM_BINS
        ci = (float(parts[2]), float(parts[3])) if len(parts) == 4 else (
            DEFAULT_HISTOGRAM_LOWER_CI, DEFAULT_HISTOGRAM_UPPER_CI)
    except ValueError:
        raise UsageError(f"--histograms must be {HISTOGRAMS_SHAPE}, not '{text}'") from None
    if not MIN_HISTOGRAM_BIN_WIDTH <= width <= MAX_HISTOGRAM_BIN_WIDTH:
        raise UsageError(f"--histograms: the bin width must be 1u to "
                         f"{MAX_HISTOGRAM_BIN_WIDTH:g} s, not '{parts[0]}'")
    if not 1 <= bins <= MAX_HISTOGRAM_BINS:
        raise UsageError(f"--histograms: the bins must be 1 to {MAX_HISTOGRAM_BINS}, "
                         f"not '{parts[1]}'")
    if not 0 <= ci[0] < ci[1] <= 100:
        raise UsageError("--histograms: the confidence bins need 0 <= LOWER < UPPER <= 100, "
                         f"not '{parts[2]},{parts[3]}'")
    return {"histogram_bin_width": width, "histogram_bins": bins, "histogram_ci": ci}


def _bin_width(text: str) -> float:
    """iperf2's bin width: milliseconds, or with u microseconds (m: milliseconds)."""
    scale = 1e-3
    if text[-1:] in ("u", "m"):
        scale = 1e-6 if text[-1] == "u" else 1e-3
        text = text[:-1]
    value = float(text) * scale
    if value != value:
        raise ValueError(text)
    return value


def parse_isochronous(text: str) -> dict[str, float]:
    """FPS:MEAN,STDEV as ClientOptions' frame_rate, frame_load, frame_stdev; UsageError."""
    fps_text, colon, load_text = text.partition(":") if text else ("", "", "")
    mean_text, _, stdev_text = load_text.partition(",")
    try:
        fps = float(fps_text) if fps_text else DEFAULT_FRAME_RATE
        mean = parse_rate(mean_text) if mean_text else DEFAULT_FRAME_LOAD
        stdev = parse_rate(stdev_text) if stdev_text else 0.0
    except ValueError:
        raise UsageError(f"--isochronous must be {ISOCHRONOUS_SHAPE}, not '{text}'") from None
    if not 0 < fps <= MAX_FRAME_RATE or (text and not colon and fps_text != text):
        raise UsageError(f"--isochronous: frames a second must be above 0 and at most "
                         f"{MAX_FRAME_RATE:g}, not '{fps_text}'")
    if not 0 < mean <= MAX_RATE or not 0 <= stdev <= MAX_RATE:
        raise UsageError(f"--isochronous: the mean load must be above 0 and the deviation "
                         f"at least 0 (bits/s, e.g. 20M,2M), not '{load_text}'")
    return {"frame_rate": fps, "frame_load": mean, "frame_stdev": stdev}


def _check_l4s(options: ClientOptions) -> None:
    if not options.test.l4s:
        return
    if not options.test.transport.datagrams:
        raise UsageError("--l4s sets a UDP stream's rate from CE marks: add -u (TCP's "
                         "scalable response is the congestion control's: -C dctcp)")
    if options.test.frame_rate > 0:
        raise UsageError("--l4s sets the rate itself: it cannot be combined with "
                         "--isochronous")
    if ecn.of(options.test.tos):
        raise UsageError(f"--l4s sets the ECN field (ECT(1)): -S/--tos {options.test.tos} must "
                         "leave its two low bits 0")


def _check(options: ClientOptions) -> None:
    _check_l4s(options)
    timed = options.test.trip_times or options.test.frame_rate > 0
    if options.histograms and not timed:
        raise UsageError("--histograms shows one-way delays: add --trip-times or "
                         "--isochronous")
    if not timed:
        return
    for used, flag in ((options.file is not None, "-F/--file"), (options.test.zerocopy, "-Z"),
                       (options.probe, "--probe"), (options.rtt, "--rtt")):
        if used:
            raise UsageError(f"--trip-times and --isochronous time each write or datagram "
                             f"themselves: they cannot be combined with {flag}")
    if options.test.frame_rate > 0 and "rate" in options.given:
        raise UsageError("--isochronous sets the rate itself (FPS:MEAN): leave out -b")
    if options.test.transport.datagrams:
        if options.test.frame_rate > 0:
            if options.test.length < MIN_ISOCHRONOUS_UDP_LENGTH:
                raise UsageError(f"-l/--len must be at least {MIN_ISOCHRONOUS_UDP_LENGTH} "
                                 "bytes for isochronous "
                                 f"UDP (the header, a key and the frame's fields)")
            per_frame = options.test.frame_load / 8 / options.test.frame_rate
            if per_frame / options.test.length > MAX_FRAME_DATAGRAMS:
                raise UsageError(f"--isochronous: a frame of {per_frame:.0f} bytes would take "
                                 f"more than {MAX_FRAME_DATAGRAMS} datagrams of -l bytes")
    elif options.test.length < WRITE_HEADER.size:
        raise UsageError(f"-l/--len must be at least {WRITE_HEADER.size} bytes for timed TCP "
                         "writes (each opens with its send time)")
    elif options.test.num_bytes is not None and options.test.num_bytes < WRITE_HEADER.size:
        raise UsageError(f"-n/--num must be at least {WRITE_HEADER.size} bytes for timed TCP "
                         "writes")
