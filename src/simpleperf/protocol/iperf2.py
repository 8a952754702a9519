"""iperf2's protocol (as iperf 2.1.8 speaks it): the client's test header at the start of a
TCP stream or in every UDP datagram, the UDP datagram's sequence number and send time, and
the server's final UDP report. Bytes in, values out; never a socket. The facts and what is
left out: docs/iperf2-compat.md.

All fields are big-endian 32-bit words unless said otherwise (iperf2's payloads.h):

    client header, version 1 (24 bytes): flags, threads, port, buffer length, window,
        amount (negative: hundredths of a second; otherwise bytes)
    extension (36 bytes, flag EXTEND): type, length, upper flags (16 bits), lower flags
        (16), version high, version low, reserved (16), TOS (16), rate low, rate high
        (its top 24 bits), TCP write prefetch
    start and fq-rate (20 bytes, with --trip-times and friends): reserved, start seconds,
        start microseconds, fq rate low, fq rate high

The flags word says how long the header is (LEN_BIT, length << 1 under LEN_MASK). A UDP
datagram begins with its sequence number's low word, its send time (seconds,
microseconds) and the number's high word; the client header follows. A negative number
ends the test: the server answers it with its report (the datagram header, then 28 words).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from ..description.options import MAX_LENGTH, MAX_PARALLEL, MAX_TEST_SECONDS
from ..description.testspec import TestSpec
from ..description.transports import Transport
from ..errors import ProtocolError

# flags (the first word)
VERSION1 = 0x80000000  # -r / -d: the server connects back to the client (dual or tradeoff)
EXTEND = 0x40000000
UDPTESTS = 0x20000000
KEYCHECK = 0x10000000  # --permit-key
SEQNO64B = 0x08000000
VERSION2 = 0x04000000
PEER_DETECT = 0x02000000  # -X: the client waits for the server's header acknowledgement
BOUNCEBACK = 0x00800000
LEN_BIT = 0x00010000
LEN_MASK = 0x000001FE
RUN_NOW = 0x00000001  # with VERSION1: -d (both at once) rather than -r (one after other)
# upper flags (the extension's 16-bit field)
UPPER_ISOCH = 0x0001
UPPER_NO_UDP_FIN = 0x0008
UPPER_TRIP_TIMES = 0x0010
UPPER_UNITS_PPS = 0x0080
UPPER_FQ_RATE_SET = 0x0200
UPPER_REVERSE = 0x0400
UPPER_FULL_DUPLEX = 0x0800
UPPER_EPOCH_START = 0x1000
UPPER_PERIODIC_BURST = 0x2000
UPPER_TCP_QUICKACK = 0x8000  # --tcp-quickack: the receiving server acknowledges at once

CLIENT_V1 = struct.Struct("!iiiiii")
CLIENT_EXTEND = struct.Struct("!iiHHIIHHIII")
START_FQ = struct.Struct("!IIIII")
ISOCH_PAYLOAD_SIZE = 32  # UDP only: frame fields between the extension and START_FQ
# ... in each datagram of an --isochronous test: the burst period (us), the stream's start
# (s, us), the previous frame's number, this frame's, its size in bytes and what was left
# of it when this datagram was sent (this one included), reserved
ISOCH = struct.Struct("!IIIIIIII")
DATAGRAM = struct.Struct("!IIII")  # number low, seconds, microseconds, number high
SERVER_REPORT = struct.Struct("!28i")  # version 1 (10), extension (15), 64-bit counts (3)
MAX_HEADER = LEN_MASK >> 1  # 255: the longest header the length field can state
DEFAULT_PORT = 5001
DEFAULT_UDP_RATE = 1_048_576  # bits/s: iperf2's -u without -b (kDefault_UDPRate)
VERSION = (0x00020001, 0x00080003)  # what we say we speak: 2.1.8 (release)
HUNDREDTHS = 100.0  # the amount field's unit of time: a hundredth of a second
TCP_HEADER_SIZE = CLIENT_V1.size + CLIENT_EXTEND.size  # 60, what a 2.1 client sends
UDP_HEADER_SIZE = DATAGRAM.size + TCP_HEADER_SIZE  # 76
ISOCH_OFFSET = UDP_HEADER_SIZE  # where ISOCH sits in a datagram: after the extension
FRAME_DATAGRAM = ISOCH_OFFSET + ISOCH.size  # the smallest datagram of a frame: 108 bytes
# the first byte of a TCP header: VERSION1 or EXTEND, never UDPTESTS
_TCP_FIRST_BYTE = frozenset(b for b in range(256) if b & 0xC0 and not b & 0x20)

PERMIT_KEY_LENGTH = struct.Struct("!H")  # --permit-key: the header's last 2 bytes, then it
MIN_PERMIT_KEY, MAX_PERMIT_KEY = 4, 128  # characters (payloads.h)


@dataclass(frozen=True)
class ClientHeader:
    """What an iperf2 client tells the server about its test."""

    flags: int = EXTEND
    threads: int = 1
    port: int = DEFAULT_PORT
    buffer_length: int = 0  # 0: the client did not set -l
    window: int = 0
    amount: int = -1000  # negative: hundredths of a second; otherwise bytes
    upper: int = 0
    version: tuple[int, int] = (0, 0)
    tos: int = 0
    rate: int = 0  # bits/s (UDP: the client's -b)
    start: tuple[int, int] = (0, 0)  # seconds, microseconds (with --trip-times)
    bare: bool = False  # no header came (a 2.0 client's UDP test, 2.1's -C): nothing stated

    @property
    def duration(self) -> float | None:
        return -self.amount / HUNDREDTHS if self.amount < 0 and not self.bare else None

    @property
    def num_bytes(self) -> int | None:
        return self.amount if self.amount >= 0 and not self.bare else None

    @property
    def reverse(self) -> bool:
        return bool(self.upper & UPPER_REVERSE)

    @property
    def full_duplex(self) -> bool:
        """--full-duplex: both directions at once on the client's one connection."""
        return bool(self.flags & VERSION2 and self.upper & UPPER_FULL_DUPLEX)

    @property
    def trip_times(self) -> bool:
        return bool(self.upper & UPPER_TRIP_TIMES)

    @property
    def quickack(self) -> bool:
        return bool(self.upper & UPPER_TCP_QUICKACK)

    @property
    def isochronous(self) -> bool:
        """--isochronous: frames (bursts) at a frame rate; over UDP each datagram says its
        frame (ISOCH)."""
        return bool(self.upper & UPPER_ISOCH)

    @property
    def no_udp_fin(self) -> bool:
        return bool(self.upper & UPPER_NO_UDP_FIN)

    @property
    def peer_version(self) -> str:
        """"2.1.8" and the like (empty when the client did not say)."""
        high, low = self.version
        if not high:
            return ""
        return f"{high >> 16}.{high & 0xFFFF}.{low >> 16}"

    @property
    def connects_back(self) -> str | None:
        """-r ("tradeoff": after the client's test, the server's to the client's port) or
        -d ("dual": both at once), iperf2's version 1 tests; None for neither."""
        if not self.flags & VERSION1 or self.flags & VERSION2:
            return None
        return "dual" if self.flags & RUN_NOW else "tradeoff"


def frame_of(data: Any, offset: int) -> tuple[int, int, int] | None:
    """An --isochronous datagram's frame: (its number, its size in bytes, where in it this
    datagram begins); None for one without (the first, which carries only the header)."""
    if len(data) - offset < ISOCH_OFFSET + ISOCH.size:
        return None
    _, _, _, _, frame, size, remaining, _ = ISOCH.unpack_from(data, offset + ISOCH_OFFSET)
    if frame == 0 or not 0 < remaining <= size:
        return None
    return frame, size, size - remaining


def stamp_frame(buffer: Any, period: float, start: float, previous: int, frame: int,
                size: int, remaining: int) -> None:
    """An --isochronous datagram's frame fields, as 2.1.8's client writes them: the frame
    period, the first frame's time, the previous frame's number and this one's, the frame's
    size and what is left of it with this datagram."""
    ISOCH.pack_into(buffer, ISOCH_OFFSET, round(period * 1e6), *_seconds_micros(start),
                    previous & 0xFFFFFFFF, frame & 0xFFFFFFFF, size, remaining, 0)


def frame_parts(size: int, length: int) -> tuple[int, list[int]]:
    """An --isochronous frame of `size` bytes as datagrams of at most `length` (at least
    FRAME_DATAGRAM): the frame's size (grown to what its datagrams must hold) and theirs.
    Each holds the frame fields, so a last part too small takes bytes from the one before
    or, where that one cannot spare them, the frame grows, as 2.1.8's does."""
    size = max(size, FRAME_DATAGRAM)
    parts = [length] * (size // length)
    rest = size - sum(parts)
    if rest and (rest >= FRAME_DATAGRAM or not parts):
        parts.append(rest)
    elif rest and parts[-1] - (FRAME_DATAGRAM - rest) >= FRAME_DATAGRAM:
        parts[-1] -= FRAME_DATAGRAM - rest
        parts.append(FRAME_DATAGRAM)
    elif rest:
        parts.append(FRAME_DATAGRAM)
        size += FRAME_DATAGRAM - rest
    return size, parts


# TCP --trip-times: every write (a "burst" of -l bytes) opens with iperf2's TCP_burst_payload;
# of it we read the write's time (seconds, microseconds at bytes 20-27) and the burst's
# size (bytes 48-51). The words between are the header's, left in the client's buffer.
BURST_HEAD = struct.Struct("!20xII20xI")  # 52 bytes: write time, size
MIN_BURST = 56  # the smallest burst we write: its fields, the end's included
MAX_BURST = 1 << 26  # bytes of a burst we follow (more: the stream is no longer timed)


def reverse_head(header: ClientHeader) -> bytes:
    """-R --trip-times: what 2.1.8's server writes first, and under each burst's own
    fields: the client's header, without VERSION2."""
    head = bytearray(encode_header(header, udp=False))
    struct.pack_into("!i", head, 0, _signed(int.from_bytes(head[:4], "big") & ~VERSION2))
    return bytes(head)


def stamp_burst(buffer: Any, start: float, now: float, number: int, size: int,
                before: int, period: float = 0.0) -> None:
    """Our burst's head, as 2.1.8 writes one over its copy of the header (its client's
    --trip-times, and its server's -R): the test's start, the write's time, the burst's
    number, size and end (`before`: the bursts' bytes before it; 2.1.8 counts from 2);
    with --isochronous the frame period too."""
    struct.pack_into("!IIII", buffer, 12, *_seconds_micros(start), *_seconds_micros(now))
    if period:
        struct.pack_into("!I", buffer, 40, round(period * 1e6))
    struct.pack_into("!III", buffer, 44, number & 0xFFFFFFFF, size,
                     (before + size + 2) & 0xFFFFFFFF)


def _seconds_micros(moment: float) -> tuple[int, int]:
    seconds = int(moment)
    return seconds, int((moment - seconds) * 1e6)


class BurstTimes:
    """The write-to-read delay of each burst of an iperf2 TCP --trip-times stream: its
    write time (the client's clock) to when its last byte was read (ours). Bytes in,
    delays out; `broken` once a burst's head states what cannot be (no more delays)."""

    def __init__(self) -> None:
        self.left = 0  # bytes of the current burst still to come; 0: its head is next
        self.head = bytearray()
        self.sent = 0.0
        self.broken = False

    def feed(self, data: Any, now: float) -> list[float]:
        """`data` read at wall time `now`: the delays of the bursts it completed."""
        delays: list[float] = []
        view = memoryview(data)
        at, end = 0, len(view)
        while at < end and not self.broken:
            if self.left == 0:
                take = view[at:at + BURST_HEAD.size - len(self.head)]
                self.head += take
                at += len(take)
                if len(self.head) < BURST_HEAD.size:
                    break
                seconds, micros, size = BURST_HEAD.unpack(self.head)
                self.head.clear()
                if not BURST_HEAD.size <= size <= MAX_BURST or micros >= 1_000_000:
                    self.broken = True
                    break
                self.sent, self.left = seconds + micros / 1e6, size - BURST_HEAD.size
            else:
                take_count = min(self.left, end - at)
                at += take_count
                self.left -= take_count
            if self.left == 0 and not self.head:
                delays.append(now - self.sent)
        return delays


def tcp_header_length(flags: int) -> int:
    """How many bytes the TCP header stated by `flags` takes (0: no header, a 2.0 client's
    plain stream), as iperf2's Settings_ClientTestHdrLen reads it."""
    if not flags & (VERSION1 | VERSION2 | EXTEND):
        return 0
    if flags & LEN_BIT:
        length = (flags & LEN_MASK) >> 1
        if length < CLIENT_V1.size:
            raise ProtocolError(f"an iperf2 header of {length} bytes is too short")
        return length
    return (CLIENT_V1.size if flags & (VERSION1 | EXTEND) else 0) + (
        CLIENT_EXTEND.size if flags & (VERSION2 | EXTEND) else 0)


def could_be_tcp_header(prefix: bytes) -> bool | None:
    """Whether a TCP stream's first bytes are an iperf2 client's header: None while fewer
    than four bytes could still be one."""
    if not prefix or prefix[0] not in _TCP_FIRST_BYTE:
        return False
    if len(prefix) < 4:
        return None
    flags: int = struct.unpack_from("!I", prefix)[0]
    if not flags & LEN_BIT:  # a 2.0 client's -r/-d header: version 1 alone
        return flags in (VERSION1, VERSION1 | RUN_NOW)
    return CLIENT_V1.size <= (flags & LEN_MASK) >> 1


def parse_header(data: bytes | memoryview, offset: int = 0) -> ClientHeader:
    """The client header at `offset` (0 in a TCP stream, DATAGRAM.size in a datagram); a
    ProtocolError when it is short or states what cannot be."""
    if len(data) - offset < CLIENT_V1.size:
        raise ProtocolError("an iperf2 header shorter than its first 24 bytes")
    flags, threads, port, buffer_length, window, amount = CLIENT_V1.unpack_from(data, offset)
    flags &= 0xFFFFFFFF
    upper, version, tos, rate, start = 0, (0, 0), 0, 0, (0, 0)
    stated = tcp_header_length(flags) if flags & LEN_BIT else 0
    if flags & EXTEND and len(data) - offset >= TCP_HEADER_SIZE:
        (_, _, upper, _, high, low, _, tos, rate_low, rate_high,
         _) = CLIENT_EXTEND.unpack_from(data, offset + CLIENT_V1.size)
        version, tos = (high, low), tos & 0xFF
        rate = rate_low | ((rate_high >> 8) << 32)
        at = offset + TCP_HEADER_SIZE + (ISOCH_PAYLOAD_SIZE if offset else 0)
        if upper & (UPPER_TRIP_TIMES | UPPER_EPOCH_START) and len(data) >= at + START_FQ.size:
            start = START_FQ.unpack_from(data, at)[1:3]
    if not 1 <= threads <= MAX_PARALLEL:
        raise ProtocolError(f"an iperf2 header asks for {threads} threads (at most "
                            f"{MAX_PARALLEL})")
    if not 0 <= buffer_length <= MAX_LENGTH:
        raise ProtocolError(f"an iperf2 header states a buffer of {buffer_length} bytes")
    if amount < 0 and -amount / HUNDREDTHS > MAX_TEST_SECONDS:
        raise ProtocolError(f"an iperf2 header asks for {-amount / HUNDREDTHS:g} s")
    if stated > MAX_HEADER:
        raise ProtocolError(f"an iperf2 header of {stated} bytes is too long")
    return ClientHeader(flags=flags, threads=threads, port=port & 0xFFFF,
                        buffer_length=buffer_length, window=max(window, 0), amount=amount,
                        upper=upper, version=version, tos=tos, rate=rate, start=start)


def permit_key_length(raw: bytes) -> int | None:
    """A TCP header's --permit-key: how many bytes of key follow it (None: no key). The
    stated length holds the key's 2-byte length, not the key."""
    flags = struct.unpack_from("!I", raw)[0]
    if not flags & KEYCHECK:
        return None
    length: int = PERMIT_KEY_LENGTH.unpack_from(raw, len(raw) - PERMIT_KEY_LENGTH.size)[0]
    if not MIN_PERMIT_KEY <= length <= MAX_PERMIT_KEY:
        raise ProtocolError(f"an iperf2 permit key of {length} characters")
    return length


def with_permit_key(first: bytes, key: str) -> bytes:
    """A TCP header (encode_header's) with --permit-key's key after it, as 2.1.8 writes it."""
    flags = struct.unpack_from("!I", first)[0]
    stated = len(first) + PERMIT_KEY_LENGTH.size
    flags = (flags & ~LEN_MASK) | KEYCHECK | ((stated << 1) & LEN_MASK)
    data = key.encode()
    return (struct.pack("!I", flags) + first[4:] + PERMIT_KEY_LENGTH.pack(len(data)) + data)


def encode_header(header: ClientHeader, udp: bool) -> bytes:
    """The header as an iperf 2.1.8 client writes it (TCP: the stream's first bytes; UDP:
    what follows every datagram's DATAGRAM header), its length in the flags."""
    start = header.upper & (UPPER_TRIP_TIMES | UPPER_EPOCH_START | (UPPER_ISOCH if udp else 0))
    # the length 2.1.8 states: over UDP the frame fields but not the start that follows
    length = TCP_HEADER_SIZE + ((DATAGRAM.size + (ISOCH_PAYLOAD_SIZE if start else 0)) if udp
                                else START_FQ.size if start else 0)
    flags = header.flags | EXTEND | LEN_BIT | ((length << 1) & 0xFFFE)
    if header.upper & (UPPER_REVERSE | UPPER_FULL_DUPLEX):
        flags |= VERSION2 | (UDPTESTS if udp else 0)  # a 2.1 server's sign to send back
    if udp:
        flags |= SEQNO64B | (UDPTESTS if start else 0)
    body = CLIENT_V1.pack(_signed(flags), header.threads, header.port, header.buffer_length,
                          header.window, header.amount)
    body += CLIENT_EXTEND.pack(0, 0, header.upper, 0, header.version[0], header.version[1],
                               0, header.tos, header.rate & 0xFFFFFFFF,
                               ((header.rate >> 32) & 0xFFFFFF) << 8, 0)
    if start:
        body += (bytes(ISOCH_PAYLOAD_SIZE) if udp else b"") + START_FQ.pack(
            0, header.start[0], header.start[1], 0, 0)
    return body


def header_from_spec(spec: TestSpec, port: int, start: tuple[int, int],
                     length_given: bool = True, back: str | None = None,
                     peer_detect: bool = False, no_udp_fin: bool = False) -> ClientHeader:
    """What our client tells an iperf2 server of a test (one stream's header: iperf2 runs
    -P as that many independent connections, each stating the thread count). The buffer
    length only when -l gave it, as iperf2's client does: a 2.1.8 server sending -R with a
    stated length past its own buffer crashes. `back`: -d ("dual") or -r ("tradeoff"),
    the server connecting back to `port`. A bidir spec is --full-duplex: both ways on
    each connection (over UDP without the final exchange, as 2.1.8 sets it).
    `peer_detect`: -X, the server to acknowledge with its version; `no_udp_fin`: UDP
    without the final exchange."""
    full_duplex = spec.direction == "bidir" and not back
    upper = (UPPER_REVERSE if spec.direction == "reverse" else 0) | (
        UPPER_FULL_DUPLEX if full_duplex else 0) | (
        UPPER_NO_UDP_FIN if (full_duplex or no_udp_fin) and spec.transport.datagrams else 0) | (
        UPPER_TRIP_TIMES if spec.trip_times else 0) | (
        # as 2.1.8's: where the server receives (a reverse test's receiver is ours)
        UPPER_TCP_QUICKACK if spec.quickack and spec.direction != "reverse" and
        not spec.transport.datagrams else 0) | (
        UPPER_ISOCH if spec.isochronous else 0)  # (2.1.8 never sets BW_SET: its rate says)
    amount = -round(spec.duration * HUNDREDTHS) if spec.duration is not None else \
        min(spec.num_bytes or 0, 0x7FFFFFFF)
    flags = EXTEND | ((VERSION1 | (RUN_NOW if back == "dual" else 0)) if back else 0) | (
        PEER_DETECT | VERSION2 if peer_detect else 0) | (  # -X, as 2.1.8's client sets it
        VERSION2 if full_duplex else 0)
    return ClientHeader(flags=flags, threads=spec.parallel, port=port,
                        buffer_length=spec.length if length_given else 0,
                        window=spec.window or 0, amount=amount,
                        upper=upper, version=VERSION, tos=spec.tos,
                        # -b: a sending server's rate, as 2.1.8's client states it (of our
                        # own TCP sending not: a receiving server needs none)
                        rate=int(spec.rate) if spec.transport.datagrams or
                        spec.direction != "forward" else 0, start=start)


def spec_from_header(header: ClientHeader, transport: Transport, length: int) -> TestSpec:
    """The test an iperf2 client asked for, as our server runs it (`length`: what we read
    or write at a time)."""
    direction = "reverse" if header.reverse else (
        "bidir" if header.connects_back == "dual" or header.full_duplex else "forward")
    return TestSpec(protocol=transport.name, direction=direction,
                    parallel=1, duration=header.duration, num_bytes=header.num_bytes,
                    length=length,
                    rate=float(header.rate) if header.reverse or header.connects_back or
                    header.full_duplex else 0.0,
                    window=header.window or None, tos=header.tos,
                    # TCP: the client's bursts are timed, and ours timed as iperf2's
                    trip_times=header.trip_times and (transport.datagrams or direction in (
                        "forward", "reverse")),
                    quickack=header.quickack and not transport.datagrams,
                    repeating_payload=True)


# Bounceback (--bounceback): round trips of one message size ---------------------------

# flags, size, id, message flags (16), TOS (16), run time, the client's send time, the
# server's read and write times (seconds, microseconds each), hold (us), rtt, read time
BOUNCE = struct.Struct("!IIIHHIIIIIIIIIII")
BOUNCE_MIN = 4 + BOUNCE.size  # 64: the smallest message 2.1.8's server takes
BOUNCE_MAX = 1 << 20  # bytes of a message we bounce
BOUNCE_HOLD_MAX = 10_000_000  # microseconds a message may ask the server to hold it
BB_QUICKACK = 0x8000  # both ends acknowledge at once (TCP_QUICKACK): 2.1.8's default
BB_STOP = 0x1000  # the client's last message: no answer
BB_CLOCK_SYNCED = 0x4000
BB_TOS = 0x2000
_BB_SERVER_READ = 28  # byte offsets of the server's read and write times
_BB_SERVER_WROTE = 36
# For the compiled loops (_fastpath.c): where a message holds the stop flag (its byte and
# mask), the server's two times (side by side), the client's number and send time
BB_STOP_BYTE, BB_STOP_MASK = 12, BB_STOP >> 8
BB_SERVER_TIMES = _BB_SERVER_READ
BB_NUMBER, BB_SENT = 8, 20
DEFAULT_BOUNCE_SIZE = 100  # iperf2's -l for --bounceback


@dataclass(frozen=True)
class Bounce:
    """A bounceback message's header."""

    size: int
    number: int
    flags: int  # BB_*
    tos: int
    hold: int  # microseconds the server waits before answering
    sent: float  # the client's send time (Unix seconds)


def is_bounceback(prefix: bytes) -> bool | None:
    """Whether a TCP stream opens with a bounceback message (None: too few bytes yet)."""
    word = BOUNCEBACK.to_bytes(4, "big")
    if prefix[:4] != word[:len(prefix)]:
        return False
    return True if len(prefix) >= 4 else None


def parse_bounce(data: bytes | bytearray | memoryview) -> Bounce:
    if len(data) < BOUNCE.size:
        raise ProtocolError("a bounceback message shorter than its 60-byte header")
    flags, size, number, bbflags, tos, _, sec, usec, *_, hold, _, _, _ = \
        BOUNCE.unpack_from(data)
    if flags != BOUNCEBACK:
        raise ProtocolError("not a bounceback message")
    if not BOUNCE_MIN <= size <= BOUNCE_MAX:
        raise ProtocolError(f"a bounceback message of {size} bytes (from {BOUNCE_MIN} to "
                            f"{BOUNCE_MAX})")
    if hold > BOUNCE_HOLD_MAX:
        raise ProtocolError(f"a bounceback hold of {hold / 1000:g} ms")
    return Bounce(size, number, bbflags, tos, hold, sec + usec / 1e6)


def encode_bounce(bounce: Bounce) -> bytearray:
    """A client's message, `size` bytes: the header, then iperf2's filler."""
    sec, usec = _timeval(bounce.sent)
    message = bytearray(b"\x5a" * bounce.size)
    BOUNCE.pack_into(message, 0, BOUNCEBACK, bounce.size, bounce.number, bounce.flags,
                     bounce.tos, 0, sec, usec, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF,
                     0xFFFFFFFF, bounce.hold, 0, 0, 0)
    return message


_BB_TIMES = struct.Struct("!IIII")  # the server's read and write times, side by side
_BB_SENT = struct.Struct("!II")  # at 20: the client's send time


def stamp_bounce(message: bytearray, read_at: float, wrote_at: float) -> None:
    """The server's read and write times, into the message it sends back."""
    read_whole, wrote_whole = int(read_at), int(wrote_at)
    _BB_TIMES.pack_into(message, _BB_SERVER_READ, read_whole & 0xFFFFFFFF,
                        int((read_at - read_whole) * 1e6), wrote_whole & 0xFFFFFFFF,
                        int((wrote_at - wrote_whole) * 1e6))


def renumber_bounce(message: bytearray, number: int, sent: float) -> None:
    """A client's next message in the same buffer: its number and send time."""
    struct.pack_into("!I", message, BB_NUMBER, number & 0xFFFFFFFF)
    whole = int(sent)
    _BB_SENT.pack_into(message, BB_SENT, whole & 0xFFFFFFFF, int((sent - whole) * 1e6))


def bounce_stops(message: bytes | bytearray) -> bool:
    """The client's last message (no answer)."""
    return bool(message[BB_STOP_BYTE] & BB_STOP_MASK)


def bounce_server_times(message: bytes | bytearray | memoryview) -> tuple[float, float]:
    """The server's read and write times (Unix seconds) from a message it sent back."""
    rs, ru = struct.unpack_from("!II", message, _BB_SERVER_READ)
    ws, wu = struct.unpack_from("!II", message, _BB_SERVER_WROTE)
    return rs + ru / 1e6, ws + wu / 1e6


# The server's acknowledgement of a TCP header --------------------------------------------

CLIENT_HDR_ACK = 2  # payloads.h: MsgType CLIENTHDRACK
ACK = struct.Struct("!iiIIIII")  # type, length, flags, version high and low, reserved x2
ACK_TIMES = struct.Struct("!IIIIII")  # header sent, header read, ack sent: s and us each


def wants_ack(header: ClientHeader) -> bool:
    """Whether a 2.1.8 server acknowledges this TCP header (Listener.cpp): a 2.1 client's
    (EXTEND) unless it asks the server to send (VERSION2), and any asking for the peer's
    version (-X). Clients that do not ask leave it unread."""
    return bool(header.flags & EXTEND and not header.flags & VERSION2
                or header.flags & PEER_DETECT)


def encode_ack(header: ClientHeader, read_at: float, now: float) -> bytes:
    """Our version, and with --trip-times the three times the client's clock check uses."""
    times = b""
    if header.trip_times:
        times = ACK_TIMES.pack(header.start[0], header.start[1], *_timeval(read_at),
                               *_timeval(now))
    return ACK.pack(CLIENT_HDR_ACK, ACK.size + len(times), 0, *VERSION, 0, 0) + times


def parse_ack(data: bytes) -> str:
    """The server's version from its acknowledgement ("2.1.8")."""
    if len(data) < ACK.size:
        raise ProtocolError("an iperf2 acknowledgement shorter than 28 bytes")
    kind, _, _, high, low, _, _ = ACK.unpack_from(data)
    if kind != CLIENT_HDR_ACK:
        raise ProtocolError("not an iperf2 server's acknowledgement")
    return ClientHeader(version=(high, low)).peer_version


def _timeval(when: float) -> tuple[int, int]:
    whole = int(when)
    return whole & 0xFFFFFFFF, int((when - whole) * 1e6)


# UDP datagrams -----------------------------------------------------------------------

class DatagramLayout(struct.Struct):
    """iperf2's datagram header where the engine packs and unpacks (seconds, microseconds,
    number): the number's low word first and its high word last."""

    def __init__(self) -> None:
        super().__init__(DATAGRAM.format)

    def pack_into(self, buffer: Any, offset: int, *values: Any) -> None:
        seconds, micros, number = values
        super().pack_into(buffer, offset, number & 0xFFFFFFFF, seconds, micros,
                          (number >> 32) & 0xFFFFFFFF)

    def unpack_from(self, buffer: Any, offset: int = 0) -> tuple[Any, ...]:
        low, seconds, micros, high = super().unpack_from(buffer, offset)
        return seconds, micros, (high << 32) | low


LAYOUT = DatagramLayout()


def could_be_datagram(data: bytes) -> bool:
    """Whether a datagram at the server's port is an iperf 2.1 client's (a 2.0 client's
    carries no header unless -r or -d, and is not told apart from noise)."""
    if len(data) < UDP_HEADER_SIZE:
        return False
    flags: int = struct.unpack_from("!I", data, DATAGRAM.size)[0]
    return bool(flags & EXTEND and flags & LEN_BIT and not flags & BOUNCEBACK)


# iperf2's payload: the digits 0-9 over and over from a buffer's first byte (the header's
# fields written over the start)
_PATTERN = bytes(0x30 + i % 10 for i in range(64))
BARE_CLOCK_SECONDS = 86_400  # a bare datagram's send time is within this of ours
BARE_STREAM_DIGITS = 10  # a TCP stream that opens with these many of iperf2's digits


def is_bare_stream(prefix: bytes) -> bool | None:
    """Whether a TCP stream opens as one without a header (iperf 2.0's client without -r
    or -d, 2.1's with -C): iperf2's digits from its first byte, where a classic client
    sends zeros and an iperf3 cookie has no 0 or 1; None: too few bytes yet."""
    count = min(len(prefix), BARE_STREAM_DIGITS)
    if prefix[:count] != _PATTERN[:count]:
        return False
    return True if count == BARE_STREAM_DIGITS else None


def bare_header(data: bytes, now: float) -> ClientHeader | None:
    """A datagram of a UDP test without a header (iperf 2.0's client without -r or -d,
    2.1's with -C): a positive number, a send time within a day of `now` and iperf2's
    digits after its first 16 bytes, where nothing else is. Its numbers are 64-bit when
    bytes 12-15 are a high word rather than the digits (2.0.10 on). None: not one."""
    if len(data) < 32:
        return None
    number, seconds = struct.unpack_from("!iI", data)
    end = min(len(data), len(_PATTERN))
    if number <= 0 or abs(seconds - now) > BARE_CLOCK_SECONDS or \
            data[16:end] != _PATTERN[16:end]:
        return None
    wide = data[12:16] != _PATTERN[12:16]
    return ClientHeader(flags=SEQNO64B if wide else 0, bare=True)


def sequence(data: bytes | memoryview, offset: int, wide: bool) -> tuple[int, float]:
    """A datagram's number (negative: the client's last) and its send time in seconds."""
    low, seconds, micros, high = DATAGRAM.unpack_from(data, offset)
    number = (high << 32) | low if wide else low
    bits = 64 if wide else 32
    if number >> (bits - 1):
        number -= 1 << bits
    return number, seconds + micros * 1e-6


def datagram_header(number: int, sent: float) -> bytes:
    """The first 16 bytes of a datagram we send (negative `number`: our last)."""
    wide = number & 0xFFFFFFFFFFFFFFFF
    seconds = int(sent)
    return DATAGRAM.pack(wide & 0xFFFFFFFF, seconds & 0xFFFFFFFF,
                         int((sent - seconds) * 1e6), wide >> 32)


@dataclass(frozen=True)
class ServerReport:
    """What an iperf2 server tells a UDP client at the end: what it received."""

    num_bytes: int
    seconds: float  # from the first datagram to the last
    lost: int
    out_of_order: int
    datagrams: int  # the highest number seen: what the client sent
    jitter: float  # seconds
    # --trip-times: one-way delays in seconds (minimum, maximum, sum, mean, sum of squared
    # deviations from the mean, count); None without
    delays: tuple[float, float, float, float, float, int] | None = None


def encode_report(report: ServerReport, echo: bytes) -> bytes:
    """The server's answer to the client's last datagram: `echo` (its 16-byte header),
    then the report with 64-bit counts, as 2.1.8 writes it."""
    seconds = int(report.seconds)
    jitter = int(report.jitter)
    extended = EXTEND if report.delays is not None else 0  # SERVER_HEADER_EXTEND
    words = [VERSION1 | SEQNO64B | extended, report.num_bytes >> 32, report.num_bytes & 0xFFFFFFFF,
             seconds, int((report.seconds - seconds) * 1e6),
             report.lost & 0xFFFFFFFF, report.out_of_order & 0xFFFFFFFF,
             report.datagrams & 0xFFFFFFFF, jitter, int((report.jitter - jitter) * 1e6)]
    if report.delays is None:
        words += [0] * 15
    else:
        minimum, maximum, total, mean, m2, count = report.delays
        for value in (minimum, maximum, total, mean, m2 * 1e12, 0.0):  # m2 in us^2
            whole = int(value)
            words += [whole, int((value - whole) * 1e6)]
        rate = int(report.datagrams / report.seconds) if report.seconds > 0 else 0
        words += [count, rate, 1]  # the delays' count, datagrams a second over one second
    words += [report.lost >> 32, report.out_of_order >> 32, report.datagrams >> 32]
    return echo[:DATAGRAM.size] + SERVER_REPORT.pack(*(_signed(w) for w in words))


def parse_report(data: bytes) -> ServerReport:
    """An iperf2 server's report (after the echoed datagram header)."""
    if len(data) < DATAGRAM.size + 40:
        raise ProtocolError(f"an iperf2 server report of {len(data)} bytes is too short")
    padded = data[DATAGRAM.size:DATAGRAM.size + SERVER_REPORT.size]
    padded += bytes(SERVER_REPORT.size - len(padded))
    w = [v & 0xFFFFFFFF for v in SERVER_REPORT.unpack(padded)]
    wide = bool(w[0] & SEQNO64B)
    delays = None
    if w[0] & EXTEND and len(data) >= DATAGRAM.size + SERVER_REPORT.size - 12:
        v = [_signed(w[i]) + _signed(w[i + 1]) * 1e-6 for i in range(10, 20, 2)]
        delays = (v[0], v[1], v[2], v[3], v[4] * 1e-12, w[22])
    return ServerReport(num_bytes=(w[1] << 32) | w[2], seconds=w[3] + w[4] * 1e-6,
                        lost=w[5] | ((w[25] << 32) if wide else 0),
                        out_of_order=w[6] | ((w[26] << 32) if wide else 0),
                        datagrams=w[7] | ((w[27] << 32) if wide else 0),
                        jitter=w[8] + w[9] * 1e-6, delays=delays)


def _signed(word: int) -> int:
    word &= 0xFFFFFFFF
    return word - (1 << 32) if word >> 31 else word



