"""TCP flows in a capture, judged by Wireshark's sequence analysis (Wireshark 4.0's rules
for tcp.analysis.*, restated here, not its code), so that a count here is the count a user
gets by filtering the same file in Wireshark.

Per packet, in file order, against the state of its conversation (both directions):
- lost segment: its sequence number is beyond the highest one seen (a gap before it);
- keep-alive: 0 or 1 byte starting one byte before the next expected sequence number;
- duplicate ACK: no data, same window, sequence number and ACK as this direction's last
  packet, no SYN/FIN/RST;
- a segment with data is spurious if the other side had already acknowledged all of it;
- else a segment with data (or SYN/FIN) that does not advance the sequence is, in this
  order: a fast retransmission (the other side sent at least 2 duplicate ACKs for exactly
  this sequence number, the last within 20 ms), out-of-order (it came within one handshake
  RTT, or 3 ms when no handshake was seen, of the highest segment and does not end where
  that one ends, a SYN or FIN counting as one byte), else a retransmission.
tcp.analysis.retransmission matches plain, fast and spurious retransmissions alike: that
sum is `retransmissions` here.

Also measured (not Wireshark's): `resent`, every data segment below the highest sequence
seen (retransmissions and out-of-order segments together: on a link that keeps order, that
is what the sender sent again); RTT samples from each ACK that acknowledges exactly the end
of a segment sent once (Karn's rule); new bytes per interval.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ... import ecn

if TYPE_CHECKING:  # only in annotations: reading the counts needs no dpkt
    from .packets import Packet

FIN, SYN, RST, ACK = 0x01, 0x02, 0x04, 0x10
ECE, CWR = 0x40, 0x80  # RFC 3168
_MASK = 0xFFFFFFFF
FAST_RETRANSMISSION_WINDOW_NS = 20_000_000
OUT_OF_ORDER_DEFAULT_NS = 3_000_000
THROUGHPUT_INTERVAL_NS = 1_000_000_000


def _after(a: int, b: int) -> bool:
    """a > b in sequence space (wrapping at 2**32)."""
    return 0 < ((a - b) & _MASK) < 0x80000000


COUNTS = ("packets", "data_segments", "bytes", "retransmissions", "fast_retransmissions",
          "spurious_retransmissions", "out_of_order", "resent", "lost_segments",
          "duplicate_acks", "ce_marked", "ece_flags", "cwr_flags")


def spread(values: list[float]) -> tuple[float, float, float] | None:
    """min, mean, max of samples (None for none)."""
    return (min(values), sum(values) / len(values), max(values)) if values else None


@dataclass
class TcpDirection:
    """One direction of a TCP connection: Wireshark's state, and what was counted."""

    source: str
    source_port: int
    destination: str
    destination_port: int
    nextseq: int = 0
    nextseq_time: int = 0
    lastack: int = 0
    lastack_time: int = 0
    window: int | None = None
    dupacks: int = 0
    last_keepalive: bool = False
    last_zero_window_probe: bool = False
    first_time: int = 0
    last_time: int = 0
    packets: int = 0
    data_segments: int = 0
    bytes: int = 0
    retransmissions: int = 0
    fast_retransmissions: int = 0
    spurious_retransmissions: int = 0
    out_of_order: int = 0
    resent: int = 0
    lost_segments: int = 0
    duplicate_acks: int = 0
    ce_marked: int = 0  # packets whose IP ECN field is CE (a queue marked them)
    ece_flags: int = 0  # ECE outside the handshake: the receiver echoes a CE mark
    cwr_flags: int = 0  # CWR: the sender answered an echo by reducing its window
    rtt_samples_ms: list[float] = field(default_factory=list)
    new_bytes: dict[int, int] = field(default_factory=dict)  # interval -> bytes
    _sent_once: dict[int, int] = field(default_factory=dict)  # segment end -> time
    _sent_again: set[int] = field(default_factory=set)

    @property
    def retransmission_ratio(self) -> float | None:
        return self.retransmissions / self.data_segments if self.data_segments else None

    @property
    def seconds(self) -> float:
        return (self.last_time - self.first_time) / 1e9

    def summary(self) -> dict[str, Any]:
        """What the direction reports: its ends, COUNTS, and what follows from them."""
        rtt = spread(self.rtt_samples_ms) or (None, None, None)
        return {"source": self.source, "source_port": self.source_port,
                "destination": self.destination, "destination_port": self.destination_port,
                **{name: getattr(self, name) for name in COUNTS}, "seconds": self.seconds,
                "retransmission_ratio": self.retransmission_ratio, "rtt_min": rtt[0],
                "rtt_avg": rtt[1], "rtt_max": rtt[2], "rtt_samples": len(self.rtt_samples_ms),
                "throughput": self.throughput()}

    def throughput(self, interval_ns: int = THROUGHPUT_INTERVAL_NS
                   ) -> list[tuple[float, float, float]]:
        """(start s, end s, bits/s) of new data, from the direction's first packet."""
        if not self.new_bytes:
            return []
        last = max(self.new_bytes)
        seconds = interval_ns / 1e9
        return [(i * seconds, (i + 1) * seconds, self.new_bytes.get(i, 0) * 8 / seconds)
                for i in range(last + 1)]


@dataclass
class _Conversation:
    directions: dict[tuple[str, int, str, int], TcpDirection]
    syn_time: int = 0
    first_rtt: int = 0
    closed: bool = False  # a FIN or RST was seen: a new SYN starts a new conversation


def analyze(packets: Iterable[Packet]) -> list[TcpDirection]:
    """Every direction of every TCP connection that carried at least one packet."""
    conversations: dict[tuple, _Conversation] = {}
    order: list[TcpDirection] = []
    for packet in packets:
        if packet.protocol != 6:
            continue
        ends = packet.endpoints
        key = min(ends, ends[2:] + ends[:2])
        conversation = conversations.get(key)
        if conversation is None or (packet.flags & (SYN | ACK) == SYN and conversation.closed):
            conversation = conversations[key] = _Conversation({})
        if packet.flags & (FIN | RST):
            conversation.closed = True
        forward = _direction(conversation, ends, order)
        reverse = _direction(conversation, ends[2:] + ends[:2], order)
        _handshake_rtt(conversation, packet)
        _account(packet, forward, reverse, conversation.first_rtt or OUT_OF_ORDER_DEFAULT_NS,
                 interval_ns=THROUGHPUT_INTERVAL_NS)
    return [d for d in order if d.packets]


def _direction(conversation: _Conversation, ends: tuple[str, int, str, int],
               order: list[TcpDirection]) -> TcpDirection:
    direction = conversation.directions.get(ends)
    if direction is None:
        direction = conversation.directions[ends] = TcpDirection(*ends)
        order.append(direction)
    return direction


def _handshake_rtt(conversation: _Conversation, packet: Packet) -> None:
    if packet.flags & (SYN | ACK) == SYN:
        conversation.syn_time = packet.time_ns
    elif (packet.flags & (SYN | ACK) == ACK and conversation.syn_time
          and not conversation.first_rtt):
        conversation.first_rtt = packet.time_ns - conversation.syn_time


def _account(packet: Packet, forward: TcpDirection, reverse: TcpDirection,
             out_of_order_ns: int, interval_ns: int) -> None:
    now, seq, ack, flags = packet.time_ns, packet.seq, packet.ack, packet.flags
    length, window = packet.payload_length, packet.window
    if not forward.packets:
        forward.first_time = now
    forward.packets += 1
    forward.last_time = now
    if packet.ecn == ecn.CE:
        forward.ce_marked += 1
    if flags & ECE and not flags & SYN:
        forward.ece_flags += 1
    if flags & CWR and not flags & SYN:
        forward.cwr_flags += 1
    if length:
        forward.data_segments += 1
        forward.bytes += length
    keepalive = zero_window_probe = False
    if length == 1 and seq == forward.nextseq and reverse.window == 0:
        zero_window_probe = True
    else:
        if forward.nextseq and _after(seq, forward.nextseq) and not flags & RST:
            forward.lost_segments += 1
        plain = not flags & (SYN | FIN | RST)
        keepalive = (length <= 1 and seq == (forward.nextseq - 1) & _MASK and plain)
        repeats = (length == 0 and window == forward.window and seq == forward.nextseq
                   and ack == forward.lastack and plain)
        if repeats and window and reverse.last_keepalive:
            pass  # a keep-alive's ACK
        elif repeats and window == 0 and reverse.last_zero_window_probe:
            pass  # a zero-window probe's ACK
        elif repeats and window:
            forward.dupacks += 1
            forward.duplicate_acks += 1
    if ack != forward.lastack:
        forward.dupacks = 0
    if (length or flags & (SYN | FIN)) and not keepalive:
        _classify(packet, forward, reverse, out_of_order_ns)
    _advance(packet, forward, zero_window_probe, interval_ns)
    _sample_rtt(packet, reverse)
    forward.window = window
    forward.lastack, forward.lastack_time = ack, now
    forward.last_keepalive, forward.last_zero_window_probe = keepalive, zero_window_probe


def _classify(packet: Packet, forward: TcpDirection, reverse: TcpDirection,
              out_of_order_ns: int) -> None:
    seq, length = packet.seq, packet.payload_length
    behind = bool(forward.nextseq) and _after(forward.nextseq, seq)
    if length > 1 and (forward.nextseq - 1) & _MASK == seq:
        behind = False  # data after a possible zero-window probe
    if behind and length:
        forward.resent += 1
        forward._sent_again.add((seq + length) & _MASK)
    if length and reverse.lastack and not _after((seq + length) & _MASK, reverse.lastack):
        forward.spurious_retransmissions += 1
        forward.retransmissions += 1
        return
    since_ack = packet.time_ns - reverse.lastack_time
    if (behind and reverse.dupacks >= 2 and reverse.lastack == seq
            and 0 <= since_ack < FAST_RETRANSMISSION_WINDOW_NS):
        forward.fast_retransmissions += 1
        forward.retransmissions += 1
        return
    since_highest = packet.time_ns - forward.nextseq_time
    end = (seq + length + (1 if packet.flags & (SYN | FIN) else 0)) & _MASK  # SYN, FIN: 1
    if behind and 0 <= since_highest < out_of_order_ns and forward.nextseq != end:
        forward.out_of_order += 1
        return
    if behind:
        forward.retransmissions += 1


def _advance(packet: Packet, forward: TcpDirection, zero_window_probe: bool,
             interval_ns: int) -> None:
    end = (packet.seq + packet.payload_length
           + (1 if packet.flags & (SYN | FIN) else 0)) & _MASK
    if packet.payload_length and end not in forward._sent_again:
        forward._sent_once.setdefault(end, packet.time_ns)
    if (_after(end, forward.nextseq) or not forward.nextseq) and not zero_window_probe:
        if forward.nextseq and packet.payload_length:
            interval = (packet.time_ns - forward.first_time) // interval_ns
            forward.new_bytes[interval] = (forward.new_bytes.get(interval, 0)
                                           + ((end - forward.nextseq) & _MASK))
        forward.nextseq, forward.nextseq_time = end, packet.time_ns


def _sample_rtt(packet: Packet, reverse: TcpDirection) -> None:
    """An ACK for exactly the end of a segment the other side sent once."""
    if not packet.flags & ACK:
        return
    sent = reverse._sent_once.pop(packet.ack, None)
    if sent is not None and packet.ack not in reverse._sent_again:
        reverse.rtt_samples_ms.append((packet.time_ns - sent) / 1e6)
    if len(reverse._sent_once) > 4096:  # ACKs this capture never saw: forget the oldest
        for end in list(reverse._sent_once)[:2048]:
            del reverse._sent_once[end]
