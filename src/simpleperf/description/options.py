"""Options, defaults and limits: the one source of every rule a test obeys.

The command line (cli.py), experiment files (lab/model/experiment.py) and the protocols'
validators (protocol/) all read their ranges from here, so a value one accepts the others
accept too. Nothing here parses a command line or touches a socket.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, TypeGuard

DEFAULT_PORT = 8088
DEFAULT_SERVER_IP = "127.0.0.1"
DEFAULT_DURATION = 25.0  # classic Simpleperf's -t
DEFAULT_LENGTH = 256 * 1024  # TCP read/write size
DEFAULT_UDP_LENGTH = 1460  # one datagram per Ethernet frame, as iperf3 chooses
DEFAULT_UDP_RATE = 1e6  # bits/s, iperf3's default
DEFAULT_RTT_INTERVAL = 0.1
DEFAULT_RPM_SECONDS = 20.0  # --rpm's time limit when -t is not given
MAX_FLOW_LABEL = 0xFFFFF  # -L/--flowlabel: IPv6's flow label is 20 bits
DEFAULT_RPM_INTERVAL = 1.0  # --rpm-interval: the draft's ID (its table says 5 s)
MIN_RPM_INTERVAL, MAX_RPM_INTERVAL = 0.1, 60.0
CONNECT_TIMEOUT_SECONDS = 10.0  # a connection's handshake, unless --connect-timeout
CONNECT_RETRY_SECONDS = 0.2  # --connect-retries: between tries (iperf 2.1.8's, measured)
DEFAULT_TIMESTAMP_FORMAT = "%c "  # --timestamps without a format, as iperf3
DEFAULT_NATIVE_INTERVAL = 1.0  # seconds per row of a native test, as iperf3 prints them
DEFAULT_LOSS_THRESHOLD = 1.0  # percent, for --probe
# One-way delay histograms (--trip-times, --histograms), as iperf2 bins them: 100 us bins
# over the first second; the printed line's confidence bins at 5 % and 95 %.
DEFAULT_HISTOGRAM_BIN_WIDTH = 100e-6  # seconds
DEFAULT_HISTOGRAM_BINS = 10000
DEFAULT_HISTOGRAM_LOWER_CI, DEFAULT_HISTOGRAM_UPPER_CI = 5.0, 95.0
MIN_HISTOGRAM_BIN_WIDTH, MAX_HISTOGRAM_BIN_WIDTH = 1e-6, 10.0
MAX_HISTOGRAM_BINS = 100_000
# Non-empty bins a peer may send per test in its results (a message holds at most 64 KB).
MAX_PEER_HISTOGRAM_BINS = 2000
# --isochronous FPS:MEAN,STDEV: iperf2's default is 60 frames a second at 20 Mbit/s.
DEFAULT_FRAME_RATE = 60.0
DEFAULT_FRAME_LOAD = 20e6  # bits/s
MAX_FRAME_RATE = 10_000.0

MIN_PORT, MAX_PORT = 1024, 65535
MAX_TTL = 255  # --ttl: an IPv4 TTL and an IPv6 hop limit are one byte
MAX_CPU = 4095  # -A/--affinity: a CPU number as Linux counts them (CONFIG_NR_CPUS)
MIN_LENGTH, MAX_LENGTH = 1, 64 * 1024 * 1024
MIN_UDP_LENGTH = 16  # a datagram's header: send time and packet number
AUTH_UDP_LENGTH = 24  # the header and, with a shared secret, the test's 8-byte key
MAX_UDP_LENGTH = 65507  # the largest UDP payload over IPv4
CLASSIC_MAX_PARALLEL = 5  # what a classic Simpleperf peer accepts
MAX_PARALLEL = 128
# --bounceback-congest (iperf2's): its words -> the load's direction; without a value one
# stream both ways; at most MAX_PARALLEL streams
WORKING_LOAD_WAYS = {"up": "forward", "down": "reverse", "bidir": "bidir"}
DEFAULT_WORKING_LOAD = ("bidir", 1)
MIN_WINDOW, MAX_WINDOW = 2 * 1000, 10**9
MIN_MSS, MAX_MSS = 88, 32767  # Linux's TCP_MAXSEG range
MAX_RATE = 1e13  # bits/s per stream
MAX_OMIT = 3600.0
MAX_TEST_SECONDS = 7 * 86400.0  # the longest test either end accepts
MAX_NUM_BYTES = 1 << 60
MAX_RTT_COUNT = 10**6
MIN_RTT_INTERVAL = 0.01  # 100 probes a second: more would load what it measures
MIN_REPORT_INTERVAL = 0.01
# The finest interval a native server keeps for the client (its rows come back with the
# results): the client's -i, no finer than this, so a server's bookkeeping stays small.
MIN_SERVER_SAMPLE = 0.05
MAX_SERVER_SAMPLE = 60.0
MAX_CLIENTS_LIMIT = 100_000
MAX_SECRET_BYTES = 4096  # --auth-secret-file: a key, not a document
# --memory-budget: what the buffers of all the tests a server runs at once may take (a
# stream holds one buffer of the test's length: 128 streams of 64 MB would be 8 GB). The
# default fits a small machine and every test of iperf3's defaults (-P 128 x 128 KB) many
# times over.
DEFAULT_MEMORY_BUDGET = 256_000_000  # bytes (sizes are decimal here, as -l's)
MIN_MEMORY_BUDGET = 1_000_000
MAX_MEMORY_BUDGET = 10**12
SMALL_TEST_BYTES = 32_000_000  # a test with more buffers than this is a large one ...
LARGE_SHARE = 0.75  # ... and large ones together may hold this much of the budget
# Open connections a server keeps at once, in all and from one address: a thread each. One
# test may open 2 x 128 streams, a control and an echo connection from one address.
DEFAULT_MAX_CONNECTIONS = 1000
DEFAULT_IDLE_SECONDS = 60.0  # a classic connection that brings (almost) nothing this long ends
# ... and any test with no stated end (an amount of data, a header-less iperf2 stream) that
# moves less than this in that long (--rcv-timeout): its place is not held for a trickle
TRICKLE_BYTES = 1000
DEFAULT_MAX_CONNECTIONS_PER_HOST = 300
# A UDP peer whose address nothing proved (iperf2's clients) is sent at most this many times
# what it sent (RFC 9000's anti-amplification factor), plus --unproven-udp's allowance, which
# lasts at most MAX_UNPROVEN_SECONDS (engine/unproven.py).
UNPROVEN_UDP_FACTOR = 3
DEFAULT_UNPROVEN_SECONDS = 10.0
MAX_UNPROVEN_SECONDS = 3600.0
SERVER_OVERRUN_SECONDS = 5.0  # a server ends a test this long after --max-duration
RESULTS_WAIT_SECONDS = 30.0  # after the test's end, for the peer's results
DECISION_SECONDS = 15.0  # a native client waits this long for the server's accepted
# --queue-wait: a test that finds --max-clients running waits this long at most for one to
# end (less than a native client waits for the server's decision, with time to spare).
DEFAULT_QUEUE_WAIT = 10.0
MAX_QUEUE_WAIT = DECISION_SECONDS - 2.0
MAX_QUEUE = 1000
# A transfer that does not move for this long is given up: the test's own length, within
# these bounds. At least a few doubling retransmission timeouts (0.2 + 0.4 + 0.8 + 1.6 s),
# so heavy loss is not taken for a server that stopped reading; a -n test, whose length is
# not known, gets the most.
# --server-bitrate-limit: a test's rate, both directions, averaged over this many seconds
# (iperf3's default), or over what has passed of it, but never less than a second.
DEFAULT_RATE_WINDOW = 5.0
MIN_RATE_WINDOW, MAX_RATE_WINDOW = 1.0, 3600.0
STALL_SECONDS_MIN = 3.0
STALL_SECONDS_MAX = 30.0


def stall_limit(duration: float | None) -> float:
    """How long a classic transfer may sit still: `duration` for -t, bounded."""
    if duration is None:
        return STALL_SECONDS_MAX
    return min(STALL_SECONDS_MAX, max(STALL_SECONDS_MIN, duration))

_CONGESTION_NAME = re.compile(r"[a-z0-9_]{1,15}")


def is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float]:
    return (is_int(value) or isinstance(value, float)) and value == value  # not NaN


def stream_count(parallel: int, direction: str) -> int:
    """Data streams a test opens: -P, twice over with --bidir (whatever describes it)."""
    return parallel * (2 if direction == "bidir" else 1)


def is_congestion_name(text: object) -> bool:
    """A name Linux could know as a TCP congestion control (TCP_CA_NAME_MAX is 16)."""
    return isinstance(text, str) and _CONGESTION_NAME.fullmatch(text) is not None


# RFC 4594's DSCP names (and RFC 5865's VA, RFC 8622's LE): the code point, 0..63.
DSCP_NAMES = {"EF": 46, "VA": 44, "LE": 1, "BE": 0, "DF": 0,
              **{f"CS{n}": 8 * n for n in range(8)},
              **{f"AF{c}{d}": 8 * c + 2 * d for c in range(1, 5) for d in range(1, 4)}}
DSCP_RULE = "0..63 or a name (EF, AF11..AF43, CS0..CS7, VA, LE, BE or DF)"


def dscp_code(text: object) -> int | None:
    """A DSCP given as a name or a number 0..63 (or text of one), as its code point; None
    when it is neither."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text if 0 <= text <= 63 else None
    if not isinstance(text, str):
        return None
    code = DSCP_NAMES.get(text.upper())
    if code is None and text.isdigit() and int(text) <= 63:
        code = int(text)
    return code


def udp_length_ok(length: int) -> bool:
    return MIN_UDP_LENGTH <= length <= MAX_UDP_LENGTH


def test_deadline(duration: float | None, omit: float, limit: float | None = None) -> float:
    """Seconds after its start that a test may last before it is ended: the server's
    limit when it set one, else the test's own length plus time for the results."""
    if limit is not None:
        return limit
    if duration is None:
        return MAX_TEST_SECONDS
    return omit + duration + RESULTS_WAIT_SECONDS


@dataclass(frozen=True)
class ServerOptions:
    bind: str | None
    port: int
    unit: str
    length: int
    window: int | None = None
    congestion: str | None = None
    max_duration: float | None = None
    max_clients: int | None = None
    queue: int = 0  # --queue: tests that may wait for one of --max-clients (0: refused)
    queue_wait: float = DEFAULT_QUEUE_WAIT  # --queue-wait: how long each may wait
    # -i: each test's interval rows as they close, every this many seconds for iperf2 and
    # iperf3 clients (a native test's rows follow its client's -i); None: summaries only
    interval: float | None = None
    max_parallel: int | None = None
    secret: bytes | None = None
    allow_classic: bool = False  # --allow-classic: serve classic clients despite a secret
    mptcp: bool = False  # -m/--mptcp: listen for Multipath TCP clients (plain ones too)
    bind_dev: str | None = None  # --bind-dev: listen on this interface only
    rsa_auth: Any = None  # rsa_auth.Authorizer: iperf3 clients must authenticate
    permit_key: str | None = None  # --permit-key: iperf2 TCP clients must state it
    # --permit-key-timeout: seconds a keyed server takes new tests, then ends (None: ever)
    permit_key_timeout: float | None = None
    idle_limit: float = DEFAULT_IDLE_SECONDS  # --rcv-timeout
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    memory_budget: int = DEFAULT_MEMORY_BUDGET  # bytes of test buffers at once
    max_connections_per_host: int = DEFAULT_MAX_CONNECTIONS_PER_HOST
    one_off: bool = False  # -1: serve one test, then exit
    timestamps: str | None = None  # --timestamps: strftime format before every line
    json: bool = False  # -J: one JSON document per test, no text
    daemon: bool = False  # -D: in the background once listening
    pidfile: str | None = None
    logfile: str | None = None  # --logfile: all output appended here
    rate_limit: float | None = None  # --server-bitrate-limit: bits/s, a test's total
    rate_window: float = DEFAULT_RATE_WINDOW  # ... averaged over this many seconds
    affinity: int | None = None  # -A n: the CPU the server runs on
    realtime: bool = False  # -z/--realtime (iperf2's): the round-robin real-time scheduler
    idle_timeout: float | None = None  # --idle-timeout: a test whose bytes stand still ends
    file: str | None = None  # -F: a one-stream TCP test sends this file / writes into it
    # --unproven-udp RATE/SECONDS: what a UDP peer that cannot prove its address (iperf2's
    # -u -R) may be sent beyond the factor (0: nothing; engine/unproven.py)
    unproven_rate: float = 0.0
    unproven_seconds: float = DEFAULT_UNPROVEN_SECONDS
    cert: str | None = None  # --cert: HTTPS's certificate (default: a self-signed one)
    key: str | None = None  # --key: its private key, when not in --cert's file

    @property
    def test_time_limit(self) -> float | None:
        """How long a test may run on this server before it is ended."""
        if self.max_duration is None:
            return None
        return self.max_duration + SERVER_OVERRUN_SECONDS
