"""nfnetlink_queue messages as bytes, and packet ids out of bytes. No sockets here.

Only what the delay line needs: bind a queue with metadata-only copies, read the ids of
queued packets, and give verdicts (one packet, or every packet up to an id).
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
NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_QUEUE_MAXLEN = 3
NFQA_CFG_MASK = 4
NFQA_CFG_FLAGS = 5
NFQA_CFG_F_GSO = 1 << 2
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
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


def bind(queue: int, max_packets: int, seq: int = 1) -> list[bytes]:
    """Messages that bind `queue`, ask for metadata only, size the kernel's queue, and take
    GRO/GSO aggregates whole (one entry and one verdict for many packets; the rate limiter
    after the delay splits them again)."""
    return [
        _message(NFQNL_MSG_CONFIG, queue,
                 _attribute(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_BIND, 0)),
                 NLM_F_ACK, seq),
        _message(NFQNL_MSG_CONFIG, queue,
                 _attribute(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META)),
                 NLM_F_ACK, seq + 1),
        _message(NFQNL_MSG_CONFIG, queue,
                 _attribute(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", max_packets)),
                 NLM_F_ACK, seq + 2),
        _message(NFQNL_MSG_CONFIG, queue,
                 _attribute(NFQA_CFG_MASK, struct.pack("!I", NFQA_CFG_F_GSO))
                 + _attribute(NFQA_CFG_FLAGS, struct.pack("!I", NFQA_CFG_F_GSO)),
                 NLM_F_ACK, seq + 3),
    ]


def verdict(queue: int, packet_id: int, accept: bool = True) -> bytes:
    return _message(NFQNL_MSG_VERDICT, queue, _attribute(
        NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT if accept else NF_DROP, packet_id)), 0, 0)


def verdict_up_to(queue: int, packet_id: int) -> bytes:
    """Accept every packet of `queue` whose id is at most `packet_id`."""
    return _message(NFQNL_MSG_VERDICT_BATCH, queue, _attribute(
        NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, packet_id)), 0, 0)


class NetlinkError(Exception):
    def __init__(self, errno: int) -> None:
        super().__init__(f"netlink error {errno}")
        self.errno = errno


NFQA_TIMESTAMP = 4
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


def packets(data: bytes | memoryview) -> list[tuple[int, float | None]]:
    """(packet id, kernel arrival time in seconds since the epoch or None) of the queued-packet
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


def _decode_packet(data, offset: int, end: int) -> tuple[int, float | None] | None:
    packet_id = None
    arrival = None
    while offset + 4 <= end:
        length, kind = struct.unpack_from("=HH", data, offset)
        if length < 4 or offset + length > end:
            break
        kind &= 0x3FFF
        if kind == NFQA_PACKET_HDR and length >= 8:
            packet_id = struct.unpack_from("!I", data, offset + 4)[0]
        elif kind == NFQA_TIMESTAMP and length >= 20:
            seconds, micros = struct.unpack_from("!QQ", data, offset + 4)
            arrival = seconds + micros / 1e6
        offset += (length + 3) & ~3
    return None if packet_id is None else (packet_id, arrival)
