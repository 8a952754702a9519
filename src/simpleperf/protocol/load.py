"""Load-generating connections of `simpleperf --rpm` (draft-ietf-ippm-responsiveness), bytes
in and out, never a socket.

A load connection opens with the native preface of kind L, then one request: the run's
16-byte token (every connection of one run carries the same), the connection's direction
(the client sends, or the server does: a --bidir run has both), the run's time limit in
whole seconds, how many connections it may open and the congestion control both ends use
(-C; NUL-padded, empty for the system's own); with a shared secret, a 16-byte tag over
those bytes follows. Then records both ways, each a kind byte and a 4-byte length:

- bulk (B): the load itself, bytes nobody reads;
- probe (P): a self probe, 16 bytes (as an echo probe: number and the sender's clock) and,
  with a secret, its tag; the peer that receives one sends the same record back as soon as
  it can, queued behind whatever that direction already carries (the draft's probe on a
  load-generating connection);
- accepted (O): empty, the server's answer to a request it takes; the client sends nothing
  more until it comes;
- refused (X): the server's one-line reason (to a request, or when it ends the run), after
  which it closes.

No length a peer
states makes the other end buffer more than a probe or a refusal: bulk is counted and
skipped.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import struct
from dataclasses import dataclass

from ..description.options import is_congestion_name
from ..errors import ProtocolError
from .native import ECHO_PROBE, ECHO_TAG_SIZE

TOKEN_SIZE = 16
REQUEST = struct.Struct("!16sBIB16s")  # token, direction, seconds, connections, -C
UPLINK, DOWNLINK = 0, 1  # the client sends; the server sends
RECORD = struct.Struct("!cI")
BULK, PROBE, ACCEPTED, REFUSED = b"B", b"P", b"O", b"X"
MAX_BULK = 1 << 20
MAX_REFUSAL = 1000
MAX_CONNECTIONS = 64  # of one run, whatever the run asks (the draft's MNP is 16)


@dataclass(frozen=True)
class LoadRequest:
    token: bytes
    download: bool
    seconds: int
    connections: int
    congestion: str | None = None


def request(token: bytes, download: bool, seconds: int, connections: int,
            secret: bytes | None, congestion: str | None = None) -> bytes:
    body = REQUEST.pack(token, DOWNLINK if download else UPLINK, seconds, connections,
                        (congestion or "").encode())
    return body + _tag(secret, body) if secret is not None else body


def request_size(secret: bytes | None) -> int:
    return REQUEST.size + (ECHO_TAG_SIZE if secret is not None else 0)


def parse_request(data: bytes, secret: bytes | None) -> LoadRequest:
    """The request at the start of `data` (request_size(secret) bytes); ProtocolError for a
    malformed one or, when the server has a secret, one without its tag."""
    if len(data) < request_size(secret):
        raise ProtocolError("a load connection's request was cut short")
    body = data[:REQUEST.size]
    if secret is not None and not hmac.compare_digest(
            data[REQUEST.size:REQUEST.size + ECHO_TAG_SIZE], _tag(secret, body)):
        raise ProtocolError("a load connection without the shared secret")
    token, direction, seconds, connections, named = REQUEST.unpack(body)
    congestion = named.rstrip(b"\0").decode(errors="replace") or None
    if congestion is not None and not is_congestion_name(congestion):
        raise ProtocolError("a load connection named no congestion control Linux could have")
    if direction not in (UPLINK, DOWNLINK):
        raise ProtocolError(f"a load connection's direction {direction} is neither 0 nor 1")
    if seconds < 1 or not 1 <= connections <= MAX_CONNECTIONS:
        raise ProtocolError(f"a load connection asked {seconds} s and {connections} "
                            f"connections (1 to {MAX_CONNECTIONS})")
    return LoadRequest(token, direction == DOWNLINK, seconds, connections, congestion)


def _tag(secret: bytes, body: bytes) -> bytes:
    return hmac.new(secret, b"load:" + body, hashlib.sha256).digest()[:ECHO_TAG_SIZE]


def record(kind: bytes, payload: bytes) -> bytes:
    return RECORD.pack(kind, len(payload)) + payload


@functools.lru_cache(maxsize=128)
def bulk(size: int) -> bytes:
    """A bulk record of `size` bytes of zeros (the senders use a few sizes over and over)."""
    return RECORD.pack(BULK, size) + bytes(size)

ACCEPT = RECORD.pack(ACCEPTED, 0)


def refusal(reason: str) -> bytes:
    return record(REFUSED, reason.encode()[:MAX_REFUSAL])


class RecordReader:
    """Records out of a byte stream, fed as it arrives: bulk bytes counted and skipped,
    probes, an acceptance and a refusal handed back whole. ProtocolError for a kind or a
    length no peer of ours sends."""

    def __init__(self, probe_sizes: tuple[int, ...] = (ECHO_PROBE.size,
                                                       ECHO_PROBE.size + ECHO_TAG_SIZE)) -> None:
        self.probe_sizes = probe_sizes
        self.bulk_bytes = 0
        self._skip = 0  # bulk bytes still to come of the current record
        self._pending = b""  # a header, probe or refusal still incomplete

    def feed(self, data: bytes) -> list[tuple[bytes, bytes]]:
        """The complete records other than bulk in what came: [(kind, payload)]."""
        found: list[tuple[bytes, bytes]] = []
        view = memoryview(data)
        while view:
            if self._skip:
                taken = min(self._skip, len(view))
                self._skip -= taken
                self.bulk_bytes += taken
                view = view[taken:]
                continue
            need = RECORD.size
            if len(self._pending) >= RECORD.size:
                need += RECORD.unpack_from(self._pending)[1]
            taken = min(need - len(self._pending), len(view))
            self._pending += bytes(view[:taken])
            view = view[taken:]
            if len(self._pending) == RECORD.size:
                kind, length = RECORD.unpack(self._pending)
                if kind == BULK:
                    if length > MAX_BULK:
                        raise ProtocolError(f"a bulk record of {length} bytes (at most "
                                            f"{MAX_BULK})")
                    self._skip, self._pending = length, b""
                    continue
                self._check(kind, length)
            if len(self._pending) >= RECORD.size and len(self._pending) == \
                    RECORD.size + RECORD.unpack_from(self._pending)[1]:
                kind = self._pending[:1]
                found.append((kind, self._pending[RECORD.size:]))
                self._pending = b""
        return found

    def _check(self, kind: bytes, length: int) -> None:
        if kind == PROBE and length in self.probe_sizes:
            return
        if kind == REFUSED and length <= MAX_REFUSAL or kind == ACCEPTED and length == 0:
            return
        raise ProtocolError(f"a load record of kind {kind!r} and {length} bytes")
