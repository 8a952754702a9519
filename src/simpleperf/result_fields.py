"""Every figure a stream's end-of-test result carries, once: its key in our results (and in
the native protocol's results message), its type, the key iperf3's JSON gives it in
end.streams[].sender / .receiver, which end's view shows it, and how the sums (sum_sent,
sum_received) combine the streams'. The native protocol's check of a peer's results and the
JSON reporter both read this table; a new figure is a new row."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ResultField:
    key: str  # ours, per stream
    kind: type  # int or float (a delay account: kind is None, see DELAY_FIELDS)
    json: str  # iperf3's (or, new in simpleperf, our) JSON key; "": not shown
    shown_by: str  # "sender", "receiver" or "both": which view's entry shows it
    protocol: str | None = None  # "tcp" or "udp"; None: both
    summed: str | None = None  # "sum" or "max" over the streams in the sums; None: not
    signed: bool = False  # may be negative


FIELDS = (
    ResultField("stream", int, "", "both"),
    ResultField("bytes", int, "bytes", "both", summed="sum"),
    ResultField("seconds", float, "seconds", "both", summed="max"),
    ResultField("packets", int, "packets", "both", "udp", "sum"),
    ResultField("lost", int, "lost_packets", "receiver", "udp", "sum"),
    # of those, the ones the receiving socket itself dropped, its buffer full (the
    # receiving host's loss; the rest is the network's): new in simpleperf
    ResultField("dropped", int, "receiver_dropped_packets", "receiver", "udp", "sum"),
    # datagrams that were not the test's and were not counted (without its key when the
    # server has a shared secret, too short for the header, or numbered implausibly far
    # off): new in simpleperf
    ResultField("forged", int, "forged_packets", "receiver", "udp", "sum"),
    ResultField("out_of_order", int, "out_of_order", "receiver", "udp", "sum"),
    ResultField("jitter_ms", float, "jitter_ms", "receiver", "udp"),
    # how much the receiver's queue grew over the test (UDP): new in simpleperf
    ResultField("queue_growth_ms", float, "queue_growth_ms", "receiver", "udp", "max",
                signed=True),
    # datagrams that arrived CE-marked (an --l4s receiver): new in simpleperf
    ResultField("ce_marked", int, "ce_marked", "receiver", "udp", "sum"),
    # times an unlimited (-b 0) sender slowed to what its receiver read, the receiver's
    # socket having dropped datagrams (engine/udp_pace.py): new in simpleperf
    ResultField("paced", int, "paced_by_receiver", "sender", "udp", "sum"),
    ResultField("retransmits", int, "retransmits", "sender", "tcp", "sum"),
    # segments the receiver echoed as CE-marked (the sender's TCP_INFO): new in simpleperf
    ResultField("delivered_ce", int, "delivered_ce", "sender", "tcp", "sum"),
    ResultField("max_snd_cwnd", int, "max_snd_cwnd", "sender", "tcp"),
    ResultField("max_snd_wnd", int, "max_snd_wnd", "sender", "tcp"),
    ResultField("max_rtt_us", int, "max_rtt", "sender", "tcp"),
    ResultField("min_rtt_us", int, "min_rtt", "sender", "tcp"),
    ResultField("mean_rtt_us", int, "mean_rtt", "both", "tcp"),
    # the subflows of a Multipath TCP connection (-m), 0 when it fell back to plain TCP:
    # new in simpleperf
    ResultField("mptcp_subflows", int, "mptcp_subflows", "both", "tcp"),
    # an isochronous test's frames: sent and slipped (sender), whole and lost (receiver)
    ResultField("frames", int, "frames", "both"),
    ResultField("frames_slipped", int, "frames_slipped", "sender"),
    ResultField("frames_lost", int, "frames_lost", "receiver"),
)

# Delay accounts (DelayAccount.to_result on the wire), each a receiver's, new in simpleperf
# as iperf2 measures them: ours -> the JSON key of its summary and histogram.
DELAY_FIELDS = {
    "delays": "one_way_delay",  # the path's: each datagram's, each TCP write's last byte's
    "write_delays": "write_to_read_delay",  # each TCP write's, the sender's buffer included
    "frame_delays": "frame_latency",  # each isochronous frame's
}


def checked_fields() -> dict[str, type]:
    """Our key -> type, of every number a peer's results may carry."""
    return {field.key: field.kind for field in FIELDS}


def signed_fields() -> set[str]:
    return {field.key for field in FIELDS if field.signed}


def shown(protocol: str, sender: bool) -> list[ResultField]:
    """The fields an end's entry in iperf3's JSON shows for this protocol."""
    side = "sender" if sender else "receiver"
    return [field for field in FIELDS if field.json
            and field.protocol in (None, protocol) and field.shown_by in ("both", side)]
