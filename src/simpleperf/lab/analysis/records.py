"""A capture file's record structure, checked as Wireshark's reader checks it, before dpkt
reads the packets (dpkt reads what a record claims without asking whether it can be so):

- pcap: a record that claims more captured bytes than any packet holds (262144, Wireshark's
  largest) is corruption;
- pcapng: a block whose length is not a multiple of 4 or under 12, whose length at its end
  disagrees with its start, a packet that claims more captured bytes than its block holds,
  or names an interface its section did not describe, is corruption;
- either: a record or block that runs past the end of the file is the file cut short.

Only headers are looked at (through mmap, no copies); the packets before the first problem
are good to read.
"""

from __future__ import annotations

import mmap
import struct
import sys
from dataclasses import dataclass
from typing import BinaryIO

MAX_PACKET_BYTES = 262144  # WTAP_MAX_PACKET_SIZE_STANDARD
PCAP_HEADER_BYTES = 24
PCAP_RECORD = struct.Struct("IIII")  # seconds, fraction, captured, original (byte order apart)
SECTION_HEADER = 0x0A0D0D0A
BYTE_ORDER_MAGIC = 0x1A2B3C4D
INTERFACE = 1
OLD_PACKET = 2  # obsolete Packet Block: a 2-byte interface id
SIMPLE_PACKET = 3
ENHANCED_PACKET = 6
# By byte order: a block's type and length; a length alone; an Enhanced Packet Block's fields
# (interface, time high, low, captured, length); an old Packet Block's (interface, drops,
# time high, low, captured, length).
BLOCK, LENGTH, ENHANCED, OLD = ({order: struct.Struct(order + layout) for order in "<>"}
                                for layout in ("II", "I", "IIIII", "HHIIII"))


@dataclass(frozen=True)
class Structure:
    packets: int  # packet records before the first problem (all of them without one)
    problem: str | None = None  # one line, naming the packet or byte where it is
    cut: bool = False  # the problem is the file ending inside a record


def check(stream: BinaryIO, pcapng: bool) -> Structure:
    """The structure of the open capture `stream` (at its start; left there)."""
    try:
        view = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
    except (ValueError, OSError):  # nothing to map (dpkt reads it as it can): unchecked
        return Structure(sys.maxsize)
    with view:
        return _pcapng(view) if pcapng else _pcap(view)


def _cut(packets: int, where: str) -> Structure:
    return Structure(packets, f"ends inside {where} (cut short?)", cut=True)


def _pcap(view: mmap.mmap) -> Structure:
    if len(view) < PCAP_HEADER_BYTES:
        return Structure(0)  # dpkt refuses it as no capture
    order = "<" if view[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    record = struct.Struct(order + PCAP_RECORD.format)
    at, packets, size = PCAP_HEADER_BYTES, 0, len(view)
    while at < size:
        if size - at < record.size:
            return _cut(packets, f"the header of packet {packets + 1}")
        captured = record.unpack_from(view, at)[2]
        if captured > MAX_PACKET_BYTES:
            return Structure(packets, f"is corrupt: packet {packets + 1} claims {captured} "
                             f"captured bytes, more than any packet holds "
                             f"({MAX_PACKET_BYTES})")
        at += record.size + captured
        if at > size:
            return _cut(packets, f"packet {packets + 1}")
        packets += 1
    return Structure(packets)


def _pcapng(view: mmap.mmap) -> Structure:
    at, packets, size = 0, 0, len(view)
    order, interfaces = "<", 0
    while at < size:
        if size - at < 12:
            return _cut(packets, f"the block at byte {at}")
        if LENGTH["<"].unpack_from(view, at)[0] == SECTION_HEADER:  # the same either way
            magic = view[at + 8:at + 12]
            order = "<" if magic == b"\x4d\x3c\x2b\x1a" else ">"
            interfaces = 0
        kind, length = BLOCK[order].unpack_from(view, at)
        if length < 12 or length % 4:
            return Structure(packets, f"is corrupt: the block at byte {at} claims a length "
                             f"of {length} bytes (a multiple of 4, at least 12)")
        if at + length > size:
            return _cut(packets, f"the block at byte {at}")
        if LENGTH[order].unpack_from(view, at + length - 4)[0] != length:
            return Structure(packets, f"is corrupt: the block at byte {at} ends with another "
                             "length than it begins with")
        if kind == INTERFACE:
            interfaces += 1
        elif kind in (ENHANCED_PACKET, OLD_PACKET, SIMPLE_PACKET):
            problem = _packet(view, at, kind, length, order, interfaces)
            if problem is not None:
                return Structure(packets, f"is corrupt: packet {packets + 1} {problem}")
            packets += 1
        at += length
    return Structure(packets)


def _packet(view: mmap.mmap, at: int, kind: int, length: int, order: str,
            interfaces: int) -> str | None:
    """What is wrong with one packet block, if anything."""
    if kind == SIMPLE_PACKET:
        return None if interfaces else "comes before any interface is described"
    head = (ENHANCED if kind == ENHANCED_PACKET else OLD)[order]
    room = length - 12 - head.size
    if room < 0:
        return f"has a block of {length} bytes, too short for its own fields"
    fields = head.unpack_from(view, at + 8)
    interface, captured = fields[0], fields[-2]
    if interface >= interfaces:
        return (f"names interface {interface}, and its section describes "
                f"{interfaces} interface{'s' if interfaces != 1 else ''}")
    if captured > room:
        return f"claims {captured} captured bytes, more than its block holds ({room})"
    return None
