"""A client's run as its command line asks it: the test both ends run (`test`, the one
description of it: testspec.TestSpec) and what is the client's alone: the server it
connects to and how, what it prints, and the modes beside a test (--rtt, --probe, --rpm,
iperf2's and iperf3's own)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any

from .options import (
    CONNECT_TIMEOUT_SECONDS,
    DEFAULT_DURATION,
    DEFAULT_HISTOGRAM_LOWER_CI,
    DEFAULT_HISTOGRAM_UPPER_CI,
    DEFAULT_LOSS_THRESHOLD,
    DEFAULT_NATIVE_INTERVAL,
    DEFAULT_RPM_INTERVAL,
    DEFAULT_RTT_INTERVAL,
)
from .testspec import TestSpec, beyond_classic, needs_more_than_classic

_TEST_FIELDS = frozenset(item.name for item in fields(TestSpec))
# The client's own options that need more than a classic test (its field, and the flag a
# native client names when it meets a classic server: None for those that choose the
# peer or prove who we are, and so never fall back to classic)
BEYOND_CLASSIC: tuple[tuple[str, str | None], ...] = (
    ("extended", "-e"), ("json", "-J"), ("json_stream", "--json-stream"), ("file", "-F"),
    ("rtt", "--rtt"), ("probe", "--probe"), ("rpm", "--rpm"), ("extra_data", "--extra-data"),
    ("tradeoff", "-r"), ("csv", "-y C"), ("sum_only", "--sum-only"),
    ("print_mss", "-m/--print_mss"), ("native", None), ("iperf3", None), ("iperf2", None),
    ("secret", None), ("rsa_username", None))


@dataclass(frozen=True)
class ClientOptions:
    host: str
    port: int
    unit: str
    interval: float | None  # -i as given: None when not, 0 for no rows
    # The test both ends run, and the names of its fields a flag gave (the rest are its
    # defaults, or what TestSpec.settled makes of those given)
    test: TestSpec
    given: frozenset[str] = frozenset()
    # The client's own (any of these set means the test needs a simpleperf server):
    extended: bool = False
    json: bool = False
    json_stream: bool = False
    connect_timeout: float = CONNECT_TIMEOUT_SECONDS  # --connect-timeout
    title: str | None = None  # -T: before every line of text output
    timestamps: str | None = None  # --timestamps: strftime format before every line
    native: bool = False
    iperf3: bool = False
    iperf2: bool = False  # --iperf2: the server is iperf2's (iperf -s)
    rtt: bool = False
    probe: bool = False
    loss_threshold: float = DEFAULT_LOSS_THRESHOLD
    count: int | None = None  # --rtt probes
    rtt_interval: float = DEFAULT_RTT_INTERVAL
    latency: bool = True  # RTT probes during native tests
    rpm: bool = False  # --rpm: responsiveness under working conditions (the IETF draft)
    rpm_interval: float = DEFAULT_RPM_INTERVAL
    rpm_url: str | None = None  # -c URL with --rpm: a responsiveness server's configuration
    insecure: bool = False  # --insecure: its TLS certificate accepted unchecked
    # Either protocol:
    local: str | None = None  # -B
    family: int = 0  # socket.AF_UNSPEC, or AF_INET / AF_INET6 with -4 / -6
    secret: bytes | None = None
    logfile: str | None = None  # --logfile: all output appended here
    cport: int | None = None  # --cport: data stream n from this port + n - 1
    affinity: int | None = None  # -A n: the CPU this client runs on
    realtime: bool = False  # -z/--realtime (iperf2's): the round-robin real-time scheduler
    dont_fragment: bool = False  # UDP: a datagram beyond the path's MTU is an error
    snd_timeout: float | None = None  # --snd-timeout: TCP data unacknowledged this long fails
    verbose: bool = False  # -V: also both ends' CPU, as iperf3 prints it
    file: str | None = None  # -F: send this file's bytes (with -R: write what arrives)
    histograms: bool = False  # --histograms: print the delays' histograms (iperf2's lines)
    histogram_ci: tuple[float, float] = (DEFAULT_HISTOGRAM_LOWER_CI, DEFAULT_HISTOGRAM_UPPER_CI)
    extra_data: str | None = None  # --extra-data: in the JSON document, as iperf3's
    json_stream_full: bool = False  # --json-stream-full-output: the whole document at the end
    accepted_only: tuple[str, ...] = ()  # iperf3 flags given that change nothing: why, for -V
    mptcp: bool = False  # -m/--mptcp: the test's TCP connections are Multipath TCP
    bind_dev: str | None = None  # --bind-dev: every socket of the test on this interface
    control_keepalive: tuple[int, int, int] | None = None  # --cntl-ka: idle/interval/count
    get_server_output: bool = False  # --get-server-output: print the server's own report
    rsa_username: str | None = None  # --username: iperf3's RSA authentication, with ...
    rsa_public_key: str | None = None  # ... --rsa-public-key-path (the server's key)
    rsa_pkcs1: bool = False  # --use-pkcs1-padding
    dualtest: bool = False  # --iperf2 -d: iperf2's dual test (the server connects back)
    tradeoff: bool = False  # -r: the test, then the same reversed (--iperf2: connected back)
    listen_port: int | None = None  # --iperf2 -L: where the server connects back
    peer_detect: bool = False  # --iperf2 -X: ask the server's version
    bounceback: int = 0  # --bounceback[=N]: iperf2's round trips, bursts of N messages
    bounce_period: float = 0.0  # --bounceback-period: seconds between bursts (0: at once)
    bounce_hold: float = 0.0  # --bounceback-hold: seconds the server holds each
    bounce_quickack: bool = True  # both ends' TCP_QUICKACK (--bounceback-no-quickack: off)
    # --bounceback-congest[=up|down|bidir][,N]: N TCP streams of load beside, that way
    bounce_congest: tuple[str, int] | None = None
    csv: bool = False  # -y C: iperf2's comma-separated rows instead of text
    permit_key: str | None = None  # --iperf2 --permit-key: the key after each TCP header
    start_at: float | None = None  # --txstart-time: the Unix time the test starts
    connect_only: int | None = None  # --connect-only[=N]: N timed connects (0: for -t)
    flowlabel: int = 0  # -L/--flowlabel (iperf3's): IPv6 packets' flow label (0: none)
    no_udp_fin: bool = False  # --iperf2 -u --no-udp-fin: the last datagram once, no report
    connect_retries: int = 0  # --connect-retries: a failed TCP connect tried this often more
    window_clamp: int = 0  # --tcp-rx-window-clamp: TCP_WINDOW_CLAMP of data sockets (bytes)
    ttl: int = 0  # --ttl (iperf2's -T): data packets' TTL or hop limit (0: the kernel's)
    local_only: bool = False  # --local-only (iperf2's): data sockets' SO_DONTROUTE
    sum_only: bool = False  # --sum-only (iperf2's): the text's SUM rows alone
    print_mss: bool = False  # -m/--print_mss (iperf2's): the connection's MSS in the text
    hide_ips: bool = False  # --hide-ips (iperf2's): IPv4 addresses shown as *.*.*.N
    compatibility: bool = False  # --iperf2 -C/--compatibility: no header, as iperf 2.0's
    # -x/--reportexclude (iperf2's): text left out, of C (connection lines), D (our data
    # rows), M (multicast: none here), S (settings: the banner), V (the server's reports)
    report_exclude: frozenset[str] = frozenset()

    def asking(self, **changes: Any) -> ClientOptions:
        """These options with `changes`: the test's fields among them as a flag gave them
        (into `test` and `given`), the rest the client's own."""
        test = {name: value for name, value in changes.items() if name in _TEST_FIELDS}
        own = {name: value for name, value in changes.items() if name not in _TEST_FIELDS}
        if test:
            own.update(test=dataclasses.replace(self.test, **test),
                       given=self.given | frozenset(test))
        return dataclasses.replace(self, **own) if own else self

    def value(self, name: str) -> Any:
        """A field's value by name, the test's or the client's own."""
        return getattr(self.test if name in _TEST_FIELDS else self, name)

    def settled(self) -> ClientOptions:
        """These options with their test settled (TestSpec.settled): what the defaults
        make of the fields no flag gave."""
        return dataclasses.replace(self, test=self.test.settled(self.given, self.rows_every))

    @property
    def seconds(self) -> float:
        """-t: the test's seconds, for what is timed whatever the test's end (connects,
        round trips, bounces); a test of an amount of data has classic's default."""
        return DEFAULT_DURATION if self.test.duration is None else self.test.duration

    @property
    def rows_every(self) -> float | None:
        """Seconds per printed row of a test beyond classic: -i, none for -i 0, and a row
        per second when -i is not given, as iperf3 prints them."""
        if self.interval is None:
            return DEFAULT_NATIVE_INTERVAL
        return self.interval or None

    @property
    def needs_native(self) -> bool:
        """Whether the test asks more than a classic peer runs: of its fields (each
        field's `classic`: testspec.py) or of the client's own (BEYOND_CLASSIC)."""
        return needs_more_than_classic(self.test, self.given) or any(
            _set(getattr(self, name)) for name, _ in BEYOND_CLASSIC)

    def beyond_classic(self) -> list[str]:
        """The flags a classic server cannot honour in this run, as a refusal names them:
        the test's, then the client's own."""
        return beyond_classic(self.test, self.given) + [
            flag for name, flag in BEYOND_CLASSIC if flag and _set(getattr(self, name))]


def _set(value: object) -> bool:
    """An option given: on, or a value (unset: False and None)."""
    return value is not None and value is not False
