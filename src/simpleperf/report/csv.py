"""iperf2's comma-separated report (-y C), row by row as iperf 2.1.8 writes it, so scripts
that parse it read ours: the time (YYYYMMDDHHMMSS), our address and port, the peer's
address and port, the stream's number (-1 for a sum of streams), the interval ("0.0-1.0"),
bytes, bits per second; UDP adds jitter (ms), lost, total, lost percent, out of order.
Pure formatting: values in, lines out."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from ..description.transports import Transport
from ..engine.records import IntervalRecord, Stream

SUM_ID = -1


def split_endpoint(label: str) -> tuple[str, str]:
    """'10.0.0.1:5001' or '[::1]:5001' -> address, port."""
    address, _, port = label.rpartition(":")
    return address.strip("[]"), port


def row(when: float, local: str, remote: str, number: int, start: float, end: float,
        num_bytes: int, udp: dict[str, Any] | None = None) -> str:
    """One row; `udp`: jitter_ms, lost, packets, out_of_order (a receiver's view)."""
    seconds = max(end - start, 1e-9)
    fields = [time.strftime("%Y%m%d%H%M%S", time.localtime(when)), *split_endpoint(local),
              *split_endpoint(remote), str(number), f"{max(0.0, start):.1f}-{end:.1f}",
              str(num_bytes), str(int(num_bytes * 8 / seconds))]
    if udp is not None:
        packets, lost = udp.get("packets") or 0, udp.get("lost") or 0
        fields += [f"{udp.get('jitter_ms') or 0.0:.3f}", str(lost), str(packets),
                   f"{100.0 * lost / packets if packets else 0.0:.3f}",
                   str(udp.get("out_of_order") or 0)]
    return ",".join(fields)


class CsvRows:
    """A test's rows: per interval (-i) and at the end, each stream's and, with -P, the
    sum's."""

    def __init__(self, streams: list[Stream], host: str, port: int, transport: Transport,
                 parallel: int, out: Callable[[str], None]) -> None:
        self.labels = {s.number: s.label for s in streams}
        self.numbers = [s.number for s in streams]
        self.remote, self.host = f"{host}:{port}", host
        self.udp, self.parallel, self.out = transport.datagrams, parallel, out

    def interval(self, records: Sequence[IntervalRecord], entry: dict[str, Any]) -> None:
        self._rows([(r.stream, r.start, r.end, r.num_bytes, self._udp(vars(r), r.lost))
                    for r in records], entry.get("sum"))

    def end(self, end: dict[str, Any]) -> None:
        """Each stream's receiver view (what arrived: with UDP the server's report), else
        its sender's."""
        rows = []
        for entry, number in zip(end["streams"], self.numbers, strict=True):
            view = entry["receiver"] if entry["receiver"].get("bytes") else entry["sender"]
            rows.append((number, view.get("start", 0.0), view.get("end", 0.0),
                         view.get("bytes", 0), self._udp(view, view.get("lost_packets"))))
        key = "sum_received" if end.get("sum_received", {}).get("bytes") else "sum_sent"
        self._rows(rows, {**end.get("sum", {}), **end.get(key, {})})

    def _rows(self, rows: list[tuple[int, float, float, int, dict[str, Any] | None]],
              total: dict[str, Any] | None) -> None:
        now = time.time()
        for number, start, end, num_bytes, udp in rows:
            self.out(row(now, self.labels[number], self.remote, number, start, end,
                         num_bytes, udp))
        if total and self.parallel > 1 and rows:
            local = split_endpoint(self.labels[rows[0][0]])[0]
            self.out(row(now, f"{local}:0", f"{self.host}:0", SUM_ID, total["start"],
                         total["end"], total["bytes"],
                         self._udp(total, total.get("lost_packets"))))

    def _udp(self, values: dict[str, Any], lost: int | None) -> dict[str, Any] | None:
        """A UDP row's receiver figures (a sender's: none lost); None for TCP."""
        if not self.udp:
            return None
        return {"jitter_ms": values.get("jitter_ms"), "lost": lost,
                "packets": values.get("packets"), "out_of_order": values.get("out_of_order")}
