"""The native simpleperf protocol, version 1: bytes in, messages out, never a socket.

Every TCP connection opens with a six-byte preface: MAGIC, a kind byte and the version.

- control (kind C): then length-prefixed JSON messages both ways (4-byte big-endian length,
  then a UTF-8 JSON object with a string "type"): events.py types them, exchange.py orders
  them;
- data (kind D): then the 16-byte test token and a 2-byte stream number, then raw payload;
- echo (kind E): then 16-byte probes that the server sends straight back (RTT tests).

UDP datagrams open with the same MAGIC: stream hello (U) and its acknowledgement (A) carry
token and stream number; echo probes (e) come back unchanged. Data datagrams carry no magic:
they arrive on a socket already bound to one stream, and start with DATAGRAM_HEADER.

A classic client's first bytes are payload (zeros), an iperf3 client's are its cookie; see
detect.py. Sizes are capped so that no peer can make us buffer more than MAX_MESSAGE.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from ..delays import Binning, DelayAccount
from ..errors import ProtocolError
from ..options import (
    AUTH_UDP_LENGTH,
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
    MAX_NUM_BYTES,
    MAX_OMIT,
    MAX_PARALLEL,
    MAX_PEER_HISTOGRAM_BINS,
    MAX_RATE,
    MAX_SERVER_SAMPLE,
    MAX_TEST_SECONDS,
    MAX_UDP_LENGTH,
    MAX_WINDOW,
    MIN_HISTOGRAM_BIN_WIDTH,
    MIN_LENGTH,
    MIN_SERVER_SAMPLE,
    MIN_UDP_LENGTH,
    MIN_WINDOW,
    ClientOptions,
    is_congestion_name,
)

MAGIC = b"SPRF"
VERSION = 1
CONTROL, DATA, ECHO = b"C", b"D", b"E"
UDP_HELLO, UDP_ACK, UDP_ECHO = b"U", b"A", b"e"
PREFACE_SIZE = len(MAGIC) + 2
TOKEN_SIZE = 16
STREAM_ID = struct.Struct("!H")
DATA_PREFACE_SIZE = PREFACE_SIZE + TOKEN_SIZE + STREAM_ID.size
UDP_HELLO_SIZE = DATA_PREFACE_SIZE
ECHO_PROBE = struct.Struct("!QQ")  # probe number, sender's clock in nanoseconds
ECHO_TAG_SIZE = 16  # after a probe, when the server requires a shared secret
DATAGRAM_HEADER = struct.Struct("!IIQ")  # send time: seconds, microseconds; packet number
assert DATAGRAM_HEADER.size == MIN_UDP_LENGTH
# With a shared secret, each data datagram also carries the test's UDP key (udp_data_key):
# a datagram without it is not counted, whoever sent it from whatever address.
UDP_KEY_SIZE = 8
AUTH_DATAGRAM_HEADER = struct.Struct(f"!IIQ{UDP_KEY_SIZE}s")
assert AUTH_DATAGRAM_HEADER.size == AUTH_UDP_LENGTH
# --trip-times over TCP: every write of the sender opens with its send time (nanoseconds of
# the sender's wall clock), its number from 1, and its length with this header, so that the
# receiver finds each write's end in the byte stream and times it from write to read.
WRITE_HEADER = struct.Struct("!QII")
# --isochronous over UDP: after the datagram header (and the key, with a shared secret), the
# frame's number from 1, how many datagrams it has, and this one's index among them from 0.
FRAME_FIELDS = struct.Struct("!IHH")
MAX_FRAME_DATAGRAMS = 65535
# the fewest bytes an isochronous datagram holds: the header, room for a key, the frame fields
MIN_ISOCHRONOUS_UDP_LENGTH = AUTH_UDP_LENGTH + FRAME_FIELDS.size
MAX_MESSAGE = 64 * 1024
_LENGTH = struct.Struct("!I")


def preface(kind: bytes) -> bytes:
    return MAGIC + kind + bytes([VERSION])


def parse_preface(data: bytes) -> bytes:
    """The kind byte of a complete preface; ProtocolError for anything else."""
    if len(data) < PREFACE_SIZE or data[:4] != MAGIC:
        raise ProtocolError("not a simpleperf connection preface")
    if data[5] != VERSION:
        raise ProtocolError(f"unsupported simpleperf protocol version {data[5]} "
                            f"(this server speaks version {VERSION})")
    kind = data[4:5]
    if kind not in (CONTROL, DATA, ECHO):
        raise ProtocolError(f"unknown connection kind {kind!r}")
    return kind


def data_preface(token: bytes, stream: int, kind: bytes = DATA) -> bytes:
    return preface(kind) + token + STREAM_ID.pack(stream)


def parse_data_preface(data: bytes) -> tuple[bytes, int]:
    """(token, stream number) of a data-connection or UDP hello preface."""
    if len(data) != DATA_PREFACE_SIZE or data[:4] != MAGIC or data[5] != VERSION:
        raise ProtocolError("malformed stream preface")
    return data[PREFACE_SIZE:PREFACE_SIZE + TOKEN_SIZE], STREAM_ID.unpack_from(
        data, PREFACE_SIZE + TOKEN_SIZE)[0]


def encode(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":")).encode()
    if len(body) > MAX_MESSAGE:
        raise ValueError("message too large")
    return _LENGTH.pack(len(body)) + body


def padded(encoded: bytes, size: int) -> bytes:
    """An encoded message made exactly `size` bytes long with JSON white space after its
    object, which every reader ignores; ValueError if it is already longer."""
    body = encoded[_LENGTH.size:]
    spare = size - len(encoded)
    if spare < 0:
        raise ValueError(f"message of {len(encoded)} bytes does not fit in {size}")
    return _LENGTH.pack(len(body) + spare) + body + b" " * spare


class MessageReader:
    """Feed it bytes as they arrive; it returns every complete message, in order.

    It refuses, with ProtocolError, a message of length 0 or above MAX_MESSAGE (before
    buffering it), text that is not a JSON object, and an object without a string "type".
    """

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        self._buffer += data
        messages = []
        while len(self._buffer) >= _LENGTH.size:
            (size,) = _LENGTH.unpack_from(self._buffer)
            if not 0 < size <= MAX_MESSAGE:
                raise ProtocolError(f"message length {size} outside 1..{MAX_MESSAGE}")
            if len(self._buffer) < _LENGTH.size + size:
                break
            body = bytes(self._buffer[_LENGTH.size:_LENGTH.size + size])
            del self._buffer[:_LENGTH.size + size]
            messages.append(decode_body(body))
        return messages

    @property
    def pending(self) -> int:
        return len(self._buffer)


def decode_object(body: bytes) -> dict[str, Any]:
    """A JSON object from UTF-8 bytes (iperf3's messages are these too)."""
    try:
        value = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ProtocolError("message is not valid UTF-8 JSON") from None
    if not isinstance(value, dict):
        raise ProtocolError("message is not a JSON object")
    return value


def decode_body(body: bytes) -> dict[str, Any]:
    message = decode_object(body)
    if not isinstance(message.get("type"), str):
        raise ProtocolError("message has no string 'type'")
    return message


DIRECTIONS = ("forward", "reverse", "bidir")


@dataclass(frozen=True)
class TestSpec:
    """What the client asks the server to run. Sizes in bytes, rates in bits/s."""

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

    def to_message(self) -> dict[str, Any]:
        return {"type": "test", **{f.name: getattr(self, f.name) for f in fields(self)}}

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> TestSpec:
        """Strict: every field checked for type and range; unknown fields are ignored so
        that later versions can add some."""
        checks: dict[str, Callable[[Any], bool]] = {
            "protocol": lambda v: v in ("tcp", "udp"),
            "direction": lambda v: v in DIRECTIONS,
            "parallel": lambda v: is_int(v) and 1 <= v <= MAX_PARALLEL,
            "duration": lambda v: v is None or (is_number(v) and 0 < v <= MAX_TEST_SECONDS),
            "num_bytes": lambda v: v is None or (is_int(v) and 0 < v <= MAX_NUM_BYTES),
            "length": lambda v: is_int(v) and MIN_LENGTH <= v <= MAX_LENGTH,
            "rate": lambda v: is_number(v) and 0 <= v <= MAX_RATE,
            "window": lambda v: v is None or (is_int(v) and MIN_WINDOW <= v <= MAX_WINDOW),
            "congestion": lambda v: v is None or is_congestion_name(v),
            "mss": lambda v: v is None or (is_int(v) and 88 <= v <= 65535),
            "nodelay": lambda v: isinstance(v, bool),
            "omit": lambda v: is_number(v) and 0 <= v <= MAX_OMIT,
            "zerocopy": lambda v: isinstance(v, bool),
            "tos": lambda v: is_int(v) and 0 <= v <= 255,
            "sample": lambda v: is_number(v) and MIN_SERVER_SAMPLE <= v <= MAX_SERVER_SAMPLE,
            "repeating_payload": lambda v: isinstance(v, bool),
            "affinity": lambda v: v is None or (is_int(v) and 0 <= v <= MAX_CPU),
            "trip_times": lambda v: isinstance(v, bool),
            "histogram_bin_width": lambda v: is_number(v) and
            MIN_HISTOGRAM_BIN_WIDTH <= v <= MAX_HISTOGRAM_BIN_WIDTH,
            "histogram_bins": lambda v: is_int(v) and 1 <= v <= MAX_HISTOGRAM_BINS,
            "frame_rate": lambda v: is_number(v) and 0 <= v <= MAX_FRAME_RATE,
            "frame_load": lambda v: is_number(v) and 0 < v <= MAX_RATE,
            "frame_stdev": lambda v: is_number(v) and 0 <= v <= MAX_RATE,
            "whole_segments": lambda v: isinstance(v, bool),
        }
        values: dict[str, Any] = {}
        for name, check in checks.items():
            if name in message:
                if not check(message[name]):
                    raise ProtocolError(f"test field '{name}' has an invalid value")
                values[name] = message[name]
        spec = cls(**values)
        if (spec.duration is None) == (spec.num_bytes is None):
            raise ProtocolError("a test needs exactly one of 'duration' and 'num_bytes'")
        if spec.protocol == "udp" and spec.length < MIN_UDP_LENGTH:
            raise ProtocolError(f"UDP datagrams need at least {MIN_UDP_LENGTH} bytes")
        if spec.protocol == "udp" and spec.length > MAX_UDP_LENGTH:
            raise ProtocolError(f"UDP datagrams hold at most {MAX_UDP_LENGTH} bytes")
        if spec.protocol == "tcp" and spec.timed and spec.length < WRITE_HEADER.size:
            raise ProtocolError(f"timed TCP writes need at least {WRITE_HEADER.size} bytes")
        if spec.isochronous and spec.protocol == "udp" and \
                spec.length < MIN_ISOCHRONOUS_UDP_LENGTH:
            raise ProtocolError("isochronous UDP datagrams need at least "
                                f"{MIN_ISOCHRONOUS_UDP_LENGTH} bytes")
        return spec

    @classmethod
    def from_options(cls, options: ClientOptions) -> TestSpec:
        """What a client's command line asks for."""
        rate = options.rate if options.rate is not None else (
            DEFAULT_UDP_RATE if options.udp else 0.0)
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
            whole_segments=not options.udp and not options.length_given)

    @property
    def isochronous(self) -> bool:
        return self.frame_rate > 0

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


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    return (is_int(value) or isinstance(value, float)) and value == value  # not NaN


# Fields of each per-stream result a peer reports at the end; anything else is ignored.
RESULT_FIELDS = {"stream": int, "bytes": int, "seconds": float, "packets": int, "lost": int,
                 "out_of_order": int, "jitter_ms": float, "retransmits": int,
                 "max_snd_cwnd": int, "mean_rtt_us": int, "queue_growth_ms": float,
                 "min_rtt_us": int, "max_rtt_us": int, "max_snd_wnd": int,
                 # an isochronous test's frames: sent and slipped (sender), whole and lost
                 "frames": int, "frames_slipped": int, "frames_lost": int}
SIGNED_RESULT_FIELDS = {"queue_growth_ms"}
# Delay accounts (DelayAccount.to_result): each datagram's or write's, each frame's.
DELAY_RESULT_FIELDS = ("delays", "frame_delays")


def parse_results(message: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Per-stream results by stream number, type-checked; a malformed entry is an error."""
    streams = message.get("streams")
    if not isinstance(streams, list) or len(streams) > 2 * MAX_PARALLEL:
        raise ProtocolError("results need a list 'streams'")
    parsed = {}
    budget = MAX_PEER_HISTOGRAM_BINS  # histogram bins in all streams' delay accounts
    for entry in streams:
        if not isinstance(entry, dict) or not is_int(entry.get("stream")):
            raise ProtocolError("each result needs an integer 'stream'")
        clean = {}
        for name, kind in RESULT_FIELDS.items():
            value = entry.get(name)
            if value is None:
                continue
            ok = is_int(value) if kind is int else is_number(value)
            if not ok or (value < 0 and name not in SIGNED_RESULT_FIELDS):
                raise ProtocolError(f"result field '{name}' has an invalid value")
            clean[name] = value
        for name in DELAY_RESULT_FIELDS:
            if entry.get(name) is not None:
                try:
                    account = DelayAccount.from_result(entry[name], budget)
                except ValueError as error:
                    raise ProtocolError(f"result field '{name}': {error}") from None
                budget -= len(account.bins)
                clean[name] = account
        parsed[clean["stream"]] = clean
    return parsed


def auth_proof(secret: bytes, challenge: str, role: str) -> str:
    """HMAC-SHA256 of the server's challenge: proves the secret without sending it. `role`
    keeps a proof made for one direction from being replayed in the other."""
    return hmac.new(secret, f"{role}:{challenge}".encode(), hashlib.sha256).hexdigest()


def udp_data_key(secret: bytes, challenge: str) -> bytes:
    """The key every UDP data datagram of an authenticated test carries: derived from the
    secret and that connection's challenge, so it differs for every test and tells an
    off-path forger nothing about the secret."""
    return hmac.new(secret, f"udp:{challenge}".encode(), hashlib.sha256).digest()[:UDP_KEY_SIZE]


def echo_probe(number: int, clock_ns: int, secret: bytes | None) -> bytes:
    """One echo probe; with a secret, followed by its tag (a server that requires the secret
    answers nothing else; one that does not echoes the tag along)."""
    probe = ECHO_PROBE.pack(number, clock_ns)
    return probe + _echo_tag(secret, probe) if secret is not None else probe


def echo_probe_is_authentic(secret: bytes, record: bytes) -> bool:
    if len(record) != ECHO_PROBE.size + ECHO_TAG_SIZE:
        return False
    probe, tag = record[:ECHO_PROBE.size], record[ECHO_PROBE.size:]
    return hmac.compare_digest(tag, _echo_tag(secret, probe))


def _echo_tag(secret: bytes, probe: bytes) -> bytes:
    return hmac.new(secret, b"echo:" + probe, hashlib.sha256).digest()[:ECHO_TAG_SIZE]


MAX_PEER_INTERVALS = 1500
# A peer's interval row: stream, start, end, bytes, packets, lost, jitter_ms.
IntervalRow = tuple[int, float, float, int, int | None, int | None, float | None]


def parse_intervals(message: dict[str, Any]) -> list[IntervalRow]:
    """The peer's interval rows sent with its results (absent in long tests)."""
    rows = message.get("intervals", [])
    if not isinstance(rows, list) or len(rows) > MAX_PEER_INTERVALS:
        raise ProtocolError("results 'intervals' must be a list of at most "
                            f"{MAX_PEER_INTERVALS} rows")
    parsed = []
    for row in rows:
        if not (isinstance(row, list) and len(row) == 7 and is_int(row[0])
                and is_number(row[1]) and is_number(row[2]) and is_int(row[3])
                and all(v is None or is_int(v) for v in row[4:6])
                and (row[6] is None or is_number(row[6]))):
            raise ProtocolError("malformed results interval row")
        parsed.append((row[0], row[1], row[2], row[3], row[4], row[5], row[6]))
    return parsed
