"""What a step's flows measured, beside what theory predicted for them (no system calls)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from ...stats import jain_index
from .experiment import Flow, Step
from .responsiveness import RpmTheory


@dataclass
class FlowOutcome:
    flow: Flow
    address: str
    ok: bool = False
    error: str | None = None
    started: float | None = None  # monotonic, when the client really started
    throughput: float | None = None  # receiver side, bits/s
    sender_throughput: float | None = None
    connection_throughputs: list[float] = field(default_factory=list)  # receiver, per conn.
    intervals: list[tuple[float, float, float]] = field(default_factory=list)  # s, s, bit/s
    rtts: list[float] = field(default_factory=list)  # ms: the ping flow, or under load
    jitter_ms: float | None = None
    lost: int | None = None
    host_dropped: int | None = None  # of `lost`, those the receiving host's socket dropped
    packets: int | None = None
    rate: float | None = None  # udp: the rate asked for, bits/s
    probe_trials: list[dict[str, Any]] = field(default_factory=list)  # udp rate = "probe"
    predicted: float | None = None  # goodput theory predicts, bits/s
    # tcp flows that share their bottleneck with other flows of the step: the link
    # ("L2 a to b"), the congestion epochs the flow lasted, and how far from its share
    # theory lets it be at that length (theory.share_tolerance; None: no AIMD theory)
    bottleneck: str | None = None
    epoch_seconds: float | None = None  # tcp (AIMD): loss to loss on its bottleneck
    epochs: float | None = None
    share_tolerance: float | None = None
    base_rtt: float | None = None  # ms
    full_queue_rtt: float | None = None  # ms: base plus every forward queue full
    loaded_rtt: float | None = None  # ms: base plus every queue of both ways full
    no_theory: str | None = None  # why theory predicts no throughput for it, in words
    # a transfer (scp, http): its handshakes and slow start, at least, which its goodput
    # timed start to exit includes (theory's prediction too)
    start_up_seconds: float | None = None
    window_bound: float | None = None  # bits/s: window / base RTT, for a fixed window
    # bytes: the window its receivers advertised at most (TCP_INFO's snd_wnd), a mean over
    # its connections: what a fixed `window` (a socket buffer) became in the kernel
    advertised_window: float | None = None
    own_rtt_ms: float | None = None  # TCP: its senders' least RTT (TCP_INFO min_rtt), ms
    mathis_bound: float | None = None  # bits/s: MSS / (RTT sqrt(p)) x 1.31 (random loss)
    pftk_bound: float | None = None  # bits/s: the same with Reno's timeouts (the least)
    # seconds from loss to loss where random loss, not a queue, ends an AIMD flow's climbs
    loss_epoch_seconds: float | None = None
    retransmits: int | None = None  # tcp: the sender's TCP_INFO count
    delivered_ce: int | None = None  # tcp: segments echoed CE-marked (the sender's TCP_INFO);
    # udp with l4s: datagrams that arrived CE-marked
    # the slowest trace on its path: (its name, (start s, end s, bits/s offered) per interval)
    trace_capacity: tuple[str, list[tuple[float, float, float]]] | None = None
    congestion: str | None = None  # tcp, scp, http: the congestion control the sender ran
    seconds: float | None = None  # scp, http, command: start to exit
    exit_status: int | None = None  # scp, http, command
    output: str | None = None  # command: what the client printed (cut at OUTPUT_CHARS)
    # tcp, udp: each connection's (local address, port, remote address, port), and in a
    # routed lab the nodes its packets crossed ("h1 r1 r2 r3 h4"), asked of the kernels
    sockets: list[tuple[str, int, str, int]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    theory_path: str | None = None  # the nodes theory's prediction assumed
    # tcp with mptcp: the target's addresses its further subflows were steered to (one a
    # path), and the subflows its connections had at the end (MPTCP_INFO, summed)
    subflow_addresses: list[str] = field(default_factory=list)
    mptcp_subflows: int | None = None
    # tcp, udp (--trip-times): the receiver's one-way delays, ms: min, mean, p99; and
    # theory's, the forward path's delays (a floor: queues and the machine only add)
    # (tcp: from the kernel's send of each write's last byte, the path's delay); tcp: each
    # write's from write() to read(), ms: mean, p99 (the application's: no theory beside it)
    one_way_ms: tuple[float, float, float] | None = None
    # ... and its median (a flow of several connections: their medians weighted by count):
    # a TCP byte that was lost and sent again arrives a recovery later, which moves the
    # mean, not the median, of what theory's queues bound
    one_way_p50_ms: float | None = None
    base_one_way: float | None = None
    write_delay_ms: tuple[float, float] | None = None
    frames: tuple[int, int] | None = None  # udp with frames: whole, lost
    frame_latency_ms: tuple[float | None, float | None] | None = None  # mean, p99
    # rpm: the run's responsiveness (RPM), what it measured besides (the trimmed means'
    # round trips, ms; goodput; who measured), and theory's (model/responsiveness.py)
    rpm: float | None = None
    rpm_detail: dict[str, Any] | None = None
    rpm_theory: RpmTheory | None = None

    @property
    def loss_percent(self) -> float | None:
        if self.lost is None or not self.packets:
            return None
        return 100 * self.lost / self.packets


OUTPUT_CHARS = 4000


@dataclass
class CaptureOutcome:
    """A capture of a step, and what its analysis found (rows of plain data)."""

    where: str
    path: str
    packets: int | None = None
    dropped: int | None = None  # by the capture (its buffer), not by the network
    cut_short: bool = False  # the size cap ended it before the step did
    error: str | None = None
    tcp: list[dict[str, Any]] = field(default_factory=list)
    udp: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class EventFlow:
    """What one event did to one flow."""

    label: str
    outage: float | None  # seconds without a probe reply (None: none came back)
    dip: float | None  # share of the throughput lost at the worst interval, 0..1
    recovery: float | None  # seconds until the throughput was back at 90 % of its new level
    predicted: float | None = None  # theory's goodput along the network the event made
    base_rtt_ms: float | None = None  # the same, base RTT


@dataclass
class EventOutcome:
    description: str  # as the experiment says it: "at 10 s: link P13 down"
    at: float  # seconds after the flows' start, as planned
    applied: float | None = None  # when it was made, on the flows' clock (None: not made)
    took: float | None = None  # seconds the change itself took
    error: str | None = None
    convergence: float | None = None  # seconds to the last route change after it
    route_changes: int = 0
    flows: list[EventFlow] = field(default_factory=list)
    # Theory after the event (label: goodput bit/s, base RTT ms), read as routing settled.
    theory: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)


@dataclass
class StepOutcome:
    step: Step
    repetition: int
    flows: list[FlowOutcome]
    start_spread: float | None = None  # seconds between the first and last flow start
    interrupted: bool = False
    sweep: tuple[str, str] | None = None  # (parameter, value) of a sweep point
    captures: list[CaptureOutcome] = field(default_factory=list)
    events: list[EventOutcome] = field(default_factory=list)

    @property
    def fairness(self) -> float | None:
        rates = [rate for outcome in self.flows if outcome.flow.spec.share_judged and outcome.ok
                 for rate in outcome.connection_throughputs]
        return jain_index(rates) if len(rates) > 1 else None


def summarize_rtts(rtts: list[float]) -> dict[str, float] | None:
    if not rtts:
        return None
    mean = statistics.fmean(rtts)
    return {"min": min(rtts), "avg": mean, "max": max(rtts), "median": statistics.median(rtts),
            "mdev": statistics.pstdev(rtts)}
