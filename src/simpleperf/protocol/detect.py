"""Which protocol a new TCP connection speaks, judged from its first bytes alone.

- native: the six-byte preface starting with MAGIC;
- iperf2: its client header, whose first word of flags no other client starts with (an
  iperf3 cookie's characters and a classic client's zeros have neither of its top bits),
  its bounceback message (00 80 00 00, where a classic client sends zeros), or a stream
  without a header (iperf 2.0's, 2.1's -C): iperf2's digits "0123456789" from the start;
- iperf3: a 36-character cookie from iperf3's alphabet, then a NUL;
- classic: anything else (a classic client starts straight away with payload, zeros).

`detect` answers None while the bytes so far could still be more than one of them; the
caller reads more, or after a short wait treats the connection as classic (a classic
client that paused mid-prefix is still a classic client, and its bytes are payload).
"""

from __future__ import annotations

from .iperf2 import could_be_tcp_header, is_bare_stream, is_bounceback
from .iperf3 import COOKIE_ALPHABET
from .iperf3 import COOKIE_SIZE as IPERF3_COOKIE_SIZE
from .native import MAGIC, PREFACE_SIZE

NATIVE, IPERF2, IPERF3, CLASSIC = "native", "iperf2", "iperf3", "classic"
IPERF3_ALPHABET = frozenset(COOKIE_ALPHABET.encode())
NEEDED = max(PREFACE_SIZE, IPERF3_COOKIE_SIZE)


def detect(prefix: bytes) -> str | None:
    if not prefix:
        return None
    if prefix[:4] == MAGIC[:len(prefix)]:
        return NATIVE if len(prefix) >= len(MAGIC) else None
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
