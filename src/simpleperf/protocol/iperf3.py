"""iperf3's protocol (as iperf3 3.12 speaks it): cookies, one-byte states, length-prefixed
JSON for parameters and results, and the UDP stream greeting. Bytes in, values out; never a
socket. The facts: ../shared/reference/iperf3-wire.md (repository: docs/iperf3-compat.md).
"""

from __future__ import annotations

import json
import secrets
import struct
from dataclasses import dataclass, field
from typing import Any

from ..description.options import (
    MAX_CPU,
    MAX_LENGTH,
    MAX_OMIT,
    MAX_PARALLEL,
    MAX_RATE,
    MAX_TEST_SECONDS,
    is_congestion_name,
    stream_count,
)
from ..description.testspec import TestSpec
from ..description.transports import TCP, UDP, Transport, transport_of
from ..errors import ProtocolError
from .native import decode_object

COOKIE_SIZE = 37
COOKIE_ALPHABET = "abcdefghijklmnopqrstuvwxyz234567"

TEST_START = 1
TEST_RUNNING = 2
TEST_END = 4
PARAM_EXCHANGE = 9
CREATE_STREAMS = 10
SERVER_TERMINATE = 11
CLIENT_TERMINATE = 12
EXCHANGE_RESULTS = 13
DISPLAY_RESULTS = 14
IPERF_DONE = 16
ACCESS_DENIED = -1
SERVER_ERROR = -2
# What an iperf3 server answers to any first 37 bytes (a cookie, or a native greeting).
FIRST_ANSWERS = frozenset(value & 0xFF for value in (PARAM_EXCHANGE, ACCESS_DENIED,
                                                    SERVER_ERROR))

# iperf3's error numbers (i_errno) that a SERVER_ERROR carries; the client prints its text.
IEUNIMP = 13
IENOSCTP = 18
IEAUTHTEST = 142
IERECVPARAMS = 114
IENUMSTREAMS = 6
IEDURATION = 5
IETOTALRATE = 27
IEAFFINITY = 132
IENEWTEST = 100  # "unable to create a new test" (with the errno that says why)
ERROR_TEXTS = {
    IEAFFINITY: "unable to set CPU affinity",
    IETOTALRATE: "total required bandwidth is larger than server limit",
    IEDURATION: "test duration too long",
    IENUMSTREAMS: "number of parallel streams too large",
    IEUNIMP: "an option you are trying to set is not implemented yet",
    IENOSCTP: "no SCTP support available",
    IERECVPARAMS: "unable to receive parameters from client",
    IEAUTHTEST: "test authorization failed",
    121: "the server is busy running a test. try again later",
}

MAX_PARAMS = 8192  # as iperf3's server: a parameter message is 1..8192 bytes
MAX_RESULTS = 512 * 1024
UDP_CONNECT_MSG = b"9876"  # what the client's UDP socket sends first (little-endian int)
UDP_CONNECT_REPLY = b"6789"
UDP_CONNECT_REPLY_LEGACY = struct.pack("<i", 987654321)
HEADER_32 = struct.Struct("!III")  # send seconds, microseconds, packet number
HEADER_64 = struct.Struct("!IIQ")  # the same with udp_counters_64bit
_LENGTH = struct.Struct("!I")
_ERROR = struct.Struct("!ii")


def make_cookie() -> bytes:
    return "".join(secrets.choice(COOKIE_ALPHABET) for _ in range(36)).encode() + b"\0"


def is_cookie(data: bytes) -> bool:
    return (len(data) == COOKIE_SIZE and data[-1] == 0
            and all(chr(c) in COOKIE_ALPHABET for c in data[:-1]))


def state(value: int) -> bytes:
    return struct.pack("b", value)


def server_error(code: int, errno: int = 0) -> bytes:
    return state(SERVER_ERROR) + _ERROR.pack(code, errno)


def parse_server_error(data: bytes) -> tuple[int, int]:
    return _ERROR.unpack(data[:_ERROR.size])


def error_text(code: int) -> str:
    return ERROR_TEXTS.get(code, f"iperf3 error {code}")


def signed(byte: int) -> int:
    return byte - 256 if byte > 127 else byte


def encode_json(value: dict[str, Any]) -> bytes:
    body = json.dumps(value, separators=(",", ":")).encode()
    return _LENGTH.pack(len(body)) + body


class JsonReader:
    """One length-prefixed JSON object at a time, refusing lengths outside 1..limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.buffer = bytearray()

    def feed(self, data: bytes) -> dict[str, Any] | None:
        """The object once complete (extra bytes stay buffered), else None."""
        self.buffer += data
        if len(self.buffer) < _LENGTH.size:
            return None
        (size,) = _LENGTH.unpack_from(self.buffer)
        if not 0 < size <= self.limit:
            raise ProtocolError(f"JSON message length {size} outside 1..{self.limit}")
        if len(self.buffer) < _LENGTH.size + size:
            return None
        body = bytes(self.buffer[_LENGTH.size:_LENGTH.size + size])
        del self.buffer[:_LENGTH.size + size]
        return decode_object(body)


# Parameters a client may send that simpleperf refuses, with the error the client prints.
UNSUPPORTED = {"sctp": IENOSCTP, "file": IEUNIMP}


@dataclass(frozen=True)
class Parameters:
    protocol: str = "tcp"
    omit: float = 0.0
    duration: float = 10.0
    num_bytes: int = 0
    blocks: int = 0
    parallel: int = 1
    reverse: bool = False
    bidirectional: bool = False
    window: int | None = None
    length: int = TCP.iperf3_length
    rate: float = 0.0
    mss: int | None = None
    nodelay: bool = False
    zerocopy: bool = False
    tos: int = 0
    congestion: str | None = None
    get_server_output: bool = False
    udp_counters_64bit: bool = False
    client_version: str = ""
    server_affinity: int | None = None  # the client's -A n,m
    repeating_payload: bool = False
    fq_rate: float = 0.0  # --fq-rate: bits/s the sender's socket paces itself to
    authtoken: str | None = None  # the client's RSA token (rsa_auth.py), when it sent one
    refused: int | None = None  # an iperf3 error number when an option is unsupported
    refused_option: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def transport(self) -> Transport:
        return transport_of(self.protocol)

    @property
    def direction(self) -> str:
        return "bidir" if self.bidirectional else "reverse" if self.reverse else "forward"

    def stream_count(self) -> int:
        return stream_count(self.parallel, self.direction)

    def client_sends(self, index: int) -> bool:
        """By position (1-based) in the order the client opened them: with --bidir the
        client's sending streams come first."""
        if self.bidirectional:
            return index <= self.parallel
        return not self.reverse

    @property
    def timed_duration(self) -> float | None:
        """The test's length when it is timed; None when it is an amount (-n or -k)."""
        return None if self.num_bytes or self.blocks else self.duration

    def header(self) -> struct.Struct:
        return HEADER_64 if self.udp_counters_64bit else HEADER_32


def parse_parameters(value: dict[str, Any]) -> Parameters:
    """iperf3's parameter JSON: unknown keys ignored, wrong types a ProtocolError."""
    def number(key: str, default: float, low: float, high: float) -> float:
        item = value.get(key, default)
        if item is None:
            return default
        if isinstance(item, bool) or not isinstance(item, int | float) or item != item:
            raise ProtocolError(f"parameter '{key}' is not a number")
        if not low <= item <= high:
            raise ProtocolError(f"parameter '{key}' is out of range")
        return float(item)

    def integer(key: str, default: int, low: int, high: int) -> int:
        item = value.get(key, default)
        if item is not None and not isinstance(item, int):
            raise ProtocolError(f"parameter '{key}' is not an integer")
        return int(number(key, default, low, high))

    def flag(key: str) -> bool:
        item = value.get(key, False)
        if isinstance(item, bool):
            return item
        if isinstance(item, int) and item in (0, 1):
            return bool(item)
        raise ProtocolError(f"parameter '{key}' is not a flag")

    transport = UDP if value.get("udp") else TCP
    sctp = not value.get("udp") and not value.get("tcp") and "sctp" in value
    congestion = value.get("congestion")
    if congestion is not None and not is_congestion_name(congestion):
        raise ProtocolError("parameter 'congestion' is not a name")
    version = value.get("client_version", "")
    refused, option = None, ""
    for key, code in UNSUPPORTED.items():
        if value.get(key):
            refused, option = code, key
            break
    if sctp:
        refused, option = IENOSCTP, "sctp"
    window = integer("window", 0, 0, 2**31 - 1)
    mss = integer("MSS", 0, 0, 65535)
    length = integer("len", 0, 0, MAX_LENGTH)
    return Parameters(
        protocol="sctp" if sctp else transport.name,
        omit=number("omit", 0, 0, MAX_OMIT),
        duration=number("time", 10, 0, MAX_TEST_SECONDS),
        num_bytes=integer("num", 0, 0, 2**62),
        blocks=integer("blockcount", 0, 0, 2**62),
        parallel=integer("parallel", 1, 1, MAX_PARALLEL),
        reverse=flag("reverse"), bidirectional=flag("bidirectional"),
        window=window or None,
        length=length or transport.iperf3_length,
        rate=number("bandwidth", transport.iperf3_rate, 0, MAX_RATE),
        mss=mss or None, nodelay=flag("nodelay"), congestion=congestion,
        zerocopy=flag("zerocopy"), tos=integer("TOS", 0, 0, 255),
        get_server_output=flag("get_server_output"),
        udp_counters_64bit=flag("udp_counters_64bit"),
        client_version=version[:40] if isinstance(version, str) else "",
        server_affinity=(None if value.get("server_affinity", -1) == -1
                         else integer("server_affinity", 0, 0, MAX_CPU)),
        repeating_payload=flag("repeating_payload"),
        fq_rate=number("fqrate", 0, 0, MAX_RATE),
        authtoken=token if isinstance(token := value.get("authtoken"), str) else None,
        refused=refused, refused_option=option)


def spec_from_parameters(params: Parameters) -> TestSpec:
    """iperf3's parameters as our test description, as a server runs it: senders go until
    the client's TEST_END (or, with -n or -k, until their share of the amount is sent)."""
    amount = params.num_bytes or params.blocks * params.length
    senders = params.parallel
    share = -(-amount // senders) if amount else None
    return TestSpec(protocol=params.protocol, direction=params.direction,
                    parallel=params.parallel, duration=None, num_bytes=share,
                    length=params.length, rate=params.rate, window=params.window,
                    congestion=params.congestion, nodelay=params.nodelay, omit=params.omit,
                    zerocopy=params.zerocopy, tos=params.tos,
                    repeating_payload=params.repeating_payload, fq_rate=params.fq_rate)


def parameters_message(spec: TestSpec, client_version: str) -> dict[str, Any]:
    """iperf3's parameter JSON for our test description (what an iperf3 client sends)."""
    value: dict[str, Any] = {spec.protocol: True, "omit": spec.omit,
                             "time": 0 if spec.duration is None else spec.duration,
                             "num": spec.num_bytes or 0, "blockcount": 0,
                             "parallel": spec.parallel, "len": spec.length,
                             "pacing_timer": 1000, "client_version": client_version}
    if spec.direction == "reverse":
        value["reverse"] = True
    if spec.direction == "bidir":
        value["bidirectional"] = True
    if spec.window:
        value["window"] = spec.window
    if spec.rate:
        value["bandwidth"] = int(spec.rate)
    if spec.mss:
        value["MSS"] = spec.mss
    if spec.nodelay:
        value["nodelay"] = True
    if spec.zerocopy:
        value["zerocopy"] = True
    if spec.tos:
        value["TOS"] = spec.tos
    if spec.congestion:
        value["congestion"] = spec.congestion
    if spec.affinity is not None:
        value["server_affinity"] = spec.affinity
    if spec.repeating_payload:
        value["repeating_payload"] = 1
    if spec.fq_rate:
        value["fqrate"] = int(spec.fq_rate)
    if spec.transport.datagrams:
        value["udp_counters_64bit"] = 1  # our header has 64-bit packet numbers
    return value


def stream_ids(count: int) -> list[int]:
    """iperf3 numbers streams 1, 3, 4, 5, ...: 2 is skipped."""
    return [1] + list(range(3, count + 2)) if count else []


def results_message(entries: list[dict[str, Any]], ids: list[int], cpu: tuple[float, float],
                    sender_has_retransmits: int) -> dict[str, Any]:
    """iperf3's results JSON from our per-stream result entries (Measurement.local_results),
    stream ids as iperf3 numbers them, and (user, system) CPU percent."""
    user, system = cpu
    streams = [{"id": stream_id, "bytes": entry["bytes"],
                "retransmits": entry.get("retransmits", -1) if entry["sender"] else -1,
                "jitter": entry.get("jitter_ms", 0.0) / 1000, "errors": entry.get("lost", 0),
                "omitted_errors": 0, "packets": entry.get("packets", 0), "omitted_packets": 0,
                "start_time": 0, "end_time": entry["seconds"]}
               for entry, stream_id in zip(entries, ids, strict=True)]
    return {"cpu_util_total": user + system, "cpu_util_user": user, "cpu_util_system": system,
            "sender_has_retransmits": sender_has_retransmits, "streams": streams}


RESULT_NUMBERS = ("bytes", "retransmits", "jitter", "errors", "omitted_errors", "packets",
                  "omitted_packets", "start_time", "end_time")


def result_view(view: dict[str, Any], number: int, transport: Transport, received: bool
                ) -> dict[str, Any]:
    """One stream's result from an iperf3 peer in our measurement's terms; `received`: the
    peer was that stream's receiver (UDP loss and jitter are then its to tell; a sender's
    are TCP retransmits)."""
    entry = {"stream": number, "bytes": int(view.get("bytes", 0)),
             "seconds": float(view.get("end_time", 0.0))}
    if transport.datagrams:
        entry["packets"] = int(view.get("packets", 0))
        if received:
            entry["lost"] = int(view.get("errors", 0))
            entry["jitter_ms"] = float(view.get("jitter", 0.0)) * 1000
    elif "retransmits" in view and not received:
        entry["retransmits"] = int(view["retransmits"])
    return entry


def parse_cpu(value: dict[str, Any]) -> tuple[float, float] | None:
    """The peer's user and system CPU percent from its results (None when it sent none)."""
    numbers = [value.get("cpu_util_user"), value.get("cpu_util_system")]
    if all(isinstance(n, int | float) and not isinstance(n, bool) and 0 <= n < 1e6
           for n in numbers):
        return float(numbers[0]), float(numbers[1])  # type: ignore[arg-type]
    return None


def parse_results(value: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """The peer's per-stream results by stream id. iperf3 3.12 may send -1 as
    18446744073709551615 (an unsigned -1): read as 'not known'."""
    streams = value.get("streams")
    if not isinstance(streams, list) or len(streams) > 256:
        raise ProtocolError("results have no list 'streams'")
    parsed = {}
    for entry in streams:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), int):
            raise ProtocolError("a result has no integer 'id'")
        clean = {}
        for key in RESULT_NUMBERS:
            item = entry.get(key)
            if isinstance(item, bool) or not isinstance(item, int | float) or item != item:
                continue
            if item >= 2**63 or item < 0:
                continue
            clean[key] = item
        parsed[entry["id"]] = clean
    return parsed
