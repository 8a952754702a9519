"""iperf2's command line (iperf 2.1.8's --help), for the scripts that type it.

- Its long names for flags we have under another name are aliases in cli.py (--bandwidth,
  --enhanced, --output, --nodelay, --tcp-congestion, --ipv6_domain, --fileinput,
  --singleclient).
- The flags with a meaning of their own here: --dualtest, -r/--tradeoff, --full-duplex,
  -X/--peer-detect, --bounceback (-period, -hold, -congest, -no-quickack), -y C, --listenport,
  --tcp-write-prefetch, --txstart-time, --connect-only, -x, --permit-key(-timeout),
  --connect-retries, --tcp-rx-window-clamp, --ttl, --local-only, -z/--realtime, --sum-only,
  --hide-ips, --compatibility, --no-udp-fin; --tcp-quickack is declared by its field of the
  test description (description/testspec.py) and added with it.
- Where iperf2 and iperf3 give one letter two meanings (COLLISIONS), iperf3's wins; after
  --iperf2 the letter has iperf2's meaning where we have taken it (IPERF2_LETTERS: -d -Z
  -V -L -C -T), which its long name always has.
- The rest (NOT_YET) are refused in one line saying so, rather than as unknown options.
"""

from __future__ import annotations

import argparse
import secrets
import string
import time
from typing import Any

from .. import connect_times
from ..description import options as limits
from ..description.client_options import ClientOptions
from ..description.options import CONNECT_RETRY_SECONDS, MAX_LENGTH, MAX_PORT, MAX_TTL, MIN_PORT
from ..errors import UsageError
from ..protocol.iperf2 import MAX_PERMIT_KEY, MIN_PERMIT_KEY
from . import flag_values

# letter -> (iperf2's long name, what the letter means without --iperf2)
COLLISIONS: dict[str, tuple[str, str]] = {
    "-d": ("--dualtest", "--debug, iperf3's"),
    "-C": ("--compatibility", "--congestion, iperf3's and ours"),
    "-Z": ("--tcp-congestion", "--zerocopy, iperf3's"),
    "-V": ("--ipv6_domain", "--verbose, iperf3's"),
    "-m": ("--print_mss", "--mptcp, iperf3 3.19's"),
    "-T": ("--ttl", "--title, iperf3's"),
    "-L": ("--listenport", "--flowlabel, iperf3's"),
    "-I": ("--stdin", "--serverip, classic Simpleperf's (iperf3: --pidfile)"),
}

# iperf2's options not taken yet: long name -> (its letter or "", what it does)
NOT_YET: dict[str, tuple[str, str]] = {
    "--tap-dev": ("", "reading from a TAP device"),
    "--udp-histogram": ("", "its UDP histogram (--histograms is ours)"),
    "--single_udp": ("-U", "the single-threaded UDP server"),
    "--sum-dstip": ("", "sums by destination address"),
    "--ipg": ("", "the gap within isochronous frames"),
    "--incr-dstip": ("", "incremented addresses"),
    "--incr-dstport": ("", "incremented ports (--cport is ours)"),
    "--incr-srcip": ("", "incremented addresses"),
    "--incr-srcport": ("", "incremented ports (--cport is ours)"),
    "--near-congestion": ("", "RTT-weighted write delays"),
    "--no-connect-sync": ("", "unsynchronised parallel starts"),
    "--tcp-write-times": ("", "write times"),
    "--txdelay-time": ("", "a delay before the first write"),
    "--ssm-host": ("-H", "source-specific multicast"),
    "--stdin": ("-I", "sending standard input"),
}

# the colliding letters whose iperf2 meaning is taken: these mean iperf2's after --iperf2
# (the others keep ours: a script's -I or -m still works, and iperf2's is not done yet)
IPERF2_LETTERS = {letter for letter, (name, _) in COLLISIONS.items() if name not in NOT_YET}

# iperf2's flags a client alone takes (dest -> as said): refused with -s
CLIENT_FLAGS = {"dualtest": "--dualtest", "tradeoff": "-r/--tradeoff",
                "listenport": "--listenport", "tcp_write_prefetch": "--tcp-write-prefetch",
                "txstart_time": "--txstart-time", "bounceback": "--bounceback",
                "bounceback_period": "--bounceback-period",
                "bounceback_hold": "--bounceback-hold", "peer_detect": "-X/--peer-detect",
                "full_duplex": "--full-duplex", "reportstyle": "-y/--reportstyle",
                "connect_only": "--connect-only", "reportexclude": "-x/--reportexclude",
                "ttl": "--ttl", "local_only": "--local-only", "print_mss": "--print_mss"}

MAX_START_AHEAD = 86400.0  # --txstart-time: at most this far ahead (iperf2: any)
DEFAULT_BURST, MAX_BURST = 10, 10_000  # --bounceback: messages a burst (iperf2's default)
DEFAULT_PERIOD = 1.0  # --bounceback-period: seconds (iperf2's default)
MAX_CONNECTS = 1_000_000  # --connect-only
MAX_CONNECT_RETRIES = 10_000  # --connect-retries
MIN_WINDOW_CLAMP = 2048  # --tcp-rx-window-clamp (the kernel makes a smaller one 1152 bytes)
DEFAULT_CONNECT_RETRIES = 1  # ... without N (iperf2's optional value)
DEFAULT_PERMIT_KEY_SECONDS = 20.0  # --permit-key-timeout: a keyed server's life (iperf2's)
MAX_PERMIT_KEY_SECONDS = 7 * 86400.0
REPORT_KINDS = "CDMSV"  # -x/--reportexclude: what iperf2's reports are made of


def iperf2_letters(argv: list[str]) -> list[str]:
    """After --iperf2, a colliding letter whose iperf2 meaning is taken means that: its
    long name (`-Z cubic`, `-Zcubic`, `-L 5002`)."""
    if "--iperf2" not in argv:
        return argv
    words = []
    for word in argv:
        letter = word[:2]
        if letter in IPERF2_LETTERS and word[:1] == "-" and word[1:2] != "-":
            name = COLLISIONS[letter][0]
            word = name if len(word) == 2 else f"{name}={word[2:]}"
        words.append(word)
    return words


def add_arguments(group: Any) -> None:
    group.add_argument("--dualtest", action="store_true", help="both directions at once: "
                       "with --iperf2 (-d there) iperf2's dual test, the server connecting "
                       "back; otherwise --bidir")
    group.add_argument("-r", "--tradeoff", action="store_true", help="the test, then the "
                       "same test the other way (two tests, two reports); with --iperf2 "
                       "the server connects back for the second")
    group.add_argument("--full-duplex", action="store_true", help="with --iperf2: both "
                       "directions at once on each connection, as iperf2's (--iperf2 --bidir "
                       "is the same; a simpleperf or iperf3 server's --bidir uses two)")
    group.add_argument("-X", "--peer-detect", action="store_true", help="with --iperf2: "
                       "ask the server's version (it acknowledges each connection's header "
                       "with it); printed before the test, in JSON as the protocol")
    _add_bounceback_arguments(group)
    group.add_argument("-y", "--reportstyle", metavar="C", help="C: iperf2's comma-"
                       "separated rows (time, addresses and ports, stream, interval, bytes, "
                       "bits/s; UDP: jitter, lost, total, percent, out of order)")
    group.add_argument("--permit-key", nargs="?", const="", metavar="KEY", help="iperf2's "
                       "permit key (4 to 128 characters): a server serves only iperf2 TCP "
                       "clients that state it (without KEY it makes one and prints it); a "
                       "client with --iperf2 states it")
    group.add_argument("--permit-key-timeout", metavar="SECONDS", help="a server with "
                       "--permit-key takes new tests for this long, then ends once its "
                       f"tests have (default {DEFAULT_PERMIT_KEY_SECONDS:g}, as iperf2's; 0: "
                       "for ever)")
    group.add_argument("--listenport", metavar="PORT", help="--iperf2 with -d or -r: the "
                       "port the server connects back to (-L there; default: any free port, "
                       "which the header tells the server)")
    group.add_argument("--connect-only", nargs="?", const=str(connect_times.DEFAULT_CONNECTS),
                       metavar="N", help="TCP connects only, each timed (the three-way "
                       f"handshake), N in all (default {connect_times.DEFAULT_CONNECTS}, "
                       "as iperf2's; 0: until -t ends), -P at once, a burst every -i "
                       "seconds; against any TCP server")
    group.add_argument("--connect-retries", nargs="?", const=str(DEFAULT_CONNECT_RETRIES),
                       metavar="N", help="a TCP connect that fails is tried again, N times "
                       f"more (default {DEFAULT_CONNECT_RETRIES}), "
                       f"{CONNECT_RETRY_SECONDS:g} s apart, as iperf2's: a client "
                       "started with its server")
    _add_socket_arguments(group)
    group.add_argument("-z", "--realtime", action="store_true", help="the real-time "
                       "scheduler (round robin, its lowest priority), as iperf2's: a client "
                       "or server a busy machine does not hold back (root or CAP_SYS_NICE; "
                       "else a warning and the usual scheduler)")
    group.add_argument("--compatibility", action="store_true", help="--iperf2 (-C there): "
                       "no header, as iperf 2.0 clients send (TCP: bytes alone; UDP: the "
                       "datagram's number and time, then iperf2's digits), for old servers")
    group.add_argument("--hide-ips", action="store_true", help="every IPv4 address in the "
                       "output as *.*.*.N and the server's name as (**hidden**), as "
                       "iperf2's: results to publish")
    group.add_argument("--print_mss", "--print-mss", action="store_true", help="TCP: the "
                       "connection's MSS (TCP_MAXSEG once connected; with -M what was asked) "
                       "after the banner, as iperf2's -m (which means it after --iperf2)")
    group.add_argument("--sum-only", action="store_true", help="the text's SUM rows alone "
                       "(each interval's and the summary's, one stream too), as iperf2's: "
                       "for a large -P")
    group.add_argument("--no-udp-fin", action="store_true", help="--iperf2 -u: no final "
                       "exchange (the last datagram once, no server report), so no packet "
                       "comes back, as iperf2's")
    group.add_argument("-x", "--reportexclude", metavar="[CDMSV]", help="text left out: C "
                       "the connection lines, D our data rows (intervals and our side of "
                       "the summary), M multicast (none here), S the settings banner, V the "
                       "server's reports (its side of the summary); not JSON or -y C")
    group.add_argument("--txstart-time", metavar="EPOCH", help="start at this Unix time "
                       "(seconds, fractions allowed; e.g. $(expr $(date +%%s) + 5)), so "
                       "several clients start together")
    for name, (letter, _) in NOT_YET.items():
        # iperf2's own letters (-x -y -z -U -H -X) are taken with the name; a colliding
        # one means iperf2's only after --iperf2, which rewrites it to the name
        names = (letter, name) if letter and letter not in COLLISIONS else (name,)
        group.add_argument(*names, dest=_dest(name), nargs="?", const="",
                           help=argparse.SUPPRESS)


def _add_bounceback_arguments(group: Any) -> None:
    """--bounceback and its options."""
    group.add_argument("--bounceback", nargs="?", const=str(DEFAULT_BURST), metavar="N",
                       help="iperf2's bounceback test: bursts of N messages (default "
                       f"{DEFAULT_BURST}) of -l bytes (default 100) that the server (iperf -s "
                       "2.1, simpleperf -s) sends back, each one round trip, for -t seconds")
    group.add_argument("--bounceback-period", metavar="SECONDS", help="--bounceback: a "
                       "burst every SECONDS (default 1, as iperf2's; 0: back to back)")
    group.add_argument("--bounceback-hold", metavar="MS", help="--bounceback: the server "
                       "holds each message MS milliseconds before sending it back")
    group.add_argument("--bounceback-congest", nargs="?", const="", metavar="WAY[,N]",
                       help="--bounceback: N TCP streams (default 1) of load to the same "
                       "server beside the round trips, WAY up, down or bidir (default: "
                       "bidir, both ways on each connection, as iperf2's)")
    group.add_argument("--bounceback-no-quickack", action="store_true", help="--bounceback:"
                       " neither end sets TCP_QUICKACK before its reads (set by default, as "
                       "iperf2's; the server is told in each message)")


def _add_socket_arguments(group: Any) -> None:
    """iperf2's flags that set an option of each data socket (transport/socket_options)."""
    group.add_argument("--tcp-write-prefetch", metavar="SIZE", help="TCP senders: at most "
                       "SIZE bytes wait unsent in the socket (TCP_NOTSENT_LOWAT), so the "
                       "sender's buffer adds little delay")
    group.add_argument("--tcp-rx-window-clamp", metavar="SIZE", help="every TCP data "
                       "connection's receive window at most SIZE bytes (TCP_WINDOW_CLAMP), "
                       "as iperf2's: a receiver (-R, --bidir) that advertises no more")
    group.add_argument("--ttl", metavar="N", help="every data packet's TTL (IPv6: hop "
                       f"limit), 1 to {MAX_TTL}, as iperf2's -T (which means it after "
                       "--iperf2)")
    group.add_argument("--local-only", action="store_true", help="data sockets send only "
                       "to hosts on a directly connected network (SO_DONTROUTE), as "
                       "iperf2's: a test that must not leave the link")


def _dest(name: str) -> str:
    return "iperf2_" + name.lstrip("-").replace("-", "_")


def refuse_not_yet(args: argparse.Namespace) -> None:
    for name, (_, what) in NOT_YET.items():
        if getattr(args, _dest(name), None) is not None:
            raise UsageError(f"{name} is iperf2's ({what}); simpleperf does not do it yet")


def apply(options: ClientOptions, args: argparse.Namespace) -> ClientOptions:
    """The client options with iperf2's flags."""
    changes: dict[str, Any] = {}
    if args.full_duplex:
        if not options.iperf2:
            raise UsageError("--full-duplex (both ways on one connection) is iperf2's: with "
                             "--iperf2; --bidir runs both ways against any other server")
        if options.test.direction == "reverse" or args.dualtest or args.tradeoff:
            raise UsageError("--full-duplex runs both directions itself: not with -R, -d "
                             "or -r")
        changes["direction"] = "bidir"
    if args.dualtest and args.tradeoff:
        raise UsageError("--dualtest and -r/--tradeoff cannot be used together (both at "
                         "once, or one after the other)")
    if (args.dualtest or args.tradeoff) and options.test.direction != "forward":
        raise UsageError(f"{'--dualtest' if args.dualtest else '-r/--tradeoff'} runs both "
                         "directions itself: not with -R or --bidir")
    if args.tradeoff and options.json:
        raise UsageError("-r/--tradeoff runs two tests, and -J writes one document: use "
                         "--json-stream, or run the test and then with -R")
    if options.iperf2:
        changes.update(dualtest=args.dualtest, tradeoff=args.tradeoff)
    elif args.dualtest:
        changes["direction"] = "bidir"
    elif args.tradeoff:
        changes["tradeoff"] = True
    if args.peer_detect:
        if not options.iperf2 or options.test.transport.datagrams:
            raise UsageError("-X/--peer-detect asks an iperf2 server its version over TCP: "
                             "with --iperf2, without -u")
        changes["peer_detect"] = True
    changes.update(_bounceback(options, args))
    if args.permit_key is not None:
        if not options.iperf2 or options.test.transport.datagrams:
            raise UsageError("--permit-key is iperf2's, over TCP: a client needs --iperf2 "
                             "and no -u")
        changes["permit_key"] = permit_key(args.permit_key, server=False)
    if args.reportstyle is not None:
        if args.reportstyle not in ("C", "c"):
            raise UsageError(f"-y/--reportstyle takes C (iperf2's CSV), not "
                             f"'{args.reportstyle}'")
        if options.json or options.json_stream or args.bounceback is not None:
            raise UsageError("-y C is a report of its own: not with -J, --json-stream or "
                             "--bounceback")
        changes["csv"] = True
    if args.listenport is not None:
        if not (options.iperf2 and (args.dualtest or args.tradeoff)):
            raise UsageError("--listenport (-L with --iperf2) is where an iperf2 server "
                             "connects back: for --iperf2 with -d or -r")
        changes["listen_port"] = flag_values.integer(
            "--listenport", args.listenport, MIN_PORT, MAX_PORT,
            f"--listenport must be a port, {MIN_PORT}..{MAX_PORT}")
    if args.tcp_write_prefetch is not None:
        changes["write_prefetch"] = flag_values.size(
            "--tcp-write-prefetch", args.tcp_write_prefetch, 1, MAX_LENGTH,
            f"from 1 byte to {MAX_LENGTH // 2**20}M (e.g. 16K)")
    if args.txstart_time is not None:
        changes["start_at"] = _start_time(args.txstart_time)
    if args.connect_only is not None:
        changes["connect_only"] = _connect_only(options, args)
    changes.update(_socket_flags(options, args))
    if args.reportexclude is not None:
        letters = set(args.reportexclude.upper())
        if not args.reportexclude or not letters <= set(REPORT_KINDS):
            raise UsageError(f"-x/--reportexclude takes letters of {REPORT_KINDS} (C "
                             "connection, D data, M multicast, S settings, V server), not "
                             f"'{args.reportexclude}'")
        changes["report_exclude"] = frozenset(letters)
    return options.asking(**changes)


def _socket_flags(options: ClientOptions, args: argparse.Namespace) -> dict[str, Any]:
    """--connect-retries, --tcp-rx-window-clamp, --ttl, --local-only, --sum-only,
    --hide-ips, --compatibility, --no-udp-fin."""
    changes: dict[str, Any] = {}
    if args.connect_retries is not None:
        changes["connect_retries"] = flag_values.integer(
            "--connect-retries", args.connect_retries, 0, MAX_CONNECT_RETRIES,
            f"--connect-retries takes 0 to {MAX_CONNECT_RETRIES} retries")
    if args.tcp_rx_window_clamp is not None:
        changes["window_clamp"] = flag_values.size(
            "--tcp-rx-window-clamp", args.tcp_rx_window_clamp, MIN_WINDOW_CLAMP, MAX_LENGTH,
            f"from {MIN_WINDOW_CLAMP} bytes to {MAX_LENGTH // 2**20}M (e.g. 64K)")
    if args.ttl is not None:
        changes["ttl"] = flag_values.integer("--ttl", args.ttl, 1, MAX_TTL,
                                             f"--ttl takes 1 to {MAX_TTL} hops")
    if args.local_only:
        changes["local_only"] = True
    if args.print_mss:
        changes["print_mss"] = True
    if args.sum_only:
        changes["sum_only"] = True
    if args.hide_ips:
        changes["hide_ips"] = True
    if args.compatibility:
        if not options.iperf2:
            raise UsageError("--compatibility (-C after --iperf2) is iperf2's: a client "
                             "without iperf2's header, with --iperf2")
        changes["compatibility"] = True
    if args.no_udp_fin:
        if not (options.iperf2 and options.test.transport.datagrams) or \
                options.test.direction == "reverse" or args.dualtest or args.tradeoff:
            raise UsageError("--no-udp-fin is iperf2's: a UDP test to an iperf2 server "
                             "(--iperf2 -u), ours sent (not -R, -d or -r)")
        changes["no_udp_fin"] = True
    return changes


def _bounceback(options: ClientOptions, args: argparse.Namespace) -> dict[str, Any]:
    if args.bounceback is None:
        if args.bounceback_period is not None or args.bounceback_hold is not None or \
                args.bounceback_congest is not None or args.bounceback_no_quickack:
            raise UsageError("--bounceback-period, -hold, -congest and -no-quickack are "
                             "--bounceback options")
        return {}
    if args.bounceback_no_quickack and options.test.quickack:
        raise UsageError("--tcp-quickack and --bounceback-no-quickack contradict each other "
                         "(bounceback acknowledges at once by default)")
    _not_with("--bounceback is one TCP connection of round trips", (
        (options.test.transport.datagrams, "-u"),
        (options.test.direction != "forward", "-R/--bidir"),
        (options.test.parallel > 1, "-P"), (args.dualtest or args.tradeoff, "-d/-r"),
        (options.rtt or options.rpm or options.probe, "--rtt/--rpm/--probe"),
        (options.iperf3, "--iperf3")))
    burst = flag_values.integer("--bounceback", args.bounceback, 1, MAX_BURST,
                                f"--bounceback takes a burst of 1 to {MAX_BURST} messages")
    period = DEFAULT_PERIOD if args.bounceback_period is None else flag_values.number(
        "--bounceback-period", args.bounceback_period, 3600.0, "seconds")
    return {"bounceback": burst, "bounce_period": period,
            "bounce_hold": flag_values.number("--bounceback-hold", args.bounceback_hold or "0",
                                   10_000.0, "milliseconds") / 1000,
            "bounce_quickack": not args.bounceback_no_quickack,
            "bounce_congest": None if args.bounceback_congest is None else
            _working_load(args.bounceback_congest)}


def _working_load(text: str) -> tuple[str, int]:
    """--bounceback-congest's value: [up|down|bidir][,N] (iperf2's)."""
    way, _, count = text.partition(",")
    default_way, default_streams = limits.DEFAULT_WORKING_LOAD
    way = way.strip().lower() or default_way
    if way not in limits.WORKING_LOAD_WAYS:
        raise UsageError(f"--bounceback-congest takes up, down or bidir and a number of "
                         f"streams (e.g. down,4), not '{text}'")
    streams = default_streams if not count.strip() else flag_values.integer(
        "--bounceback-congest", count.strip(), 1, limits.MAX_PARALLEL,
        f"--bounceback-congest takes 1 to {limits.MAX_PARALLEL} streams")
    return way, streams


def _connect_only(options: ClientOptions, args: argparse.Namespace) -> int:
    _not_with("--connect-only makes TCP connections and sends nothing", (
        (options.test.transport.datagrams, "-u"),
        (options.test.direction != "forward", "-R/--bidir"),
        (args.dualtest or args.tradeoff, "-d/-r"), (args.bounceback is not None,
                                                    "--bounceback"),
        (options.rtt or options.rpm or options.probe, "--rtt/--rpm/--probe"),
        (options.test.num_bytes is not None, "-n"), (options.csv, "-y C"),
        (options.json_stream, "--json-stream")))
    return flag_values.integer(
        "--connect-only", args.connect_only, 0, MAX_CONNECTS,
        f"--connect-only takes 0 (until -t ends) to {MAX_CONNECTS} connects")


def _not_with(what: str, flags: tuple[tuple[Any, str], ...]) -> None:
    """`what` (a mode's words) refused with every flag given that it cannot take."""
    used = [flag for given, flag in flags if given]
    if used:
        raise UsageError(f"{what}: not with {', '.join(used)}")


def permit_key_timeout(args: argparse.Namespace) -> float | None:
    """How long a server with --permit-key takes new tests (None: for ever)."""
    if args.permit_key_timeout is None:
        return DEFAULT_PERMIT_KEY_SECONDS if args.permit_key is not None else None
    if args.permit_key is None:
        raise UsageError("--permit-key-timeout is how long a server's --permit-key holds: "
                         "give --permit-key too")
    seconds = flag_values.number("--permit-key-timeout", args.permit_key_timeout,
                      MAX_PERMIT_KEY_SECONDS, "seconds")
    return seconds or None


def permit_key(text: str, server: bool) -> str:
    """--permit-key's value; a server without one makes one, as iperf2's does (its time
    and 16 random characters)."""
    if not text and server:
        now = time.time()
        return f"{now:.6f}-" + "".join(secrets.choice(string.ascii_letters + string.digits)
                                       for _ in range(16))
    if not MIN_PERMIT_KEY <= len(text) <= MAX_PERMIT_KEY or not text.isprintable() or \
            not text.isascii():
        raise UsageError(f"--permit-key must be {MIN_PERMIT_KEY} to {MAX_PERMIT_KEY} "
                         f"printable characters, not '{text}'")
    return text


def _start_time(text: str) -> float:
    try:
        when = float(text)
    except ValueError:
        when = float("nan")
    now = time.time()
    if not now - MAX_START_AHEAD <= when <= now + MAX_START_AHEAD:  # NaN fails too
        raise UsageError(f"--txstart-time must be a Unix time (seconds) within a day of "
                         f"now ({now:.0f}), not '{text}'")
    return when
