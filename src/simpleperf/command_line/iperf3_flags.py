"""iperf3 3.21's client flags that a script may type and that have no other home here: the
ones with a meaning for us (--extra-data, --json-stream-full-output; --fq-rate is declared
by its field of the test description and added with it), and the
ones that change nothing because we always do what they ask or have nothing to tune,
accepted so that the script runs, each saying so under -V. The long names iperf3 gives our
existing flags (--length, --bytes, --set-mss, --version4, --version6,
--server-max-duration) are aliases in cli.py."""

from __future__ import annotations

import argparse
import socket
from typing import Any

from .. import rsa_auth
from ..description.client_options import ClientOptions
from ..description.options import MAX_FLOW_LABEL
from ..errors import UsageError

MAX_EXTRA_DATA = 4096  # characters of --extra-data
MAX_KEEPALIVE = 32767  # Linux's bound on TCP_KEEPIDLE, TCP_KEEPINTVL and TCP_KEEPCNT

# argparse dest -> (option strings, takes a value: None for an optional one, what it does
# here, for -V)
ACCEPTED_ONLY: dict[str, tuple[tuple[str, ...], bool | None, str]] = {
    "gsro": (("--gsro",), False, "UDP segmentation and receive offload are always on where "
             "the kernel has them (-v lists them)"),
    "udp_counters_64bit": (("--udp-counters-64bit",), False, "UDP datagram numbers are "
                           "64-bit already (iperf3 servers are sent iperf3's 64-bit layout)"),
    "skip_rx_copy": (("--skip-rx-copy",), False, "receivers read into one reused buffer; "
                     "MSG_TRUNC would leave UDP datagrams' numbers unread"),
    "pacing_timer": (("--pacing-timer",), True, "the pacer wakes every millisecond, as "
                     "iperf3's default, and sends what is due"),
    "forceflush": (("--forceflush",), False, "every line is flushed as it is printed"),
    "debug": (("-d", "--debug"), None, "there is no debug output; -V shows what there is"),
}


def add_arguments(group: Any) -> None:
    group.add_argument("-L", "--flowlabel", metavar="N", help="IPv6: every packet of the "
                       "test carries flow label N (1 to 0xFFFFF, decimal or 0x hex), as "
                       "iperf3's")
    group.add_argument("--extra-data", metavar="TEXT", help="with -J or --json-stream: TEXT "
                       "as the document's extra_data (iperf3's)")
    group.add_argument("--json-stream-full-output", action="store_true", help="--json-stream,"
                       " then the whole -J document at the end (iperf3 3.21's)")
    group.add_argument("--bind-dev", metavar="DEV", help="every socket through interface DEV "
                       "only (SO_BINDTODEVICE; a server's listeners, TCP and UDP)")
    group.add_argument("--cntl-ka", nargs="?", const="", metavar="IDLE/INTERVAL/COUNT",
                       help="TCP keepalive on the control connection: seconds idle before "
                       "the first probe, seconds between probes, probes before giving up "
                       "(each may be left empty: the kernel's)")
    group.add_argument("--get-server-output", action="store_true", help="an iperf3 server's "
                       "own report, printed after ours (-J: server_output_text); a "
                       "simpleperf server's view is in every receiver row already")
    group.add_argument("--username", metavar="NAME", help="iperf3's RSA authentication to "
                       "an iperf3 server: the user (password from $IPERF3_PASSWORD, else "
                       "asked), encrypted with --rsa-public-key-path")
    group.add_argument("--rsa-public-key-path", metavar="FILE", help="the iperf3 server's "
                       "RSA public key (PEM), for --username")
    group.add_argument("--rsa-private-key-path", metavar="FILE", help="server: our RSA "
                       "private key (PEM); iperf3 clients must then authenticate against "
                       "--authorized-users-path")
    group.add_argument("--authorized-users-path", metavar="FILE", help="server: the users "
                       "(iperf3's file: NAME,SHA256 of {NAME}PASSWORD per line)")
    group.add_argument("--time-skew-threshold", metavar="SECONDS", help="server: how far "
                       "an authenticating client's clock may be from ours (default "
                       f"{rsa_auth.DEFAULT_SKEW_SECONDS})")
    group.add_argument("--use-pkcs1-padding", action="store_true", help="RSA with PKCS #1 "
                       "v1.5 padding instead of OAEP (both ends must agree; iperf3's)")
    group.add_argument("-m", "--mptcp", action="store_true", help="Multipath TCP: the "
                       "client's test connections, a server's listener (which takes plain "
                       "TCP clients too); each stream's subflows in -V and JSON "
                       "(mptcp_subflows; 0: it fell back to plain TCP)")
    for dest, (names, value, _) in ACCEPTED_ONLY.items():
        if value is None:
            group.add_argument(*names, dest=dest, nargs="?", const="1", metavar="LEVEL",
                               help="iperf3's; accepted, changes nothing here (-V says why)")
        elif value:
            group.add_argument(*names, dest=dest, metavar="VALUE",
                               help="iperf3's; accepted, changes nothing here (-V says why)")
        else:
            group.add_argument(*names, dest=dest, action="store_true",
                               help="iperf3's; accepted, changes nothing here (-V says why)")


def apply(options: ClientOptions, args: argparse.Namespace) -> ClientOptions:
    """The client options with these flags' values."""
    changes: dict[str, Any] = {}
    if args.extra_data is not None:
        if len(args.extra_data) > MAX_EXTRA_DATA or not args.extra_data.isprintable():
            raise UsageError(f"--extra-data: at most {MAX_EXTRA_DATA} printable characters")
        changes["extra_data"] = args.extra_data
    if args.bind_dev is not None:
        changes["bind_dev"] = device_name(args.bind_dev)
    if args.cntl_ka is not None:
        changes["control_keepalive"] = _keepalive(args.cntl_ka)
    if args.get_server_output:
        changes["get_server_output"] = True
    if (args.username is None) != (args.rsa_public_key_path is None):
        raise UsageError("--username and --rsa-public-key-path go together (iperf3's RSA "
                         "authentication)")
    if args.username is not None:
        if not 0 < len(args.username) <= 256 or any(c.isspace() for c in args.username):
            raise UsageError("--username must be a name without spaces (at most 256 "
                             "characters)")
        rsa_auth.load_public_key(args.rsa_public_key_path)  # a bad key fails now
        changes.update(rsa_username=args.username,
                       rsa_public_key=args.rsa_public_key_path,
                       rsa_pkcs1=args.use_pkcs1_padding)
    if args.mptcp:
        if options.test.transport.datagrams:
            raise UsageError("-m/--mptcp is Multipath TCP: not with -u")
        changes["mptcp"] = True
    if args.flowlabel is not None:
        changes["flowlabel"] = _flow_label(args.flowlabel, options)
    if args.json_stream_full_output:
        if options.json:
            raise UsageError("--json-stream-full-output is --json-stream with the whole "
                             "document at the end: not with -J")
        changes.update(json_stream=True, json_stream_full=True)
    notes = [f"{ACCEPTED_ONLY[dest][0][-1]}: {ACCEPTED_ONLY[dest][2]}"
             for dest in ACCEPTED_ONLY if getattr(args, dest) not in (None, False)]
    if notes:
        changes["accepted_only"] = tuple(notes)
    return options.asking(**changes)


def _flow_label(text: str, options: ClientOptions) -> int:
    try:
        label = int(text, 0)
    except ValueError:
        label = -1
    if not 1 <= label <= MAX_FLOW_LABEL:
        raise UsageError(f"-L/--flowlabel must be a flow label from 1 to "
                         f"{MAX_FLOW_LABEL:#x} (20 bits), not '{text}'")
    if options.family == socket.AF_INET:
        raise UsageError("-L/--flowlabel is IPv6's: not with -4")
    return label


def authorizer(args: argparse.Namespace) -> rsa_auth.Authorizer | None:
    """A server's check of iperf3 clients' RSA tokens, from its flags (None without)."""
    if (args.rsa_private_key_path is None) != (args.authorized_users_path is None):
        raise UsageError("--rsa-private-key-path and --authorized-users-path go together "
                         "(iperf3's RSA authentication)")
    if args.rsa_private_key_path is None:
        if args.time_skew_threshold is not None:
            raise UsageError("--time-skew-threshold is for a server with "
                             "--rsa-private-key-path")
        return None
    try:
        skew = int(args.time_skew_threshold or rsa_auth.DEFAULT_SKEW_SECONDS)
    except ValueError:
        skew = -1
    if not 0 < skew <= 86400:
        raise UsageError(f"--time-skew-threshold must be whole seconds from 1 to 86400, not "
                         f"'{args.time_skew_threshold}'")
    try:
        with open(args.authorized_users_path, encoding="utf-8", errors="replace"):
            pass
    except OSError as error:
        raise UsageError(f"--authorized-users-path: cannot read {args.authorized_users_path}: "
                         f"{(error.strerror or str(error)).lower()}") from None
    return rsa_auth.Authorizer(rsa_auth.load_private_key(args.rsa_private_key_path),
                               args.authorized_users_path, skew, args.use_pkcs1_padding)


def device_name(text: str) -> str:
    """--bind-dev: an interface's name as Linux allows it (at most 15 characters)."""
    if not 0 < len(text) <= 15 or not text.isprintable() or any(c in text for c in "/ :"):
        raise UsageError(f"--bind-dev must be an interface's name (at most 15 characters, "
                         f"no '/', ':' or spaces), not '{text}'")
    return text


def _keepalive(text: str) -> tuple[int, int, int]:
    """--cntl-ka[=IDLE/INTERVAL/COUNT], each part optional (0: the kernel's)."""
    parts = text.split("/") if text else []
    try:
        values = [int(part) if part else 0 for part in parts]
    except ValueError:
        values = [-1]
    if len(parts) > 3 or not all(0 <= value <= MAX_KEEPALIVE for value in values):
        raise UsageError(f"--cntl-ka takes IDLE/INTERVAL/COUNT, whole numbers from 0 to "
                         f"{MAX_KEEPALIVE} (empty or 0: the kernel's), not '{text}'")
    values += [0] * (3 - len(values))
    return values[0], values[1], values[2]
