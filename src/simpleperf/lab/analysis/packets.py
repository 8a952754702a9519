"""Packets from a pcap or pcapng file, decoded as far as the analysis needs (IPv4/IPv6, TCP
and UDP headers, the first bytes of a UDP payload). Files are read with dpkt (pcap and
pcapng, timestamps in any resolution; float or Decimal seconds); what a packet carried is
taken from its IP length, not from the captured bytes, so headers-only captures count bytes
as the wire carried them (as Wireshark does).
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from pathlib import Path

import dpkt

from ... import ecn
from . import records

UDP_HEAD_BYTES = 16  # simpleperf's and iperf3's datagram header: send time, sequence number
_LINKS = {dpkt.pcap.DLT_EN10MB, dpkt.pcap.DLT_LINUX_SLL, dpkt.pcap.DLT_LINUX_SLL2,
          dpkt.pcap.DLT_RAW, 101}  # Ethernet, Linux cooked v1 and v2, raw IP (twice named)
_PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"


class CaptureFileError(Exception):
    """A file that is not a capture, or is one this analysis cannot read; one line."""


@dataclass(frozen=True, slots=True)
class Packet:
    time_ns: int
    source: str
    destination: str
    source_port: int
    destination_port: int
    protocol: int  # 6 TCP, 17 UDP
    payload_length: int  # TCP segment length or UDP payload length, from the IP header
    seq: int = 0
    ack: int = 0
    flags: int = 0
    window: int = 0
    head: bytes = b""  # UDP: the first captured payload bytes (at most UDP_HEAD_BYTES)
    ecn: int = 0  # the IP header's ECN field: 0 not ECT, 1 ECT(1), 2 ECT(0), 3 CE

    @property
    def endpoints(self) -> tuple[str, int, str, int]:
        return self.source, self.source_port, self.destination, self.destination_port


@dataclass
class CaptureFile:
    packets: list[Packet]
    damage: str | None = None  # what is wrong with the file (reading may have stopped)
    read: int = 0  # records read


def read(path: Path) -> CaptureFile:
    """Every TCP and UDP packet of the file, in file order. A file that ends inside a
    packet (a capture killed mid-write), that is corrupt after some packets (as Wireshark
    judges it: records.check), or holds packets too short for their own headers, gives
    the packets it can and says what is wrong. Raises CaptureFileError for a file that is
    not a capture."""
    try:
        stream = open(path, "rb")  # noqa: SIM115 - closed by the with below
    except OSError as error:
        raise CaptureFileError(f"cannot read {path}: {error.strerror}") from None
    with stream:
        if not stream.seekable():
            raise CaptureFileError(f"{path} is not a file (a pipe?): give a capture file")
        magic = stream.read(4)
        stream.seek(0)
        try:
            reader = (dpkt.pcapng.Reader(stream) if magic == _PCAPNG_MAGIC
                      else dpkt.pcap.Reader(stream))
        except (ValueError, dpkt.dpkt.UnpackError, struct.error):
            raise CaptureFileError(f"{path} is not a pcap or pcapng capture") from None
        link = reader.datalink()
        if link not in _LINKS:
            raise CaptureFileError(f"{path}: link type {link} is not Ethernet, Linux cooked or "
                                   "raw IP")
        structure = records.check(stream, magic == _PCAPNG_MAGIC)
        found = _packets(path, reader, link, structure.packets)
        if structure.problem is not None and found.damage is None:
            found.damage = f"{path} {structure.problem}: read the {found.read} packets before it"
        return found


def _packets(path: Path, reader, link: int, limit: int) -> CaptureFile:
    """The TCP and UDP packets of the first `limit` records dpkt reads."""
    found = CaptureFile([])
    frames = iter(reader)
    names: dict[bytes, str] = {}
    malformed: list[int] = []
    while found.read < limit:
        try:
            timestamp, frame = next(frames)
        except StopIteration:
            break
        except (ValueError, dpkt.dpkt.UnpackError, struct.error):
            found.damage = (f"{path} ends inside a packet (cut short?): read the "
                            f"{found.read} packets before it")
            break
        found.read += 1
        try:
            packet = _decode(round(timestamp * 1_000_000_000), frame, link, names)
        except _Short:
            malformed.append(found.read)  # Wireshark's [Malformed Packet]
            continue
        if packet is not None:
            found.packets.append(packet)
    if malformed and found.damage is None:
        found.damage = (f"{path}: {len(malformed)} packet{'s are' if len(malformed) > 1 else ' is'}"
                        f" too short for {'their' if len(malformed) > 1 else 'its'} own headers "
                        f"(malformed; the first is packet {malformed[0]})")
    return found


class _Short(Exception):
    """A frame too short for its own headers."""


_IPV4, _IPV6, _VLAN = 0x0800, 0x86DD, 0x8100
_U16 = struct.Struct("!H")
_IPV4_HEADER = struct.Struct("!BBHxxxxxBxx4s4s")  # version+IHL, TOS, length, protocol, ends
_IPV6_HEADER = struct.Struct("!IHBx16s16s")  # version+class+label, payload, next, ends
_TCP_HEADER = struct.Struct("!HHIIBBH")  # ports, seq, ack, offset, flags, window
_UDP_HEADER = struct.Struct("!HHH")  # ports, length


def _network_start(frame: bytes, link: int) -> tuple[int, int]:
    """Where the IP header starts, and its EtherType (0 for raw IP: read the version)."""
    if link == dpkt.pcap.DLT_EN10MB:
        (kind,) = _U16.unpack_from(frame, 12)
        if kind == _VLAN:
            return 18, _U16.unpack_from(frame, 16)[0]
        return 14, kind
    if link == dpkt.pcap.DLT_LINUX_SLL:
        return 16, _U16.unpack_from(frame, 14)[0]
    if link == dpkt.pcap.DLT_LINUX_SLL2:
        return 20, _U16.unpack_from(frame, 0)[0]
    return 0, 0


def _decode(time_ns: int, frame: bytes, link: int, names: dict[bytes, str]) -> Packet | None:
    """The headers by their fixed layouts (a few struct reads: dpkt's objects cost five
    times more per packet); `names` caches address strings."""
    try:
        start, kind = _network_start(frame, link)
        version = frame[start] >> 4 if kind == 0 else {_IPV4: 4, _IPV6: 6}.get(kind, 0)
        if version == 4:
            first, tos, total, protocol, source, destination = _IPV4_HEADER.unpack_from(
                frame, start)
            transport = start + (first & 0x0F) * 4
            carried = total - (first & 0x0F) * 4
            field = ecn.of(tos)
        elif version == 6:
            head, carried, protocol, source, destination = _IPV6_HEADER.unpack_from(frame,
                                                                                    start)
            transport = start + 40
            field = ecn.of(head >> 20)
        else:
            return None
        if protocol == 6:
            ports_from, ports_to, seq, ack, offset, flags, window = _TCP_HEADER.unpack_from(
                frame, transport)
            return Packet(time_ns, _name(source, names), _name(destination, names), ports_from,
                          ports_to, 6, max(carried - (offset >> 4) * 4, 0), seq, ack, flags,
                          window, ecn=field)
        if protocol == 17:
            ports_from, ports_to, length = _UDP_HEADER.unpack_from(frame, transport)
            return Packet(time_ns, _name(source, names), _name(destination, names), ports_from,
                          ports_to, 17, max(length - 8, 0),
                          head=bytes(frame[transport + 8:transport + 8 + UDP_HEAD_BYTES]),
                          ecn=field)
        return None
    except (struct.error, IndexError):
        raise _Short from None


def _name(address: bytes, names: dict[bytes, str]) -> str:
    name = names.get(address)
    if name is None:
        family = socket.AF_INET if len(address) == 4 else socket.AF_INET6
        name = names[address] = socket.inet_ntop(family, address)
    return name
