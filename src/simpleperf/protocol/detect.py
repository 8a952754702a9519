"""Which protocol a new TCP connection speaks, judged from its first bytes alone.

- native: the six-byte preface starting with MAGIC;
- iperf2: its client header, whose first word of flags no other client starts with (an
  iperf3 cookie's characters and a classic client's zeros have neither of its top bits),
  its bounceback message (00 80 00 00, where a classic client sends zeros), or a stream
  without a header (iperf 2.0's, 2.1's -C): iperf2's digits "0123456789" from the start;
- iperf3: a 36-character cookie from iperf3's alphabet, then a NUL;
- tls: a TLS record's first bytes (16 03 0x): HTTPS, a responsiveness client's;
- http1: an HTTP/1.1 request line's start (GET /, HEAD /, POST /, ...);
- h2c: HTTP/2's client preface without TLS (PRI * HTTP/2.0);
- classic: anything else (a classic client starts straight away with payload, zeros).

`detect` answers None while the bytes so far could still be more than one of them; the
caller reads more, or after a short wait treats the connection as classic (a classic
client that paused mid-prefix is still a classic client, and its bytes are payload).
"""

from __future__ import annotations

from typing import Literal

from .iperf2 import could_be_tcp_header, is_bare_stream, is_bounceback
from .iperf3 import COOKIE_ALPHABET
from .iperf3 import COOKIE_SIZE as IPERF3_COOKIE_SIZE
from .native import MAGIC, PREFACE_SIZE

NATIVE, IPERF2, IPERF3, CLASSIC = "native", "iperf2", "iperf3", "classic"
TLS, HTTP1, H2C = "tls", "http1", "h2c"
KINDS = (NATIVE, IPERF2, IPERF3, CLASSIC, TLS, HTTP1, H2C)  # what detect() may say
# the starts of what HTTP clients send first, and what each is
_HTTP_STARTS = ((b"PRI * HTTP/2.0", H2C), *((method + b" /", HTTP1) for method in (
    b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"OPTIONS", b"PATCH")))
IPERF3_ALPHABET = frozenset(COOKIE_ALPHABET.encode())
NEEDED = max(PREFACE_SIZE, IPERF3_COOKIE_SIZE)


def detect(prefix: bytes) -> str | None:
    if not prefix:
        return None
    if prefix[:4] == MAGIC[:len(prefix)]:
        return NATIVE if len(prefix) >= len(MAGIC) else None
    http = _http(prefix)
    if http is not False:
        return http
    iperf2 = could_be_tcp_header(prefix)
    if iperf2 is False:
        iperf2 = is_bounceback(prefix)  # 00 80 00 00: a classic client sends only zeros
    if iperf2 is False:
        iperf2 = is_bare_stream(prefix)
    if iperf2 is not False:
        return IPERF2 if iperf2 else None
    head = prefix[:IPERF3_COOKIE_SIZE - 1]
    if all(byte in IPERF3_ALPHABET for byte in head):
        if len(prefix) < IPERF3_COOKIE_SIZE:
            return None
        return IPERF3 if prefix[IPERF3_COOKIE_SIZE - 1] == 0 else CLASSIC
    return CLASSIC


def _http(prefix: bytes) -> str | None | Literal[False]:
    """TLS, HTTP1 or H2C when the prefix is one of theirs; None while it could still
    become one; False when it cannot (none of the others starts so: iperf2's flags, an
    iperf3 cookie's letters and a classic client's zeros)."""
    if prefix[:1] == b"\x16":
        if len(prefix) < 3:
            return None
        return TLS if prefix[1] == 3 and prefix[2] <= 4 else False
    could = False
    for start, kind in _HTTP_STARTS:
        if prefix.startswith(start):
            return kind
        could = could or start.startswith(prefix)
    return None if could else False
