"""Command line: flags, defaults and validation, turned into option objects.

Every mistake becomes a UsageError carrying one line that names the flag and what it
accepts; the entry point prints it and exits with status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import os
import re
import socket
from collections.abc import Callable
from typing import Any, TypeVar

from .. import __version__
from ..description.client_options import ClientOptions
from ..description.options import (
    AUTH_UDP_LENGTH,
    CLASSIC_MAX_PARALLEL,
    CONNECT_TIMEOUT_SECONDS,
    DEFAULT_DURATION,
    DEFAULT_IDLE_SECONDS,
    DEFAULT_LENGTH,
    DEFAULT_LOSS_THRESHOLD,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_HOST,
    DEFAULT_MEMORY_BUDGET,
    DEFAULT_PORT,
    DEFAULT_QUEUE_WAIT,
    DEFAULT_RATE_WINDOW,
    DEFAULT_RPM_INTERVAL,
    DEFAULT_RPM_SECONDS,
    DEFAULT_RTT_INTERVAL,
    DEFAULT_SERVER_IP,
    DEFAULT_TIMESTAMP_FORMAT,
    DEFAULT_UDP_LENGTH,
    DEFAULT_UNPROVEN_SECONDS,
    DSCP_RULE,
    MAX_CLIENTS_LIMIT,
    MAX_CPU,
    MAX_LENGTH,
    MAX_MEMORY_BUDGET,
    MAX_MSS,
    MAX_NUM_BYTES,
    MAX_OMIT,
    MAX_PARALLEL,
    MAX_PORT,
    MAX_QUEUE,
    MAX_QUEUE_WAIT,
    MAX_RATE,
    MAX_RATE_WINDOW,
    MAX_RPM_INTERVAL,
    MAX_RTT_COUNT,
    MAX_SECRET_BYTES,
    MAX_TEST_SECONDS,
    MAX_UDP_LENGTH,
    MAX_UNPROVEN_SECONDS,
    MAX_WINDOW,
    MIN_LENGTH,
    MIN_MEMORY_BUDGET,
    MIN_MSS,
    MIN_PORT,
    MIN_RATE_WINDOW,
    MIN_REPORT_INTERVAL,
    MIN_RPM_INTERVAL,
    MIN_RTT_INTERVAL,
    MIN_UDP_LENGTH,
    MIN_WINDOW,
    UNPROVEN_UDP_FACTOR,
    ServerOptions,
    dscp_code,
    is_congestion_name,
)
from ..description.testspec import FLAGS, TestSpec, beyond_iperf2, beyond_iperf3
from ..description.transports import TCP, UDP
from ..errors import UsageError
from ..responsiveness.config import Url, configuration_url, looks_like_url
from ..units import (
    AUTO_UNIT,
    CLASSIC_DEFAULT_UNIT,
    DISPLAY_UNITS,
    IPERF3_UNITS,
    parse_rate,
    parse_size,
)
from . import flag_values, iperf2_flags, iperf3_flags, latency_flags

NO_MODE_MESSAGE = "Error: you must run either in server or client mode"

_HOSTNAME = re.compile(r"(?=.{1,253}\Z)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?)+")
_NO_HOST = "\0"  # -c without a value (then -I, or the default, names the server)


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print usage and exit; we want one line
        raise UsageError(message)


EXAMPLES = """examples:
  simpleperf -s                               a server (classic, native, iperf3, iperf2 clients)
  simpleperf -c -I 10.0.0.2 -t 10             a classic 10 s test
  simpleperf -c 10.0.0.2 -R -e -i 1           the server sends; TCP statistics every second
  simpleperf -c 10.0.0.2 -u -b 50M            UDP at 50 Mbit/s: jitter and loss
  simpleperf -c 10.0.0.2 --iperf3 -P 4        against an iperf3 server
  simpleperf -c 10.0.0.2 --iperf2 -u -b 10M   against an iperf2 server (iperf -s -u)

the lab (root): emulated networks on this machine
  simpleperf lab list                         shipped topologies and experiments
  simpleperf lab run portfolio --quick        build, measure beside theory, report, tear down
  simpleperf lab up pair --rate 100M --delay 20ms --loss 1%
  simpleperf lab capture h1-h2 -w - | wireshark -k -i -
  simpleperf lab --help                       every lab command
"""
_NEGATIVE = re.compile(r"-\d[\d.]*[A-Za-z]*")
_VALUE_FLAGS: set[str] = set()


def _takes_value() -> set[str]:
    """The options that take exactly one value (from argparse's own list of the parser's
    actions; -c's host is optional, so `-c -4` stays two options)."""
    if not _VALUE_FLAGS:
        _VALUE_FLAGS.update(flag for action in build_parser()._actions
                            if action.nargs is None and action.option_strings
                            for flag in action.option_strings)
    return _VALUE_FLAGS


class _Version(argparse.Action):
    """-v: the version, then what the kernel offers the tests (iperf3 names its features)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        from ..transport import features

        print(f"simpleperf {__version__}\n{features.report()}", flush=True)  # failing:
        parser.exit()  # one line at the top (__main__), or quiet into `| head`


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="simpleperf",
        description="Measure network throughput (classic Simpleperf and extensions).",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXAMPLES)
    mode = parser.add_argument_group("mode")
    mode.add_argument("-s", "--server", action="store_true", help="run as server")
    mode.add_argument("-c", "--client", nargs="?", const=_NO_HOST, default=None, metavar="HOST",
                      help="run as client (optionally give the server address here; with "
                      "--rpm, a responsiveness server's configuration URL, https://HOST[:PORT]"
                      "[/PATH], measures any server of the IETF draft over HTTP/2)")
    common = parser.add_argument_group("both modes")
    common.add_argument("-p", "--port", help=f"port, 1024..65535 (default {DEFAULT_PORT})")
    common.add_argument("-f", "--format", help="classic: B, KB or MB, the Transfer column "
                        "(default MB); as iperf3: k m g t (bits/sec), K M G T (bytes/sec), "
                        "a A (scaled, the default of tests beyond classic)")
    common.add_argument("--timestamps", nargs="?", const=DEFAULT_TIMESTAMP_FORMAT,
                        metavar="FORMAT", help="begin every line of text with the time "
                        f"(strftime FORMAT, default "
                        f"'{DEFAULT_TIMESTAMP_FORMAT.replace('%', '%%')}')")
    common.add_argument("-l", "--len", "--length", help="read/write buffer size, e.g. 128K "
                                           f"(default {DEFAULT_LENGTH // 1024}K, TCP writes "
                                           "rounded down to whole segments)")
    common.add_argument("-w", "--window", help="socket buffer size (the TCP window), e.g. "
                                              "64K (default: the kernel's autotuning)")
    common.add_argument("-C", "--congestion", "--tcp-congestion",
                        help="TCP congestion control, e.g. cubic, reno, "
                                                  "bbr (default: the system's)")
    common.add_argument("-b", "--bandwidth", dest="b", metavar="ADDRESS|RATE",
                        help="server: the address "
                        "to listen on (as --bind); client: the target rate (as --bitrate)")
    common.add_argument("-B", "--bind-address", help="local address to use (server: to "
                        "listen on; client: to send from)")
    common.add_argument("-4", "--ipv4", "--version4", action="store_true", help="IPv4 only")
    common.add_argument("-6", "--ipv6", "--version6", "--ipv6_domain", action="store_true",
                        help="IPv6 only")
    common.add_argument("--auth-secret-file", metavar="FILE", help="shared secret for "
                        "authentication (challenge and HMAC; the secret never crosses the "
                        "wire); also read from $SIMPLEPERF_SECRET. A server with one refuses "
                        "classic clients, which cannot prove it (--allow-classic)")
    common.add_argument("-J", "--json", action="store_true", help="client: one JSON "
                        "document; server: one per test (its own view), and no text")
    common.add_argument("-A", "--affinity", metavar="N[,M]", help="run on CPU N; a client's "
                        ",M: the server runs this test's streams on its CPU M")
    common.add_argument("--logfile", "-o", "--output", metavar="FILE",
                        help="append all output, errors too, to "
                        "FILE instead of the terminal")
    _add_server_options(parser.add_argument_group("server"))
    client = parser.add_argument_group("client")
    client.add_argument("-I", "--serverip", help=f"server address (default {DEFAULT_SERVER_IP})")
    client.add_argument("-t", "--time", help=f"seconds to send (default {DEFAULT_DURATION:g})")
    client.add_argument("-n", "--num", "--bytes", help="send exactly this many bytes, e.g. 10MB")
    client.add_argument("-i", "--interval", help="print a row every this many seconds (a "
                        "server: each test's rows as they close, every this many seconds "
                        "for iperf2 and iperf3 clients, at the client's -i for native ones)")
    client.add_argument("--connect-timeout", metavar="MS", help="give up a connection not "
                        f"made within this many milliseconds (default "
                        f"{CONNECT_TIMEOUT_SECONDS * 1000:g})")
    client.add_argument("-T", "--title", help="begin every line of text with 'TITLE:  ' "
                        "(with -J, a title key)")
    client.add_argument("-S", "--tos", help="IP TOS byte of the test's packets, 0..255 "
                        "(0x.. hex, 0.. octal), at both ends")
    client.add_argument("--dscp", help=f"DSCP of the test's packets: {DSCP_RULE}, at both "
                        "ends")
    client.add_argument("-k", "--blockcount", help="send this many blocks of -l bytes "
                        "(datagrams with -u), instead of -t or -n")
    client.add_argument("--snd-timeout", metavar="MS", help="end the test when data stays "
                        "unacknowledged this long (TCP_USER_TIMEOUT; default: the kernel's, "
                        "about 15 minutes)")
    client.add_argument("--cport", metavar="PORT", help="our port for the data streams, TCP "
                        "or UDP (stream n from PORT + n - 1; default: any)")
    client.add_argument("-P", "--parallel", help=f"parallel connections, 1..{MAX_PARALLEL} "
                        f"(a classic server takes at most {CLASSIC_MAX_PARALLEL})")
    _add_families(parser)
    parser.add_argument("-v", "--version", action=_Version, nargs=0,
                        help="the version and the kernel features the tests use")
    return parser


def _add_families(parser: argparse.ArgumentParser) -> None:
    """The client's flags by family: ours beyond classic, iperf3's, iperf2's; each with the
    flags the test description's fields declare for it (testspec.FLAGS)."""
    families = {
        "native": parser.add_argument_group(
            "client, native protocol (needs a simpleperf server)"),
        "iperf3": parser.add_argument_group("iperf3's flags, for its scripts"),
        "iperf2": parser.add_argument_group(
            "iperf2's flags, for its scripts (after --iperf2, -d -Z -V -L mean what iperf2 "
            "means by them: --dualtest --tcp-congestion --ipv6_domain --listenport)")}
    _add_native_options(families["native"])
    iperf3_flags.add_arguments(families["iperf3"])
    iperf2_flags.add_arguments(families["iperf2"])
    for name, flag in FLAGS.items():
        taken = {"action": "store_true"} if flag.value is None else {"metavar": flag.metavar}
        families[flag.family].add_argument(flag.name, dest=_DESCRIBED + name, help=flag.help,
                                           **taken)


def _add_server_options(server) -> None:
    server.add_argument("-D", "--daemon", action="store_true", help="once listening, go on "
                        "in the background (output to --logfile, else nowhere)")
    server.add_argument("--pidfile", metavar="FILE", help="write the server's process id to "
                        "FILE while it runs (removed when it ends)")
    server.add_argument("--bind", help="address to listen on (default: all interfaces)")
    server.add_argument("--max-duration", "--server-max-duration", help="refuse tests "
                        "longer than this many seconds and end any test that runs longer")
    server.add_argument("--max-clients", help="tests served at the same time, of every "
                        "protocol (each classic connection is one)")
    server.add_argument("--queue", metavar="N", help="with --max-clients: up to N more "
                        "tests wait for a place instead of being refused (as perfSONAR "
                        "schedules throughput tests: --max-clients 1 runs them one at a "
                        "time; RTT probes are not tests and always run)")
    server.add_argument("--queue-wait", metavar="SECONDS", help="--queue: how long a test "
                        f"may wait (default {DEFAULT_QUEUE_WAIT:g}, at most "
                        f"{MAX_QUEUE_WAIT:g})")
    server.add_argument("-1", "--one-off", "--singleclient", action="store_true",
                        help="serve one test, then exit (as iperf3 -s -1)")
    server.add_argument("--max-parallel", help="streams one test may open")
    server.add_argument("--allow-classic", action="store_true", help="with a shared secret, "
                        "serve classic clients anyway (their protocol cannot carry a proof of "
                        "the secret, so by default they are refused)")
    server.add_argument("--server-bitrate-limit", metavar="RATE[/SECONDS]", help="refuse a "
                        "test that asks more than RATE in all, and end one that runs faster, "
                        f"averaged over SECONDS (default {DEFAULT_RATE_WINDOW:g})")
    server.add_argument("--unproven-udp", metavar="RATE[/SECONDS]", help="UDP clients "
                        "that cannot prove their address (iperf2's: no control connection) "
                        f"are sent at most {UNPROVEN_UDP_FACTOR} times what they send, so "
                        "iperf2's -u -R is refused; this also sends them up to RATE for up "
                        "to SECONDS a test (default "
                        f"{DEFAULT_UNPROVEN_SECONDS:g}): one forged datagram can then make "
                        "the server send that much to anyone")
    server.add_argument("--idle-timeout", metavar="SECONDS", help="end a test whose data "
                        "stands still this long (a client stopped or gone without a word), "
                        "freeing its place (default: at the test's own end plus 30 s)")
    server.add_argument("--rcv-timeout", metavar="MS", help="end a classic connection, or a "
                        "test with no stated end (an amount of data, iperf2's header-less "
                        "stream), that brings less than 1 KB, or an echo connection less "
                        f"than a probe, in this many milliseconds (default "
                        f"{DEFAULT_IDLE_SECONDS * 1000:g})")
    server.add_argument("--max-connections", help="connections open at once, in all "
                        f"(default {DEFAULT_MAX_CONNECTIONS})")
    server.add_argument("--max-connections-per-host", help="connections open at once from "
                        f"one address (default {DEFAULT_MAX_CONNECTIONS_PER_HOST})")
    server.add_argument("--cert", metavar="FILE", help="the certificate (PEM, its chain "
                        "after it) the port's HTTPS answers with, for responsiveness clients "
                        "(networkQuality, mach, simpleperf -c URL --rpm); default: a "
                        "self-signed one made at start, its fingerprint printed")
    server.add_argument("--key", metavar="FILE", help="--cert's private key (PEM), when "
                        "not in --cert's file")
    server.add_argument("--memory-budget", metavar="SIZE", help="what the buffers of all "
                        "running tests may take together (a stream holds one of its test's "
                        "length); a test that does not fit is refused (default "
                        f"{DEFAULT_MEMORY_BUDGET // 10**6}MB)")


def _add_native_options(native) -> None:
    native.add_argument("-u", "--udp", action="store_true", help="UDP instead of TCP")
    native.add_argument("--bitrate", help="target rate per stream, e.g. 100M (-b in client "
                        "mode; UDP default 1M, TCP default unlimited; 0 = unlimited: UDP to "
                        "a simpleperf receiver then slows to what its host takes)")
    native.add_argument("-R", "--reverse", action="store_true", help="the server sends")
    native.add_argument("--bidir", action="store_true", help="both directions at once")
    native.add_argument("-e", "--extended", "--enhanced", action="store_true",
                        help="kernel TCP statistics: retransmits, cwnd, RTT")
    native.add_argument("-V", "--verbose", action="store_true",
                        help="more detail, as iperf3's -V: the kernel statistics of -e, and both "
                             "ends' CPU")
    native.add_argument("--json-stream", action="store_true",
                        help="one JSON object per line, as the test runs")
    native.add_argument("-M", "--mss", "--set-mss", help="TCP maximum segment size, 88..32767")
    native.add_argument("-N", "--no-delay", "--nodelay", action="store_true", help="TCP_NODELAY")
    native.add_argument("-Z", "--zerocopy", action="store_true",
                        help="TCP senders use sendfile: the kernel sends without copying "
                             "our buffer (both ends, with -R or --bidir)")
    native.add_argument("-F", "--file", "--fileinput", metavar="FILE",
                        help="TCP, one stream: send FILE's "
                        "bytes (all of it unless -t or -n says less); with -R, write what "
                        "arrives into FILE; a server sends it to -R clients and writes what "
                        "other one-stream TCP tests send into it")
    native.add_argument("--dont-fragment", action="store_true", help="UDP: never split a "
                        "datagram into IP fragments (one larger than the path's MTU is an "
                        "error)")
    native.add_argument("-O", "--omit", help="leave the first this many seconds out")
    native.add_argument("--iperf3", action="store_true",
                        help="the server is an iperf3 server (found out by itself otherwise)")
    native.add_argument("--iperf2", action="store_true",
                        help="the server is an iperf2 server (iperf -s; -u for UDP): each "
                        "stream opens with iperf 2.1.8's header, a UDP test ends with its "
                        "server report")
    native.add_argument("--native", action="store_true",
                        help="use the native protocol (both ends' view of every stream)")
    native.add_argument("--rtt", action="store_true", help="measure round-trip time only "
                        "(TCP echo; with -u UDP echo)")
    native.add_argument("--count", help="--rtt: number of probes (default: for -t seconds)")
    native.add_argument("--rtt-interval", help="seconds between RTT probes (default "
                        f"{DEFAULT_RTT_INTERVAL:g})")
    native.add_argument("--rpm", action="store_true", help="responsiveness under working "
                        "conditions (draft-ietf-ippm-responsiveness): load-generating "
                        "connections added until goodput and round trips are stable, in "
                        "round trips per minute; -R for download, --bidir both at once, -t the "
                        "time limit "
                        f"(default {DEFAULT_RPM_SECONDS:g} s); -c URL: over HTTP/2 and TLS "
                        "against any server of the draft (nginx as Apple's, networkQuality's, "
                        "mach's)")
    native.add_argument("--insecure", action="store_true", help="-c URL --rpm: accept the "
                        "server's TLS certificate unchecked (a self-signed one)")
    native.add_argument("--rpm-interval", help="--rpm: seconds per interval of the draft's "
                        f"algorithm (default {DEFAULT_RPM_INTERVAL:g}; the draft's table says 5)")
    native.add_argument("--no-latency", action="store_true",
                        help="no RTT probes during the test")
    native.add_argument("--probe", action="store_true", help="UDP: search the highest rate "
                        "whose loss stays under --loss-threshold")
    native.add_argument("--loss-threshold", help="--probe: loss percent allowed (default 1)")
    latency_flags.add_arguments(native)


_SERVER_ONLY = {"bind": "--bind", "max_duration": "--max-duration", "one_off": "-1/--one-off",
                "cert": "--cert", "key": "--key",
                "server_bitrate_limit": "--server-bitrate-limit", "idle_timeout": "--idle-timeout",
                "unproven_udp": "--unproven-udp",
                "daemon": "-D/--daemon", "pidfile": "--pidfile",
                "max_clients": "--max-clients", "max_parallel": "--max-parallel",
                "queue": "--queue", "queue_wait": "--queue-wait",
                "allow_classic": "--allow-classic",
                "max_connections": "--max-connections", "rcv_timeout": "--rcv-timeout",
                "max_connections_per_host": "--max-connections-per-host",
                "memory_budget": "--memory-budget",
                "rsa_private_key_path": "--rsa-private-key-path",
                "authorized_users_path": "--authorized-users-path",
                "time_skew_threshold": "--time-skew-threshold",
                "permit_key_timeout": "--permit-key-timeout"}
_DESCRIBED = "described_"  # the argparse destination of a field's own flag: + its name
_CLIENT_ONLY = {"serverip": "-I/--serverip", "cport": "--cport", "snd_timeout": "--snd-timeout",
                "time": "-t/--time", "num": "-n/--num",
                "connect_timeout": "--connect-timeout",
                "blockcount": "-k/--blockcount", "title": "-T/--title", "tos": "-S/--tos",
                "dscp": "--dscp", "parallel": "-P/--parallel", "bitrate": "--bitrate",
                "udp": "-u/--udp", "reverse": "-R/--reverse", "bidir": "--bidir",
                "extended": "-e/--extended", "verbose": "-V/--verbose",
                "json_stream": "--json-stream", "mss": "-M/--mss", "no_delay": "-N/--no-delay",
                "zerocopy": "-Z/--zerocopy", "omit": "-O/--omit",
                "dont_fragment": "--dont-fragment",
                "native": "--native", "iperf3": "--iperf3", "iperf2": "--iperf2",
                "rtt": "--rtt", "count": "--count",
                "rtt_interval": "--rtt-interval", "no_latency": "--no-latency",
                "rpm": "--rpm", "rpm_interval": "--rpm-interval", "insecure": "--insecure",
                "probe": "--probe", "loss_threshold": "--loss-threshold",
                "trip_times": "--trip-times", "histograms": "--histograms",
                "isochronous": "--isochronous", "l4s": "--l4s",
                "extra_data": "--extra-data", "cntl_ka": "--cntl-ka",
                "get_server_output": "--get-server-output", "username": "--username",
                "rsa_public_key_path": "--rsa-public-key-path",
                "json_stream_full_output": "--json-stream-full-output",
                **iperf2_flags.CLIENT_FLAGS,
                **{_DESCRIBED + name: flag.name for name, flag in FLAGS.items()}}


# The readers of a declared flag's text (testspec.Flag.value), by name
READERS: dict[str, Callable[[str, str], Any]] = {"rate": flag_values.rate}


def _described(args: argparse.Namespace) -> tuple[tuple[str, Any], ...]:
    """What the flags of the test description's own (testspec.FLAGS) gave: switches that
    are on, values read (a bad one: one line naming the flag)."""
    given = []
    for name, flag in FLAGS.items():
        text = getattr(args, _DESCRIBED + name)
        if flag.value is None and text:
            given.append((name, True))
        elif flag.value is not None and text is not None:
            given.append((name, READERS[flag.value](flag.name, text)))
    return tuple(given)


def _negative_values(argv: list[str]) -> list[str]:
    """`-t -1` as `-t=-1`: argparse takes a word like -1 for an option (there are -4 and -6),
    so a negative value would be 'expected one argument' instead of its own range error."""
    joined: list[str] = []
    words = iter(argv)
    for word in words:
        if len(word) == 2 and word in _takes_value():
            value = next(words, None)
            if value is not None and _NEGATIVE.fullmatch(value):
                joined.append(f"{word}{value}")
                continue
            joined.append(word)
            if value is not None:
                joined.append(value)
            continue
        joined.append(word)
    return joined


def parse_args(argv: list[str]) -> ServerOptions | ClientOptions:
    args, extra = build_parser().parse_known_args(
        _negative_values(iperf2_flags.iperf2_letters(argv)))
    if extra:
        word = extra[0]
        if word.startswith("-"):
            raise UsageError(f"unknown option {word} (see simpleperf --help)")
        raise UsageError(f"unexpected argument '{word}': simpleperf takes no positional "
                         "arguments (see simpleperf --help)")
    iperf2_flags.refuse_not_yet(args)
    is_client = args.client is not None
    if args.server and is_client:
        raise UsageError("-s/--server and -c/--client cannot be used together")
    if not args.server and not is_client:
        raise UsageError(NO_MODE_MESSAGE)
    own, other = (_SERVER_ONLY, _CLIENT_ONLY) if args.server else (_CLIENT_ONLY, _SERVER_ONLY)
    for name, flag in other.items():
        if getattr(args, name) not in (None, False):
            mode = "client" if args.server else "server"
            raise UsageError(f"{flag} is a {mode} option and cannot be used with "
                             f"{'-s' if args.server else '-c'}")
    return _server_options(args) if args.server else _client_options(args)


def _server_options(args: argparse.Namespace) -> ServerOptions:
    secret = _secret(args.auth_secret_file)
    if args.allow_classic and secret is None:
        raise UsageError("--allow-classic serves classic clients despite a shared secret, "
                         "and there is none (--auth-secret-file or $SIMPLEPERF_SECRET)")
    if args.b is not None and args.bind is not None:
        raise UsageError("-b and --bind both give the listening address: use one")
    if args.bind_address is not None and (args.b or args.bind) is not None:
        raise UsageError("-B and -b/--bind both give the listening address: use one")
    bind_text = next((v for v in (args.b, args.bind, args.bind_address) if v is not None),
                     None)
    bind = _ip_address("-b/--bind", bind_text) if bind_text is not None else None
    family = _family(args)
    if bind is None and family:  # -4 / -6 without an address: that family's wildcard
        bind = "0.0.0.0" if family == socket.AF_INET else "::"
    rate_limit, rate_window = _rate_limit(args.server_bitrate_limit)
    unproven_rate, unproven_seconds = _unproven(args.unproven_udp)
    return ServerOptions(
        bind=bind, port=_port(args.port), unit=_unit(args.format, CLASSIC_DEFAULT_UNIT),
        length=_length(args.len, DEFAULT_LENGTH), window=_window(args.window),
        congestion=_congestion(args.congestion),
        max_duration=_positive_seconds("--max-duration", args.max_duration, None,
                                       high=MAX_TEST_SECONDS),
        max_clients=_optional_int("--max-clients", args.max_clients, 1, MAX_CLIENTS_LIMIT),
        queue=_queue(args),
        queue_wait=_positive_seconds("--queue-wait", args.queue_wait, DEFAULT_QUEUE_WAIT,
                                     high=MAX_QUEUE_WAIT),
        max_parallel=_optional_int("--max-parallel", args.max_parallel, 1, MAX_PARALLEL),
        interval=None if args.interval is None or _is_zero(args.interval) else
        _positive_seconds("-i/--interval", args.interval, None, low=MIN_REPORT_INTERVAL),
        secret=secret, allow_classic=args.allow_classic, mptcp=args.mptcp,
        bind_dev=None if args.bind_dev is None else iperf3_flags.device_name(args.bind_dev),
        rsa_auth=iperf3_flags.authorizer(args),
        permit_key=None if args.permit_key is None else iperf2_flags.permit_key(
            args.permit_key, server=True),
        permit_key_timeout=iperf2_flags.permit_key_timeout(args),
        idle_limit=_int_in_range("--rcv-timeout", args.rcv_timeout,
                                 int(DEFAULT_IDLE_SECONDS * 1000), 100,
                                 int(MAX_TEST_SECONDS * 1000)) / 1000,
        max_connections=_int_in_range("--max-connections", args.max_connections,
                                      DEFAULT_MAX_CONNECTIONS, 1, MAX_CLIENTS_LIMIT),
        max_connections_per_host=_int_in_range(
            "--max-connections-per-host", args.max_connections_per_host,
            DEFAULT_MAX_CONNECTIONS_PER_HOST, 1, MAX_CLIENTS_LIMIT),
        memory_budget=_memory_budget(args.memory_budget),
        one_off=args.one_off, timestamps=_free_text("--timestamps", args.timestamps),
        json=args.json, daemon=args.daemon, pidfile=_path("--pidfile", args.pidfile),
        logfile=_path("--logfile", args.logfile),
        rate_limit=rate_limit, rate_window=rate_window,
        unproven_rate=unproven_rate, unproven_seconds=unproven_seconds,
        affinity=_affinity(args.affinity, server=True)[0], file=_server_file(args.file),
        realtime=args.realtime,
        idle_timeout=_positive_seconds("--idle-timeout", args.idle_timeout, None,
                                       high=MAX_TEST_SECONDS),
        cert=_certificate(args), key=_readable("--key", args.key))


def _test_fields(args: argparse.Namespace) -> dict[str, tuple[Any, bool]]:
    """The test description's fields the command line sets (TestSpec's names): each
    value, and whether a flag gave it (else it is the command line's default)."""
    if args.b is not None and args.bitrate is not None:
        raise UsageError("-b and --bitrate both give the rate: use one")
    if args.reverse and args.bidir:
        raise UsageError("-R/--reverse and --bidir cannot be used together: --bidir already "
                         "runs both directions")
    rate_text = args.b if args.b is not None else args.bitrate
    length = _length(args.len, DEFAULT_UDP_LENGTH if args.udp else DEFAULT_LENGTH)
    num_bytes = _num_bytes(args.num, args.time, args.blockcount, length)
    server_affinity = _affinity(args.affinity)[1]
    return {
        "protocol": ((UDP if args.udp else TCP).name, args.udp),
        "direction": ("bidir" if args.bidir else "reverse" if args.reverse else "forward",
                      args.bidir or args.reverse),
        "duration": (_positive_seconds("-t/--time", args.time, DEFAULT_DURATION,
                                       high=MAX_TEST_SECONDS), args.time is not None),
        "num_bytes": (num_bytes, num_bytes is not None),
        "parallel": (_int_in_range("-P/--parallel", args.parallel, 1, 1, MAX_PARALLEL),
                     args.parallel is not None),
        "length": (length, args.len is not None),
        "rate": (_rate(rate_text) if rate_text is not None else 0.0, rate_text is not None),
        "window": (_window(args.window), args.window is not None),
        "congestion": (_congestion(args.congestion), args.congestion is not None),
        "mss": (_optional_int("-M/--mss", args.mss, MIN_MSS, MAX_MSS), args.mss is not None),
        "nodelay": (args.no_delay, args.no_delay),
        "zerocopy": (args.zerocopy, args.zerocopy),
        "tos": (_tos(args.tos, args.dscp), args.tos is not None or args.dscp is not None),
        "omit": (_omit(args.omit), args.omit is not None),
        "affinity": (server_affinity, server_affinity is not None),
        **{name: (value, True) for name, value in _described(args)}}


def _client_options(args: argparse.Namespace) -> ClientOptions:
    port = _port(args.port)
    test = _test_fields(args)
    rpm_url = _rpm_url(args)
    options = ClientOptions(
        host=rpm_url.host if rpm_url else _server_host(args.client, args.serverip),
        port=rpm_url.port if rpm_url else port,
        rpm_url=str(rpm_url) if rpm_url else None, insecure=args.insecure,
        unit=_unit(args.format, AUTO_UNIT),
        interval=0.0 if _is_zero(args.interval) else _positive_seconds(
            "-i/--interval", args.interval, None, low=MIN_REPORT_INTERVAL),
        test=TestSpec(**{name: value for name, (value, _) in test.items()}),
        given=frozenset(name for name, (_, given) in test.items() if given),
        extended=args.extended or args.verbose, json=args.json, json_stream=args.json_stream,
        title=_free_text("-T/--title", args.title),
        timestamps=_free_text("--timestamps", args.timestamps),
        connect_timeout=_int_in_range("--connect-timeout", args.connect_timeout,
                                      int(CONNECT_TIMEOUT_SECONDS * 1000), 1,
                                      int(MAX_TEST_SECONDS * 1000)) / 1000,
        native=args.native, iperf3=args.iperf3, iperf2=args.iperf2,
        rtt=args.rtt,
        probe=args.probe,
        loss_threshold=_percent("--loss-threshold", args.loss_threshold,
                                  DEFAULT_LOSS_THRESHOLD),
        count=_optional_int("--count", args.count, 1, MAX_RTT_COUNT),
        rtt_interval=_positive_seconds("--rtt-interval", args.rtt_interval,
                                       DEFAULT_RTT_INTERVAL, low=MIN_RTT_INTERVAL),
        latency=not args.no_latency, rpm=args.rpm,
        rpm_interval=_positive_seconds("--rpm-interval", args.rpm_interval,
                                       DEFAULT_RPM_INTERVAL, low=MIN_RPM_INTERVAL,
                                       high=MAX_RPM_INTERVAL),
        local=_ip_address("-B/--bind-address", args.bind_address)
        if args.bind_address is not None else None,
        family=_family(args), secret=_secret(args.auth_secret_file),
        logfile=_path("--logfile", args.logfile),
        cport=_optional_int("--cport", args.cport, 1, 65535),
        affinity=_affinity(args.affinity)[0],
        realtime=args.realtime,
        dont_fragment=args.dont_fragment,
        verbose=args.verbose, file=_path("-F/--file", args.file),
        snd_timeout=None if args.snd_timeout is None else _int_in_range(
            "--snd-timeout", args.snd_timeout, 0, 1, int(MAX_TEST_SECONDS * 1000)) / 1000)
    _check_client_combinations(options, args)
    options = _check_rpm(options, args)
    options = iperf3_flags.apply(latency_flags.apply(_with_file(options, args), args), args)
    options = iperf2_flags.apply(options, args)
    options = options.settled()
    for peer, beyond in (("iperf3", beyond_iperf3), ("iperf2", beyond_iperf2)):
        refused = beyond(options.test) if getattr(options, peer) else None
        if refused is not None:
            needs, lacks = refused
            raise UsageError(f"--{peer}: {needs}: an {peer} server {lacks}")
    if options.interval == 0 and not options.needs_native:
        raise UsageError(f"-i/--interval must be a number of seconds at least "
                         f"{MIN_REPORT_INTERVAL:g} for a classic test (0, no rows, is for tests "
                         f"that need more than classic), not '{args.interval}'")
    return options


def _rpm_url(args: argparse.Namespace) -> Url | None:
    """-c URL: a responsiveness server's configuration, for --rpm; None for a host."""
    if args.client is None or not looks_like_url(args.client):
        if args.insecure:
            raise UsageError("--insecure is for -c URL --rpm (a responsiveness server's "
                             "certificate)")
        return None
    url = configuration_url(args.client)
    if not args.rpm:
        raise UsageError(f"-c {args.client[:80]}: a URL names a responsiveness server, "
                         "measured with --rpm (a simpleperf test takes a host)")
    for given, flag in ((args.port is not None, "-p/--port"),
                        (args.serverip is not None, "-I/--serverip")):
        if given:
            raise UsageError(f"{flag}: the URL -c {args.client[:80]} names the server")
    return url


def _check_rpm(options: ClientOptions, args: argparse.Namespace) -> ClientOptions:
    """--rpm ramps its own TCP connections: what shapes another test is refused, and -t,
    when not given, is the draft's usual time limit."""
    if not options.rpm:
        if args.rpm_interval is not None:
            raise UsageError("--rpm-interval is an --rpm option")
        return options
    used = [flag for given, flag in (
        (options.test.transport.datagrams, "-u"), (options.rtt, "--rtt"),
        (options.probe, "--probe"), (options.iperf3, "--iperf3"),
        (options.iperf2, "--iperf2"), (options.test.parallel > 1, "-P"),
        ("rate" in options.given, "-b"),
        (options.test.num_bytes is not None and args.time is None, "-n/-k"),
        (args.file is not None, "-F"), (options.test.zerocopy, "-Z"), (options.test.omit > 0, "-O"),
        (args.trip_times or args.isochronous is not None, "--trip-times/--isochronous"),
        (options.test.l4s, "--l4s"), (options.json_stream, "--json-stream"))
        if given]
    if used:
        raise UsageError(f"--rpm runs the draft's own TCP load and probes: it cannot be "
                         f"combined with {', '.join(used)}")
    if options.rpm_interval * 2 > options.seconds and args.time is not None:
        raise UsageError(f"--rpm needs at least two intervals: -t {args.time} is shorter "
                         f"than twice --rpm-interval {options.rpm_interval:g}")
    if args.time is None:
        return dataclasses.replace(options, test=dataclasses.replace(
            options.test, duration=DEFAULT_RPM_SECONDS))
    return options


def _with_file(options: ClientOptions, args: argparse.Namespace) -> ClientOptions:
    """-F: one TCP stream; a file to send is read whole unless -t or -n says less."""
    if options.file is None:
        return options
    test = options.test
    if test.transport.datagrams or test.parallel > 1 or test.direction == "bidir":
        raise UsageError("-F/--file sends or keeps one TCP stream: it cannot be used with -u, "
                         "-P above 1 or --bidir")
    if test.direction == "reverse":
        return options  # written when the test starts (created, or emptied)
    try:
        size = os.stat(options.file).st_size if os.access(options.file, os.R_OK) else -1
    except OSError:
        size = -1
    if size <= 0:
        raise UsageError(f"-F/--file {options.file}: not a readable file with bytes in it")
    if test.num_bytes is None and args.time is None:
        return options.asking(num_bytes=size)
    return options


def _is_zero(text: str | None) -> bool:
    """-i 0: no interval rows (iperf3's meaning)."""
    try:
        return text is not None and float(text) == 0
    except ValueError:
        return False


def _check_client_combinations(options: ClientOptions, args) -> None:
    test = options.test
    udp = test.transport.datagrams
    if options.json and options.json_stream:
        raise UsageError("-J/--json and --json-stream cannot be used together")
    if udp and test.length > MAX_UDP_LENGTH:
        raise UsageError(f"-l/--len must be at most {MAX_UDP_LENGTH} bytes for UDP, "
                         f"not '{args.len}'")
    if udp and options.secret is not None and test.length < AUTH_UDP_LENGTH:
        raise UsageError(f"-l/--len must be at least {AUTH_UDP_LENGTH} bytes for UDP with a "
                         f"shared secret (the header and the test's key), not '{args.len}'")
    if udp and test.length < MIN_UDP_LENGTH:
        raise UsageError(f"-l/--len must be at least {MIN_UDP_LENGTH} bytes for UDP (the "
                         "datagram header), "
                         f"not '{args.len}'")
    if options.rtt and (test.direction != "forward" or options.probe):
        raise UsageError("--rtt measures round trips only; it cannot be combined with -R, "
                         "--bidir or --probe")
    if options.probe and not udp:
        raise UsageError("--probe searches a UDP rate: add -u")
    if options.probe and (test.direction == "bidir" or
                          test.direction == "reverse" and "rate" in options.given):
        raise UsageError("--probe searches the rate itself; it cannot be combined with "
                         "--bidir or -b")
    if options.iperf3 and (options.rtt or options.secret is not None):
        raise UsageError("--iperf3: an iperf3 server has no echo service and no simpleperf "
                         "authentication (--rtt, --auth-secret-file)")
    if options.iperf3 and options.native:
        raise UsageError("--iperf3 and --native cannot be used together")
    if options.iperf2 and (options.iperf3 or options.native):
        raise UsageError("--iperf2 cannot be used with " + (
            "--iperf3" if options.iperf3 else "--native"))
    if options.iperf2 and (options.rtt or options.probe or options.secret is not None):
        raise UsageError("--iperf2: an iperf2 server has no echo service, no rate probe and "
                         "no simpleperf authentication (--rtt, --probe, --auth-secret-file)")
    if args.count is not None and not options.rtt:
        raise UsageError("--count is an --rtt option")
    if options.dont_fragment and not udp:
        raise UsageError("--dont-fragment is for UDP (-u): TCP sizes its segments to the path")
    if options.cport and options.cport + test.stream_count() - 1 > 65535:
        raise UsageError(f"--cport {options.cport} leaves no port for stream "
                         f"{test.stream_count()} (ports go up to 65535)")
    if options.local is not None and options.family:
        local_family = 6 if ":" in options.local else 4
        if (local_family == 6) != (options.family == socket.AF_INET6):
            raise UsageError("-B/--bind-address is of the other address family than -4/-6")


def _certificate(args: argparse.Namespace) -> str | None:
    """--cert (and --key): a certificate and key HTTPS can serve with, checked now."""
    cert = _readable("--cert", args.cert)
    if cert is None:
        if args.key is not None:
            raise UsageError("--key is --cert's private key: give --cert too")
        return None
    from ..responsiveness.tls import check_pair  # ssl's, read only when --cert is given

    why = check_pair(cert, _readable("--key", args.key))
    if why is not None:
        raise UsageError(why)
    return cert


def _readable(flag: str, text: str | None) -> str | None:
    """A file to read at start: given, and readable."""
    if text is None:
        return None
    if not os.access(text, os.R_OK) or os.path.isdir(text):
        raise UsageError(f"{flag} {text}: not a readable file")
    return text


def _path(flag: str, text: str | None) -> str | None:
    """A file to write: given, and a name (the file is opened when the run starts)."""
    if text is None:
        return None
    if not text.strip() or "\0" in text:
        raise UsageError(f"{flag} needs a file name, not '{text}'")
    return text


def _server_file(text: str | None) -> str | None:
    """A server's -F: a file it can read (to send) or write (to fill), or one it can create;
    checked at start, not when the first test finds out."""
    path = _path("-F/--file", text)
    if path is None:
        return None
    if os.path.isdir(path):
        raise UsageError(f"-F/--file {path}: a directory, not a file")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"-F/--file {path}: there is no directory {folder}")
    if os.path.exists(path) and not os.access(path, os.R_OK) and \
            not os.access(path, os.W_OK):
        raise UsageError(f"-F/--file {path}: neither readable nor writable")
    if not os.path.exists(path) and not os.access(folder, os.W_OK):
        raise UsageError(f"-F/--file {path}: cannot be created in {folder}")
    return path


def _family(args) -> int:
    if args.ipv4 and args.ipv6:
        raise UsageError("-4/--ipv4 and -6/--ipv6 cannot be used together")
    return socket.AF_INET if args.ipv4 else socket.AF_INET6 if args.ipv6 else 0


def _secret(path: str | None) -> bytes | None:
    if path is None:
        value = os.environ.get("SIMPLEPERF_SECRET")
        return value.encode() if value else None
    try:
        with open(path, "rb") as source:
            secret = source.read(MAX_SECRET_BYTES + 1)
    except OSError as error:
        raise UsageError(f"--auth-secret-file: cannot read '{path}': "
                         f"{(error.strerror or str(error)).lower()}") from None
    if len(secret) > MAX_SECRET_BYTES:
        raise UsageError(f"--auth-secret-file: '{path}' holds more than {MAX_SECRET_BYTES} "
                         "bytes (a secret is a key, not a document)")
    secret = secret.strip()
    if not secret:
        raise UsageError(f"--auth-secret-file: '{path}' is empty")
    return secret


def _queue(args: argparse.Namespace) -> int:
    if args.queue is not None and args.max_clients is None:
        raise UsageError("--queue waits for one of --max-clients: give --max-clients too")
    if args.queue_wait is not None and args.queue is None:
        raise UsageError("--queue-wait goes with --queue")
    return _int_in_range("--queue", args.queue, 0, 0, MAX_QUEUE)


def _optional_int(flag: str, text: str | None, low: int, high: int) -> int | None:
    return None if text is None else _int_in_range(flag, text, low, low, high)


def _rate(text: str) -> float:
    return flag_values.rate("-b/--bitrate", text, zero="unlimited")


def _affinity(text: str | None, server: bool = False) -> tuple[int | None, int | None]:
    """-A N[,M]: our CPU (one this process may run on) and, for a client, the server's."""
    if text is None:
        return None, None
    ours, comma, theirs = text.partition(",")
    shape = "N" if server else "N or N,M"
    try:
        cpu, server_cpu = int(ours), int(theirs) if comma else None
    except ValueError:
        raise UsageError(f"-A/--affinity must be a CPU number ({shape}), not '{text}'") from None
    if server and comma:
        raise UsageError("-A/--affinity on a server is its own CPU only (N): a client's ,M "
                         "chooses the server's CPU for its test")
    allowed = sorted(os.sched_getaffinity(0))
    if cpu not in allowed:
        raise UsageError(f"-A/--affinity {cpu}: this process may run on CPUs "
                         f"{', '.join(map(str, allowed))}")
    if server_cpu is not None and not 0 <= server_cpu <= MAX_CPU:
        raise UsageError(f"-A/--affinity: the server's CPU must be 0 to {MAX_CPU}, not "
                         f"'{theirs}'")
    return cpu, server_cpu


def _rate_limit(text: str | None) -> tuple[float | None, float]:
    """--server-bitrate-limit RATE[/SECONDS]: the rate (None: no limit) and its window."""
    if text is None:
        return None, DEFAULT_RATE_WINDOW
    return _rate_for("--server-bitrate-limit", text, DEFAULT_RATE_WINDOW, MIN_RATE_WINDOW,
                     MAX_RATE_WINDOW, "100M or 100M/2")


def _unproven(text: str | None) -> tuple[float, float]:
    """--unproven-udp RATE[/SECONDS]: what an unproven UDP client may be sent (0: none)."""
    if text is None:
        return 0.0, DEFAULT_UNPROVEN_SECONDS
    return _rate_for("--unproven-udp", text, DEFAULT_UNPROVEN_SECONDS, 1e-3,
                     MAX_UNPROVEN_SECONDS, "10M or 10M/5")


def _rate_for(flag: str, text: str, default_seconds: float, least: float, most: float,
              example: str) -> tuple[float, float]:
    """RATE[/SECONDS]: a rate and a number of seconds from `least` to `most`."""
    rate_text, slash, seconds_text = text.partition("/")
    try:
        rate = parse_rate(rate_text)
        seconds = float(seconds_text) if slash else default_seconds
    except ValueError:
        rate = seconds = -1.0
    if not 0 < rate <= MAX_RATE or not least <= seconds <= most:
        raise UsageError(f"{flag} must be a rate with an optional K, M or G, and optionally "
                         f"/SECONDS from {least:g} to {most:g} (e.g. {example}), not '{text}'")
    return rate, seconds


def _omit(text: str | None) -> float:
    if text is None:
        return 0.0
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= MAX_OMIT:
        raise UsageError(f"-O/--omit must be a number of seconds from 0 to {MAX_OMIT:g}, "
                         f"not '{text}'")
    return value


def _percent(flag: str, text: str | None, default: float) -> float:
    if text is None:
        return default
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        value = -1.0
    if not 0 <= value < 100:
        raise UsageError(f"{flag} must be a percentage from 0 to 99.9, not '{text}'")
    return value


def _int_in_range(flag: str, text: str | None, default: int, low: int, high: int) -> int:
    return default if text is None else flag_values.integer(flag, text, low, high)


def _port(text: str | None) -> int:
    return _int_in_range("-p/--port", text, DEFAULT_PORT, MIN_PORT, MAX_PORT)


def _unit(text: str | None, default: str) -> str:
    if text is None:
        return default
    if len(text) == 1 and text in IPERF3_UNITS:
        return text
    unit = text.upper()
    if unit not in DISPLAY_UNITS:
        raise UsageError(f"-f/--format must be B, KB or MB (classic), or one of k m g t "
                         f"(bits/sec) K M G T (bytes/sec) a A (scaled) as in iperf3, not "
                         f"'{text}'")
    return unit


def _length(text: str | None, default: int) -> int:
    if text is None:
        return default
    return flag_values.size("-l/--len", text, MIN_LENGTH, MAX_LENGTH, "from 1B to 64MB (e.g. 128K)")


def _memory_budget(text: str | None) -> int:
    if text is None:
        return DEFAULT_MEMORY_BUDGET
    return flag_values.size("--memory-budget", text, MIN_MEMORY_BUDGET, MAX_MEMORY_BUDGET,
                          "from 1MB to 1000GB (e.g. 512MB)")


def _congestion(text: str | None) -> str | None:
    if text is None:
        return None
    if not is_congestion_name(text):
        raise UsageError(f"-C/--congestion must name a congestion control such as cubic, not "
                         f"'{text}'")
    return text


def _window(text: str | None) -> int | None:
    if text is None:
        return None
    return flag_values.size("-w/--window", text, MIN_WINDOW, MAX_WINDOW,
                          "from 2KB to 1GB (e.g. 64K)")


Default = TypeVar("Default", float, None)


def _positive_seconds(flag: str, text: str | None, default: Default, low: float = 0.0,
                      high: float = MAX_TEST_SECONDS) -> float | Default:
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not ((value >= low if low > 0 else value > 0) and value <= high):  # and nan, inf
        floor = f"at least {low:g}" if low > 0 else "greater than 0"
        raise UsageError(f"{flag} must be a number of seconds {floor} and at most {high:g}, "
                         f"not '{text}'")
    return value


def _num_bytes(text: str | None, time_text: str | None, blocks_text: str | None,
               length: int) -> int | None:
    if blocks_text is not None:  # -k: that many blocks of -l bytes
        if text is not None or time_text is not None:
            raise UsageError("-k/--blockcount cannot be used with -n/--num or -t/--time: each "
                             "says when the test ends")
        return _int_in_range("-k/--blockcount", blocks_text, 1, 1,
                             MAX_NUM_BYTES // length) * length
    if text is None:
        return None
    if time_text is not None:
        raise UsageError("-n/--num and -t/--time cannot be used together: -n sends a fixed "
                         "amount, -t sends for a fixed time")
    try:
        value = parse_size(text)
    except ValueError:
        value = 0
    if not 0 < value <= MAX_NUM_BYTES:
        raise UsageError(f"-n/--num must be an amount from 1B to {MAX_NUM_BYTES}B with unit "
                         f"B, KB or MB (e.g. 10MB), not '{text}'")
    return value


def _ip_address(flag: str, text: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise UsageError(f"{flag} must be an IPv4 or IPv6 address, not '{text}'") from None


MAX_FREE_TEXT = 200  # characters of a title or a timestamp format

def _tos(tos_text: str | None, dscp_text: str | None) -> int:
    """-S or --dscp as the TOS byte (DSCP in its six high bits); 0 when neither is given."""
    if tos_text is not None and dscp_text is not None:
        raise UsageError("-S/--tos and --dscp both set the TOS byte: use one")
    if tos_text is not None:
        try:
            value = int(tos_text, 0) if not re.fullmatch(r"0\d+", tos_text) else int(tos_text, 8)
        except ValueError:
            value = -1
        if not 0 <= value <= 255:
            raise UsageError(f"-S/--tos must be a byte, 0..255 (0x.. hex, 0.. octal), not "
                             f"{tos_text[:40]!r}")
        return value
    if dscp_text is None:
        return 0
    code = dscp_code(dscp_text)
    if code is None:
        raise UsageError(f"--dscp must be {DSCP_RULE}, not {dscp_text[:40]!r}")
    return code << 2


def _free_text(flag: str, text: str | None) -> str | None:
    """A title or format: one printable line, bounded."""
    if text is None:
        return None
    if not text.isprintable() or len(text) > MAX_FREE_TEXT:
        raise UsageError(f"{flag} must be one line of at most {MAX_FREE_TEXT} printable "
                         f"characters, not {text[:60]!r}")
    return text


def _server_host(client_value: str, serverip: str | None) -> str:
    if client_value == "" or serverip == "":
        raise UsageError(f"{'-c/--client' if client_value == '' else '-I/--serverip'} needs "
                         "a server address, not an empty one")
    direct = client_value if client_value != _NO_HOST else None
    if direct and serverip and direct != serverip:
        raise UsageError(f"two server addresses given: -c {direct} and -I {serverip}")
    host = direct or serverip or DEFAULT_SERVER_IP
    flag = "-c/--client" if direct else "-I/--serverip"
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    # A name is allowed (it is resolved at connect time), but something that looks like a
    # dotted address and is not one is a typo, not a name.
    if re.fullmatch(r"[\d.]+", host) or not _HOSTNAME.fullmatch(host):
        raise UsageError(f"{flag} must be an IP address or host name, not {host[:60]!r}")
    return host
