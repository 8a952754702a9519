"""Every queue discipline's statistics in a lab's namespaces, as `tc -s qdisc` shows them
(its queue's length in packets and bytes, its drops and overlimits), read with one netlink
dump per namespace (RTM_GETQDISC) from a socket made inside it: no process a reading.
The parsing is pure; dump() does the system calls."""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

RTM_GETQDISC, RTM_NEWQDISC = 38, 36
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_DONE, NLMSG_ERROR = 3, 2
TCA_KIND, TCA_STATS2 = 1, 7
TCA_STATS_BASIC, TCA_STATS_QUEUE = 1, 3
HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port
TCMSG = struct.Struct("=BxxxiIII")  # family, ifindex, handle, parent, info
ATTRIBUTE = struct.Struct("=HH")  # rtattr: length, type
BASIC = struct.Struct("=QI")  # bytes, packets
QUEUE = struct.Struct("=IIIII")  # qlen, backlog, drops, requeues, overlimits
RECEIVE_BYTES = 1 << 16
ROOT = 0xFFFFFFFF  # TC_H_ROOT: an interface's root qdisc, whose counts take in its classes'


@dataclass(frozen=True)
class QdiscStats:
    """One queue discipline on an interface: what `tc -s qdisc` prints for it."""

    kind: str
    handle: int
    parent: int
    sent_bytes: int
    sent_packets: int
    queue_packets: int
    queue_bytes: int
    drops: int
    overlimits: int


def request(sequence: int) -> bytes:
    """A dump of every qdisc of every interface (pure)."""
    body = TCMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
    return HEADER.pack(HEADER.size + len(body), RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP,
                       sequence, 0) + body


def attributes(data: bytes) -> dict[int, bytes]:
    """rtattrs, by type (the last of a type wins); a truncated one ends the walk (pure)."""
    found: dict[int, bytes] = {}
    at = 0
    while at + ATTRIBUTE.size <= len(data):
        length, kind = ATTRIBUTE.unpack_from(data, at)
        if length < ATTRIBUTE.size or at + length > len(data):
            break
        found[kind & 0x3FFF] = data[at + ATTRIBUTE.size:at + length]
        at += (length + 3) & ~3
    return found


def parse(messages: bytes) -> tuple[list[tuple[int, QdiscStats]], bool]:
    """The qdiscs in one read of a dump's answer, each with its interface's index, and
    whether the dump has ended (pure: hostile lengths end the walk, never raise)."""
    found: list[tuple[int, QdiscStats]] = []
    at = 0
    while at + HEADER.size <= len(messages):
        length, kind, _, _, _ = HEADER.unpack_from(messages, at)
        if length < HEADER.size or at + length > len(messages):
            break
        if kind in (NLMSG_DONE, NLMSG_ERROR):
            return found, True
        body = messages[at + HEADER.size:at + length]
        if kind == RTM_NEWQDISC and len(body) >= TCMSG.size:
            _, index, handle, parent, _ = TCMSG.unpack_from(body)
            stats = _stats(attributes(body[TCMSG.size:]), handle, parent)
            if stats is not None:
                found.append((index, stats))
        at += (length + 3) & ~3
    return found, False


def _stats(attrs: dict[int, bytes], handle: int, parent: int) -> QdiscStats | None:
    kind = attrs.get(TCA_KIND, b"").rstrip(b"\0").decode("ascii", "replace")
    nested = attributes(attrs.get(TCA_STATS2, b""))
    basic, queue = nested.get(TCA_STATS_BASIC, b""), nested.get(TCA_STATS_QUEUE, b"")
    if not kind or len(basic) < BASIC.size or len(queue) < QUEUE.size:
        return None
    sent_bytes, sent_packets = BASIC.unpack_from(basic)
    qlen, backlog, drops, _, overlimits = QUEUE.unpack_from(queue)
    return QdiscStats(kind, handle, parent, sent_bytes, sent_packets, qlen, backlog, drops,
                      overlimits)


def dump() -> dict[str, list[QdiscStats]]:
    """Every interface of the calling thread's namespace and its qdiscs. Blocks."""
    names = {index: name for index, name in socket.if_nameindex()}
    by_interface: dict[str, list[QdiscStats]] = {}
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        sock.settimeout(2.0)
        sock.sendall(request(1))
        ended = False
        while not ended:
            qdiscs, ended = parse(sock.recv(RECEIVE_BYTES))
            for index, stats in qdiscs:
                by_interface.setdefault(names.get(index, str(index)), []).append(stats)
    return by_interface


def root_of(found: list[QdiscStats]) -> QdiscStats | None:
    """An interface's root qdisc (pure): the queue and drops of everything under it."""
    return next((stats for stats in found if stats.parent == ROOT), None)
