"""Command line: flags, defaults and validation, turned into option objects.

Every mistake becomes a UsageError carrying one line that names the flag and what it
accepts; the entry point prints it and exits with status 2.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
from dataclasses import dataclass

from . import __version__
from .units import DISPLAY_UNITS, parse_size

DEFAULT_PORT = 8088
DEFAULT_SERVER_IP = "127.0.0.1"
DEFAULT_DURATION = 25.0
DEFAULT_LENGTH = 256 * 1024
MAX_LENGTH = 64 * 1024 * 1024
MAX_PARALLEL = 5
MIN_WINDOW = 2 * 1000
MAX_WINDOW = 10**9
NO_MODE_MESSAGE = "Error: you must run either in server or client mode"

_HOSTNAME = re.compile(r"^(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?)+$")


class UsageError(Exception):
    """A command-line mistake; str(error) is the single line shown to the user."""


@dataclass(frozen=True)
class ServerOptions:
    bind: str | None
    port: int
    unit: str
    length: int
    window: int | None = None
    congestion: str | None = None


@dataclass(frozen=True)
class ClientOptions:
    host: str
    port: int
    unit: str
    duration: float
    num_bytes: int | None
    interval: float | None
    parallel: int
    length: int
    window: int | None = None
    congestion: str | None = None


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print usage and exit; we want one line
        raise UsageError(message)


def _build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="simpleperf",
        description="Measure network throughput (classic Simpleperf and extensions).",
    )
    mode = parser.add_argument_group("mode")
    mode.add_argument("-s", "--server", action="store_true", help="run as server")
    mode.add_argument("-c", "--client", nargs="?", const="", default=None, metavar="HOST",
                      help="run as client (optionally give the server address here)")
    common = parser.add_argument_group("both modes")
    common.add_argument("-p", "--port", help=f"port, 1024..65535 (default {DEFAULT_PORT})")
    common.add_argument("-f", "--format", help="unit of the Transfer column: B, KB or MB "
                                              "(default MB)")
    common.add_argument("-l", "--len", help="read/write buffer size, e.g. 128K "
                                           f"(default {DEFAULT_LENGTH // 1024}K)")
    common.add_argument("-w", "--window", help="socket buffer size (the TCP window), e.g. "
                                              "64K (default: the kernel's autotuning)")
    common.add_argument("-C", "--congestion", help="TCP congestion control, e.g. cubic, reno, "
                                                  "bbr (default: the system's)")
    server = parser.add_argument_group("server")
    server.add_argument("-b", "--bind", help="address to listen on (default: all interfaces)")
    client = parser.add_argument_group("client")
    client.add_argument("-I", "--serverip", help=f"server address (default {DEFAULT_SERVER_IP})")
    client.add_argument("-t", "--time", help=f"seconds to send (default {DEFAULT_DURATION:g})")
    client.add_argument("-n", "--num", help="send exactly this many bytes, e.g. 10MB")
    client.add_argument("-i", "--interval", help="print a row every this many seconds")
    client.add_argument("-P", "--parallel", help=f"parallel connections, 1..{MAX_PARALLEL}")
    parser.add_argument("-V", "--version", action="version", version=f"simpleperf {__version__}")
    return parser


_SERVER_ONLY = {"bind": "-b/--bind"}
_CLIENT_ONLY = {"serverip": "-I/--serverip", "time": "-t/--time", "num": "-n/--num",
                "interval": "-i/--interval", "parallel": "-P/--parallel"}


def parse_args(argv: list[str]) -> ServerOptions | ClientOptions:
    args, extra = _build_parser().parse_known_args(argv)
    if extra:
        word = extra[0]
        if word.startswith("-"):
            raise UsageError(f"unknown option {word} (see simpleperf --help)")
        raise UsageError(f"unexpected argument '{word}': simpleperf takes no positional "
                         "arguments (see simpleperf --help)")
    is_client = args.client is not None
    if args.server and is_client:
        raise UsageError("-s/--server and -c/--client cannot be used together")
    if not args.server and not is_client:
        raise UsageError(NO_MODE_MESSAGE)
    own, other = (_SERVER_ONLY, _CLIENT_ONLY) if args.server else (_CLIENT_ONLY, _SERVER_ONLY)
    for name, flag in other.items():
        if getattr(args, name) is not None:
            mode = "client" if args.server else "server"
            raise UsageError(f"{flag} is a {mode} option and cannot be used with "
                             f"{'-s' if args.server else '-c'}")
    port = _port(args.port)
    unit = _unit(args.format)
    length = _length(args.len)
    window = _window(args.window)
    if args.server:
        bind = _ip_address("-b/--bind", args.bind) if args.bind is not None else None
        return ServerOptions(bind=bind, port=port, unit=unit, length=length, window=window,
                             congestion=_congestion(args.congestion))
    return ClientOptions(
        host=_server_host(args.client, args.serverip),
        port=port,
        unit=unit,
        duration=_positive_seconds("-t/--time", args.time, DEFAULT_DURATION),
        num_bytes=_num_bytes(args.num, args.time),
        interval=_positive_seconds("-i/--interval", args.interval, None),
        parallel=_int_in_range("-P/--parallel", args.parallel, 1, 1, MAX_PARALLEL),
        length=length,
        window=window,
        congestion=_congestion(args.congestion),
    )


def _int_in_range(flag: str, text: str | None, default: int, low: int, high: int) -> int:
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise UsageError(
            f"{flag} must be an integer from {low} to {high}, not '{text}'") from None
    if not low <= value <= high:
        raise UsageError(f"{flag} must be an integer from {low} to {high}, not {value}")
    return value


def _port(text: str | None) -> int:
    return _int_in_range("-p/--port", text, DEFAULT_PORT, 1024, 65535)


def _unit(text: str | None) -> str:
    if text is None:
        return "MB"
    unit = text.upper()
    if unit not in DISPLAY_UNITS:
        raise UsageError(f"-f/--format must be B, KB or MB, not '{text}'")
    return unit


def _length(text: str | None) -> int:
    if text is None:
        return DEFAULT_LENGTH
    try:
        value = parse_size(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_LENGTH:
        raise UsageError(f"-l/--len must be a size from 1B to 64MB (e.g. 128K), not '{text}'")
    return value


def _congestion(text: str | None) -> str | None:
    if text is None:
        return None
    if not re.fullmatch(r"[a-z0-9_]{1,15}", text):
        raise UsageError(f"-C/--congestion must name a congestion control such as cubic, not "
                         f"'{text}'")
    return text


def _window(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = parse_size(text)
    except ValueError:
        value = 0
    if not MIN_WINDOW <= value <= MAX_WINDOW:
        raise UsageError(f"-w/--window must be a size from 2KB to 1GB (e.g. 64K), not '{text}'")
    return value


def _positive_seconds(flag: str, text: str | None, default: float | None) -> float | None:
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value < 1e9):  # also rejects nan and inf
        raise UsageError(f"{flag} must be a number of seconds greater than 0, not '{text}'")
    return value


def _num_bytes(text: str | None, time_text: str | None) -> int | None:
    if text is None:
        return None
    if time_text is not None:
        raise UsageError("-n/--num and -t/--time cannot be used together: -n sends a fixed "
                         "amount, -t sends for a fixed time")
    try:
        value = parse_size(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise UsageError(f"-n/--num must be an amount greater than 0 with unit B, KB or MB "
                         f"(e.g. 10MB), not '{text}'")
    return value


def _ip_address(flag: str, text: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise UsageError(f"{flag} must be an IPv4 or IPv6 address, not '{text}'") from None


def _server_host(client_value: str, serverip: str | None) -> str:
    direct = client_value or None
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
    if re.fullmatch(r"[\d.]+", host) or not _HOSTNAME.match(host):
        raise UsageError(f"{flag} must be an IP address or host name, not '{host}'")
    return host
