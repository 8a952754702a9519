"""The native simpleperf protocol, version 1: bytes in, messages out, never a socket.

Every TCP connection opens with a six-byte preface: MAGIC, a kind byte and the version.

- control (kind C): then length-prefixed JSON messages both ways (4-byte big-endian length,
  then a UTF-8 JSON object with a string "type"): events.py types them, exchange.py orders
  them;
- data (kind D): then the 16-byte test token and a 2-byte stream number, then raw payload;
- echo (kind E): then 16-byte probes that the server sends straight back (RTT tests);
- load (kind L): a load-generating connection of --rpm; see load.py.

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
from dataclasses import fields
from typing import Any

from .. import result_fields
from ..delays import DelayAccount
from ..description.options import (
    AUTH_UDP_LENGTH,
    MAX_PARALLEL,
    MAX_PEER_HISTOGRAM_BINS,
    MIN_UDP_LENGTH,
    is_int,
    is_number,
)
from ..description.testspec import RULES, TestSpec
from ..errors import ProtocolError

MAGIC = b"SPRF"
VERSION = 1
CONTROL, DATA, ECHO, LOAD = b"C", b"D", b"E", b"L"
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
# --l4s over UDP: the receiver tells the sender, at most every L4S_FEEDBACK_SECONDS, how many
# datagrams arrived and how many of them CE-marked (both counted from the test's start), the
# highest number seen, and the send time stamped on the newest (the sender's RTT sample);
# with a shared secret, the test's UDP key follows.
L4S_FEEDBACK = struct.Struct("!4sQQQII")
L4S_FEEDBACK_MAGIC = b"SPCE"
L4S_FEEDBACK_SECONDS = 0.001
# Over UDP at unlimited rate (-b 0): the receiver tells the sender, every
# PACE_FEEDBACK_SECONDS, how many datagrams its own socket has dropped so far (the receiving
# host's loss, never the network's), how many bytes it has read, and its monotonic clock
# then (nanoseconds); with a shared secret, the test's UDP key follows. A sender that
# predates it never reads it.
PACE_FEEDBACK = struct.Struct("!4sQQQ")
PACE_FEEDBACK_MAGIC = b"SPdr"
PACE_FEEDBACK_SECONDS = 0.01
# --trip-times over TCP: every write of the sender opens with its send time (nanoseconds of
# the sender's wall clock), its number from 1, and its length with this header, so that the
# receiver finds each write's end in the byte stream and times it from write to read (the
# application's delay, sender's buffer included); then the number of an earlier write and
# when the kernel sent its last byte (0, 0: none known yet), so that the receiver can also
# time the path alone, from that departure to the read that brought the byte. Older
# simpleperf receivers read the first three fields only.
WRITE_HEADER = struct.Struct("!QIIIQ")
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
    if kind not in (CONTROL, DATA, ECHO, LOAD):
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


def spec_message(spec: TestSpec) -> dict[str, Any]:
    """The test description as the native protocol carries it: every field by its name."""
    return {"type": "test", **{f.name: getattr(spec, f.name) for f in fields(spec)}}


def parse_spec(message: dict[str, Any]) -> TestSpec:
    """The native encoding back, strictly: every field checked against its rule in TestSpec;
    unknown fields are ignored so that later versions can add some."""
    values: dict[str, Any] = {}
    for name, rule in RULES.items():
        if name in message:
            if not rule.allows(message[name]):
                raise ProtocolError(f"test field '{name}' has an invalid value")
            values[name] = message[name]
    spec = TestSpec(**values)
    if (spec.duration is None) == (spec.num_bytes is None):
        raise ProtocolError("a test needs exactly one of 'duration' and 'num_bytes'")
    transport = spec.transport
    if transport.datagrams and spec.length < transport.min_length:
        raise ProtocolError(f"UDP datagrams need at least {transport.min_length} bytes")
    if transport.datagrams and spec.length > transport.max_length:
        raise ProtocolError(f"UDP datagrams hold at most {transport.max_length} bytes")
    if not transport.datagrams and spec.timed and spec.length < WRITE_HEADER.size:
        raise ProtocolError(f"timed TCP writes need at least {WRITE_HEADER.size} bytes")
    if spec.l4s and (not transport.datagrams or spec.isochronous):
        raise ProtocolError("l4s applies to a steady UDP stream")
    if spec.isochronous and transport.datagrams and \
            spec.length < MIN_ISOCHRONOUS_UDP_LENGTH:
        raise ProtocolError("isochronous UDP datagrams need at least "
                            f"{MIN_ISOCHRONOUS_UDP_LENGTH} bytes")
    return spec


# Fields of each per-stream result a peer reports at the end (result_fields.py, the one
# table of them); anything else is ignored.
RESULT_FIELDS = result_fields.checked_fields()
SIGNED_RESULT_FIELDS = result_fields.signed_fields()
DELAY_RESULT_FIELDS = tuple(result_fields.DELAY_FIELDS)


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
