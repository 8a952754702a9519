"""JSON output in iperf3's layout and key names (start, intervals, end, sum_sent,
sum_received, ...), so tools that read iperf3 JSON read ours; what iperf3 lacks sits under
new keys. docs/json-output.md is the schema."""

from __future__ import annotations

import contextlib
import platform
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

from .. import __version__, result_fields
from ..description.testspec import TestSpec
from ..description.transports import Transport
from ..stats import RttSummary, lost_percent


def identity(started_wall: float) -> dict[str, Any]:
    """Which program wrote the document, on what system, when the test began."""
    return {"version": f"simpleperf {__version__}",
            "system_info": " ".join(platform.uname()),
            "timestamp": {"time": time.strftime("%a, %d %b %Y %H:%M:%S GMT",
                                                time.gmtime(started_wall)),
                          "timesecs": int(started_wall)}}


def test_start(spec: TestSpec) -> dict[str, Any]:
    """iperf3's start.test_start: what the test was asked to do."""
    start = {"protocol": spec.protocol.upper(), "num_streams": spec.parallel,
             "blksize": spec.length, "omit": spec.omit, "duration": spec.duration or 0,
             "bytes": spec.num_bytes or 0, "blocks": 0,
             "reverse": int(spec.direction == "reverse"), "tos": spec.tos,
             "bidir": int(spec.direction == "bidir"), "target_bitrate": spec.rate}
    if spec.trip_times:  # new in simpleperf, iperf2's: what the delays were binned by
        start.update(trip_times=True, histogram_bin_width_ms=spec.histogram_bin_width * 1e3,
                     histogram_bins=spec.histogram_bins)
    if spec.isochronous:
        start["isochronous"] = {"frames_per_second": spec.frame_rate,
                                "mean_bits_per_second": spec.frame_load,
                                "stdev_bits_per_second": spec.frame_stdev}
    return start


def socket_section(sock: socket.socket | None, window: int | None) -> dict[str, Any]:
    """iperf3's start keys about a data socket: the buffer asked for (-w, 0 for the
    kernel's), the buffers the kernel gave, and TCP's default segment size."""
    section: dict[str, Any] = {"sock_bufsize": window or 0}
    if sock is None:
        return section
    with contextlib.suppress(OSError):
        section["sndbuf_actual"] = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        section["rcvbuf_actual"] = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        if sock.type == socket.SOCK_STREAM:
            section["tcp_mss_default"] = sock.getsockopt(socket.IPPROTO_TCP,
                                                         socket.TCP_MAXSEG)
    return section


def udp_receive_buffer(streams: Sequence) -> int | None:
    """The receive buffer the kernel gave the first UDP stream we receive on (None: none)."""
    for stream in streams:
        if not stream.sending and stream.transport.datagrams:
            with contextlib.suppress(OSError):
                return stream.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    return None


def interval_entries(records: Sequence, transport: Transport, client_sends: Callable[[int], bool],
                     we_are_client: bool) -> list[dict[str, Any]]:
    """Interval objects from records of several intervals, in time order."""
    by_end: dict[float, list] = {}
    for record in records:
        by_end.setdefault(record.end, []).append(record)
    return [interval_entry(group, transport, client_sends, we_are_client)
            for _, group in sorted(by_end.items())]


def cpu_section(ours: tuple[float, float], theirs: tuple[float, float] | None = None
                ) -> dict[str, float]:
    """iperf3's cpu_utilization_percent: this end's (host) and the peer's (remote) user and
    system CPU, in percent of one core, over the test."""
    section = {"host_total": sum(ours), "host_user": ours[0], "host_system": ours[1]}
    if theirs is not None:
        section.update(remote_total=sum(theirs), remote_user=theirs[0],
                       remote_system=theirs[1])
    return section


def interval_entry(records: Sequence, transport: Transport, client_sends: Callable[[int], bool],
                   we_are_client: bool) -> dict[str, Any]:
    """One iperf3 interval object from the records of one interval (all streams)."""
    streams = [_interval_stream(r, transport) for r in records]
    forward = [s for s, r in zip(streams, records, strict=False)
               if client_sends(r.stream) == we_are_client] or streams
    reverse = [s for s, r in zip(streams, records, strict=False)
               if client_sends(r.stream) != we_are_client]
    entry = {"streams": streams, "sum": _sum(forward, transport)}
    if reverse and forward is not streams:
        entry["sum_bidir_reverse"] = _sum(reverse, transport)
    return entry


def _interval_stream(record, transport: Transport) -> dict[str, Any]:
    seconds = record.end - record.start
    entry = {"socket": record.stream, "start": _round(record.start), "end": _round(record.end),
             "seconds": _round(seconds), "bytes": record.num_bytes,
             "bits_per_second": _rate(record.num_bytes, seconds), "omitted": record.omitted,
             "sender": record.sending}
    if transport.datagrams:
        entry["packets"] = record.packets or 0
        if record.lost is not None:
            entry.update(jitter_ms=record.jitter_ms, lost_packets=record.lost,
                         lost_percent=lost_percent(record.lost, entry["packets"]),
                         out_of_order=record.out_of_order)
    elif record.retransmits is not None or record.snd_cwnd is not None:
        entry.update(retransmits=record.retransmits, snd_cwnd=record.snd_cwnd,
                     snd_wnd=record.snd_wnd, rtt=record.rtt_us, rttvar=record.rttvar_us,
                     pmtu=record.pmtu)
    if record.delays is not None:
        entry["one_way_delay"] = record.delays.summary()
    if record.write_delays is not None:
        entry["write_to_read_delay"] = record.write_delays.summary()
    return entry


def _sum(streams: list[dict[str, Any]], transport: Transport) -> dict[str, Any]:
    if not streams:
        return {}
    total = sum(s["bytes"] for s in streams)
    seconds = max(s["seconds"] for s in streams)
    entry = {"start": min(s["start"] for s in streams), "end": max(s["end"] for s in streams),
             "seconds": seconds, "bytes": total, "bits_per_second": _rate(total, seconds),
             "omitted": streams[0].get("omitted", False), "sender": streams[0]["sender"]}
    if transport.datagrams:
        entry["packets"] = sum(s.get("packets", 0) for s in streams)
        if any("lost_packets" in s for s in streams):
            lost = sum(s.get("lost_packets", 0) for s in streams)
            entry.update(jitter_ms=_mean(s.get("jitter_ms", 0.0) for s in streams),
                         lost_packets=lost, lost_percent=lost_percent(lost, entry["packets"]),
                         out_of_order=sum(s.get("out_of_order") or 0 for s in streams))
        elif entry["sender"]:  # as iperf3's sender reports its side: it sees no loss
            entry.update(jitter_ms=0.0, lost_packets=0, lost_percent=0.0)
    for field in result_fields.FIELDS:  # what the table says each sum adds up or takes most of
        if field.protocol == transport.name and field.summed and field.json not in entry:
            values = [s[field.json] for s in streams if s.get(field.json) is not None]
            if values:
                entry[field.json] = sum(values) if field.summed == "sum" else max(values)
    return entry


def end_section(transport: Transport, numbers: Sequence[int], client_sends: Callable[[int], bool],
                client_view: dict[int, dict[str, Any]],
                server_view: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Per-stream sender and receiver views and their sums. `client_view`/`server_view`:
    result entries by stream number (what each end measured)."""
    streams: list[dict[str, Any]] = []
    sent: list[dict[str, Any]] = []
    received: list[dict[str, Any]] = []
    sent_reverse: list[dict[str, Any]] = []
    received_reverse: list[dict[str, Any]] = []
    bidir = len({client_sends(n) for n in numbers}) > 1
    for number in numbers:
        if client_sends(number):
            sender_view, receiver_view = client_view.get(number), server_view.get(number)
        else:
            sender_view, receiver_view = server_view.get(number), client_view.get(number)
        sender = _end_stream(number, sender_view, True, transport)
        receiver = _end_stream(number, receiver_view, False, transport)
        if transport.datagrams:
            merged = dict(sender)
            for key in _receivers_udp_keys():
                if key in receiver:
                    merged[key] = receiver[key]
            if "lost_packets" in receiver:
                merged["packets"] = receiver["packets"]
            streams.append({"udp": merged, "sender": sender, "receiver": receiver})
        else:
            streams.append({"sender": sender, "receiver": receiver})
        reverse = bidir and not client_sends(number)
        (sent_reverse if reverse else sent).append(sender)
        (received_reverse if reverse else received).append(receiver)
    end: dict[str, Any] = {"streams": streams, "sum_sent": _sum(sent, transport),
           "sum_received": _sum(received, transport)}
    if transport.datagrams:
        end["sum"] = _udp_sum(end["sum_sent"], end["sum_received"])
    if bidir:
        end["sum_sent_bidir_reverse"] = _sum(sent_reverse, transport)
        end["sum_received_bidir_reverse"] = _sum(received_reverse, transport)
        if transport.datagrams:
            end["sum_bidir_reverse"] = _udp_sum(end["sum_sent_bidir_reverse"],
                                                end["sum_received_bidir_reverse"])
    return end


def _receivers_udp_keys() -> list[str]:
    """The figures of a UDP stream only its receiver knows (iperf3's 'udp' entries and
    'sum' take them from the receiver's view)."""
    return ["lost_percent"] + [field.json for field in result_fields.shown("udp", False)
                               if field.shown_by == "receiver"]


def _udp_sum(sent: dict[str, Any], received: dict[str, Any]) -> dict[str, Any]:
    """iperf3's UDP 'sum': the sender's bytes, the receiver's jitter and loss."""
    entry = dict(sent)
    for key in _receivers_udp_keys() + ["packets"]:
        if key in received:
            entry[key] = received[key]
    return entry


def _end_stream(number: int, view: dict[str, Any] | None, sender: bool,
                transport: Transport) -> dict[str, Any]:
    view = view or {}
    seconds = view.get("seconds", 0.0)
    num_bytes = view.get("bytes", 0)
    entry = {"socket": number, "start": 0, "end": _round(seconds), "seconds": _round(seconds),
             "bytes": num_bytes, "bits_per_second": _rate(num_bytes, seconds),
             "sender": sender}
    if "error" in view:
        entry["error"] = view["error"]
    entry.update(delay_entries(view))
    if transport.datagrams:
        entry["packets"] = view.get("packets", 0)
        if "lost" in view:
            entry.update(jitter_ms=view.get("jitter_ms", 0.0), lost_packets=view["lost"],
                         lost_percent=lost_percent(view["lost"], entry["packets"]),
                         out_of_order=view.get("out_of_order", 0))
        if "queue_growth_ms" in view:
            entry["queue_growth_ms"] = view["queue_growth_ms"]
    for field in result_fields.shown(transport.name, sender):
        if field.key in view and field.json not in entry:
            entry[field.json] = view[field.key]
    return entry


def delay_entries(view: dict[str, Any]) -> dict[str, Any]:
    """New in simpleperf, as iperf2 measures them: a receiver's one-way delays
    (--trip-times) and an isochronous test's frames, milliseconds."""
    entry: dict[str, Any] = {}
    for ours, theirs in result_fields.DELAY_FIELDS.items():
        account = view.get(ours)
        if account is not None:
            entry[theirs] = {**account.summary(), "histogram": account.histogram()}
    for field in result_fields.FIELDS:
        if field.key.startswith("frames") and field.key in view:
            entry[field.json] = view[field.key]
    return entry


def rtt_block(summary: RttSummary | None) -> dict[str, Any] | None:
    """Round trips' summary, milliseconds (None: no probe answered)."""
    if summary is None:
        return None
    return {"count": summary.count, "min_ms": summary.minimum, "mean_ms": summary.average,
            "max_ms": summary.maximum, "mdev_ms": summary.mdev, "p50_ms": summary.p50,
            "p90_ms": summary.p90, "p99_ms": summary.p99,
            "trimmed_mean_ms": summary.trimmed, "rpm": summary.rpm,
            "samples_ms": list(summary.samples)}


def latency_section(idle: RttSummary | None, loaded: RttSummary | None) -> dict[str, Any]:
    """New in simpleperf (iperf3 has no latency under load): milliseconds."""
    return {"idle": rtt_block(idle), "loaded": rtt_block(loaded)}


def _rate(num_bytes: int, seconds: float) -> float:
    return num_bytes * 8 / seconds if seconds > 0 else 0.0


def _round(value: float) -> float:
    return round(value, 6)


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0
