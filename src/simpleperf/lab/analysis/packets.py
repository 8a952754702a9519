"""Packets from a pcap or pcapng file, decoded as far as the analysis needs (IPv4/IPv6, TCP
and UDP headers, the first bytes of a UDP payload). Files are read with dpkt; what a packet
carried is taken from its IP length, not from the captured bytes, so headers-only captures
count bytes as the wire carried them (as Wireshark does).
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from pathlib import Path

import dpkt

UDP_HEAD_BYTES = 16  # simpleperf's and iperf3's datagram header: send time, sequence number
_LINK_DECODERS = {
    dpkt.pcap.DLT_EN10MB: dpkt.ethernet.Ethernet,
    dpkt.pcap.DLT_LINUX_SLL: dpkt.sll.SLL,
    dpkt.pcap.DLT_LINUX_SLL2: dpkt.sll2.SLL2,
}
_RAW_LINKS = {dpkt.pcap.DLT_RAW, 101}  # raw IP (101 is LINKTYPE_RAW in files)
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

    @property
    def endpoints(self) -> tuple[str, int, str, int]:
        return self.source, self.source_port, self.destination, self.destination_port


@dataclass
class CaptureFile:
    packets: list[Packet]
    damage: str | None = None  # why reading stopped before the end of the file


def read(path: Path) -> CaptureFile:
    """Every TCP and UDP packet of the file, in file order. A file that ends inside a
    packet (a capture killed mid-write) gives the packets before it, and says so. Raises
    CaptureFileError for a file that is not a capture."""
    try:
        stream = open(path, "rb")  # noqa: SIM115 - closed by the with below
    except OSError as error:
        raise CaptureFileError(f"cannot read {path}: {error.strerror}") from None
    with stream:
        magic = stream.read(4)
        stream.seek(0)
        try:
            reader = (dpkt.pcapng.Reader(stream) if magic == _PCAPNG_MAGIC
                      else dpkt.pcap.Reader(stream))
        except (ValueError, dpkt.dpkt.UnpackError, struct.error):
            raise CaptureFileError(f"{path} is not a pcap or pcapng capture") from None
        link = reader.datalink()
        if link not in _LINK_DECODERS and link not in _RAW_LINKS:
            raise CaptureFileError(f"{path}: link type {link} is not Ethernet, Linux cooked or "
                                   "raw IP")
        found = CaptureFile([])
        frames = iter(reader)
        short = False
        while True:
            try:
                timestamp, frame = next(frames)
            except StopIteration:
                break
            except (ValueError, dpkt.dpkt.UnpackError, struct.error):
                found.damage = (f"{path} ends inside a packet (cut short?): read the "
                                f"{len(found.packets)} packets before it")
                break
            try:
                packet = _decode(round(timestamp * 1_000_000_000), frame, link)  # or Decimal
            except _Short:
                short = True  # a frame shorter than its headers: cut, if nothing follows
                continue
            short = False
            if packet is not None:
                found.packets.append(packet)
        if short and found.damage is None:
            found.damage = (f"{path} ends inside a packet (cut short?): read the "
                            f"{len(found.packets)} packets before it")
        return found


class _Short(Exception):
    """A frame too short for its own headers."""


def _decode(time_ns: int, frame: bytes, link: int) -> Packet | None:
    try:
        network = (dpkt.ip.IP(frame) if link in _RAW_LINKS
                   else _LINK_DECODERS[link](frame).data)
    except (dpkt.dpkt.UnpackError, struct.error, IndexError):
        raise _Short from None
    if isinstance(network, bytes | bytearray):
        raise _Short  # dpkt leaves what it could not decode as bytes
    if isinstance(network, dpkt.ip.IP):
        family, header_length, total = socket.AF_INET, network.hl * 4, network.len
    elif isinstance(network, dpkt.ip6.IP6):
        family, header_length, total = socket.AF_INET6, 40, 40 + network.plen
    else:
        return None
    transport = network.data
    if isinstance(transport, bytes | bytearray) and network.p in (6, 17):
        raise _Short
    source = socket.inet_ntop(family, network.src)
    destination = socket.inet_ntop(family, network.dst)
    if isinstance(transport, dpkt.tcp.TCP):
        length = total - header_length - transport.off * 4
        return Packet(time_ns, source, destination, transport.sport, transport.dport, 6,
                      max(length, 0), transport.seq, transport.ack, transport.flags,
                      transport.win)
    if isinstance(transport, dpkt.udp.UDP):
        return Packet(time_ns, source, destination, transport.sport, transport.dport, 17,
                      max(transport.ulen - 8, 0),
                      head=bytes(transport.data[:UDP_HEAD_BYTES]))
    return None
