"""nfnetlink_queue messages as bytes, and packet ids out of bytes. No sockets here.

Only what the delay line needs: bind a queue (metadata only, or the first HEADER_BYTES of
each packet for a queue whose discipline looks at headers), read the queued packets (id,
arrival stamp, length, first bytes), and give verdicts (one packet, perhaps setting its
mark, or every packet up to an id).
"""

from __future__ import annotations

import struct

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_VERDICT = 1
NFQNL_MSG_CONFIG = 2
NFQNL_MSG_VERDICT_BATCH = 3
NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NFQA_MARK = 3
NFQA_TIMESTAMP = 4
NFQA_PAYLOAD = 10
NFQA_CAP_LEN = 13
NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_QUEUE_MAXLEN = 3
NFQA_CFG_MASK = 4
NFQA_CFG_FLAGS = 5
NFQA_CFG_F_GSO = 1 << 2
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NFQNL_COPY_PACKET = 2
HEADER_BYTES = 64  # an IPv4 header with options and the ports after it
# The mark a verdict gives a packet its discipline marked: the wire's mangle rules set CE
# on it and clear the mark (build.CE_RULES).
CE_MARK = 0x10000
NF_DROP = 0
NF_ACCEPT = 1
NLM_F_REQUEST = 1
NLM_F_ACK = 4
NLMSG_ERROR = 2
NLMSG_DONE = 3

_NLMSGHDR = struct.Struct("=IHHII")
_NFGENMSG = struct.Struct("!BBH")  # family, version, queue number (big-endian)


def _attribute(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


def _message(kind: int, queue: int, attributes: bytes, flags: int, seq: int) -> bytes:
    body = _NFGENMSG.pack(0, 0, queue) + attributes
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind,
                          NLM_F_REQUEST | flags, seq, 0) + body


def bind(queue: int, max_packets: int, headers: bool = False, seq: int = 1) -> list[bytes]:
    """Messages that bind `queue`, size the kernel's queue and set its mode (see `mode`)."""
    return [
        _message(NFQNL_MSG_CONFIG, queue,
                 _attribute(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_BIND, 0)),
                 NLM_F_ACK, seq),
        _message(NFQNL_MSG_CONFIG, queue,
                 _attribute(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", max_packets)),
                 NLM_F_ACK, seq + 1),
        *mode(queue, headers, NLM_F_ACK, seq + 2)]


def mode(queue: int, headers: bool, flags: int = 0, seq: int = 0) -> list[bytes]:
    """Metadata only, GRO/GSO aggregates whole (one entry and one verdict for many packets;
    the rate limiter after the delay splits them again); or, for a queue whose discipline
    reads headers and sizes, each packet's first HEADER_BYTES and every packet on its own
    (the kernel cuts aggregates before queueing them)."""
    copy = (struct.pack("!IB", HEADER_BYTES, NFQNL_COPY_PACKET) if headers
            else struct.pack("!IB", 0, NFQNL_COPY_META))
    return [
        _message(NFQNL_MSG_CONFIG, queue, _attribute(NFQA_CFG_PARAMS, copy), flags, seq),
        _message(NFQNL_MSG_CONFIG, queue,
                 _attribute(NFQA_CFG_MASK, struct.pack("!I", NFQA_CFG_F_GSO))
                 + _attribute(NFQA_CFG_FLAGS, struct.pack("!I", 0 if headers
                                                          else NFQA_CFG_F_GSO)),
                 flags, seq + 1),
    ]


def verdict(queue: int, packet_id: int, accept: bool = True, mark: int | None = None
            ) -> bytes:
    """Accept or drop one packet; `mark`: set the packet's mark (the wire's rules act on it)."""
    attributes = _attribute(NFQA_VERDICT_HDR,
                            struct.pack("!II", NF_ACCEPT if accept else NF_DROP, packet_id))
    if mark is not None:
        attributes += _attribute(NFQA_MARK, struct.pack("!I", mark))
    return _message(NFQNL_MSG_VERDICT, queue, attributes, 0, 0)


def verdict_up_to(queue: int, packet_id: int) -> bytes:
    """Accept every packet of `queue` whose id is at most `packet_id`."""
    return _message(NFQNL_MSG_VERDICT_BATCH, queue, _attribute(
        NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, packet_id)), 0, 0)


class NetlinkError(Exception):
    def __init__(self, errno: int) -> None:
        super().__init__(f"netlink error {errno}")
        self.errno = errno


_PACKET_MESSAGE = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET


def errors(data: bytes | memoryview) -> list[int]:
    """The errnos of the error replies in one read (0 is an acknowledgement)."""
    found = []
    offset, end = 0, len(data)
    while offset + _NLMSGHDR.size <= end:
        length, kind, _, _, _ = _NLMSGHDR.unpack_from(data, offset)
        if length < _NLMSGHDR.size or offset + length > end:
            break
        if kind == NLMSG_ERROR and length >= _NLMSGHDR.size + 4:
            found.append(-struct.unpack_from("=i", data, offset + _NLMSGHDR.size)[0])
        offset += (length + 3) & ~3
    return found


Queued = tuple[int, float | None, int, bytes]


def packets(data: bytes | memoryview) -> list[Queued]:
    """(packet id, kernel arrival time in seconds since the epoch or None, the packet's length
    (0 when only metadata is copied), its first bytes (b"" then)) of the queued-packet
    messages in one read (the compiled reader, _queue_reader.c, decodes them as this does)."""
    starts = []
    offset, end = 0, len(data)
    while offset + _NLMSGHDR.size <= end:
        length, kind = struct.unpack_from("=IH", data, offset)
        if length < _NLMSGHDR.size or offset + length > end:
            break
        if kind == _PACKET_MESSAGE:
            starts.append((offset, length))
        offset += (length + 3) & ~3
    found = []
    for start, length in starts:
        decoded = _decode_packet(data, start + _NLMSGHDR.size + _NFGENMSG.size, start + length)
        if decoded is not None:
            found.append(decoded)
    return found


def _decode_packet(data, offset: int, end: int) -> Queued | None:
    packet_id = None
    arrival = None
    header = b""
    length = None
    while offset + 4 <= end:
        size, kind = struct.unpack_from("=HH", data, offset)
        if size < 4 or offset + size > end:
            break
        kind &= 0x3FFF
        if kind == NFQA_PACKET_HDR and size >= 8:
            packet_id = struct.unpack_from("!I", data, offset + 4)[0]
        elif kind == NFQA_TIMESTAMP and size >= 20:
            seconds, micros = struct.unpack_from("!QQ", data, offset + 4)
            arrival = seconds + micros / 1e6
        elif kind == NFQA_PAYLOAD:
            header = bytes(data[offset + 4:offset + size])
        elif kind == NFQA_CAP_LEN and size >= 8:
            length = struct.unpack_from("!I", data, offset + 4)[0]
        offset += (size + 3) & ~3
    if packet_id is None:
        return None
    return packet_id, arrival, len(header) if length is None else length, header


ID_MASK = 0xFFFFFFFF  # ids are 32 bits and wrap
ID_WINDOW = 1 << 31  # an id within this many after another comes after it (the kernel's)


class Verdicts:
    """The verdicts of a queue whose packets leave in any order (the own discipline's
    flow queueing reorders across flows): which ids are still held, so that releasing every
    held packet up to an id is one batch verdict instead of a message per packet. Ids are
    sequential per queue (wrapping at 2^32); one the kernel numbered but never delivered
    (it could not notify us, and so did not hold the packet) is treated as done."""

    def __init__(self, queue: int) -> None:
        self.queue = queue
        self.low: int | None = None  # every id before it has had its verdict (None: no
        # batches: not started, or the ids went back, which the kernel never does)
        self.next_id: int | None = None  # the id the next arrival should have
        self.done: set[int] = set()  # ids from `low` on that have had theirs

    def arrived(self, ids: list[int]) -> None:
        """The ids of packets read from the queue, in order."""
        for packet_id in ids:
            if self.next_id is None:
                self.low = packet_id
            elif packet_id != self.next_id:
                skipped = (packet_id - self.next_id) & ID_MASK
                if skipped < ID_WINDOW:  # numbered, never delivered
                    self.done.update((self.next_id + i) & ID_MASK for i in range(skipped))
                else:
                    self.low = None
            self.next_id = (packet_id + 1) & ID_MASK

    def messages(self, released: list[tuple[int, int | None]], dropped: list[int]
                 ) -> list[bytes]:
        """Verdicts to send, in order: `dropped` ids each its own, first (they never reach
        the wire); then `released` (id, mark or None) in the order they leave, which the
        verdicts keep: the kernel sends an accepted packet on at once, so a marked packet,
        which needs its own verdict, goes between the batches of the plain ones before and
        after it (sent first, it would pass the packets of its flow that left before it:
        reordering that TCP takes for loss). Plain ids that with every earlier id make a
        prefix of what is held are one batch verdict, the rest their own."""
        out = [verdict(self.queue, packet_id, False) for packet_id in dropped]
        for packet_id in dropped:
            self._done(packet_id)
        plain: list[int] = []
        for packet_id, mark in released:
            if mark is None:
                plain.append(packet_id)
                continue
            out += self._accepted(plain)
            plain = []
            out.append(verdict(self.queue, packet_id, True, mark))
            self._done(packet_id)
        return out + self._accepted(plain)

    def _accepted(self, accepted: list[int]) -> list[bytes]:
        """Verdicts accepting `accepted` as they are: one batch for those that with every
        earlier id make a prefix of what is held, the rest their own."""
        if not accepted:
            return []
        low, done = self.low, self.done
        if low is None:
            return [verdict(self.queue, packet_id) for packet_id in accepted]
        start = low
        ordered = sorted(accepted, key=lambda packet_id: (packet_id - start) & ID_MASK)
        taken = 0
        while True:
            if low in done:
                done.discard(low)
            elif taken < len(ordered) and ordered[taken] == low:
                taken += 1
            else:
                break
            low = (low + 1) & ID_MASK
        self.low = low
        out = []
        if taken:
            out.append(verdict_up_to(self.queue, ordered[taken - 1]))
        for packet_id in ordered[taken:]:
            out.append(verdict(self.queue, packet_id))
            self._done(packet_id)
        return out

    def _done(self, packet_id: int) -> None:
        if self.low is not None and (packet_id - self.low) & ID_MASK < ID_WINDOW:
            self.done.add(packet_id)
