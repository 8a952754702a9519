"""What every discipline is given and answers."""

from __future__ import annotations

from dataclasses import dataclass

from .....ecn import NOT_ECT

MTU_BYTES = 1514  # the largest frame a link carries, as the kernel's psched_mtu gives it


class Packet:
    """One queued packet: its queue id, arrival (seconds), frame size (bytes), flow key, ECN
    field and DSCP, and keys of its source and destination hosts (CAKE isolates hosts).
    `marked`: the discipline set CE on it."""

    __slots__ = ("id", "arrival", "size", "flow", "ecn", "dscp", "source", "destination",
                 "marked")

    def __init__(self, packet_id: int, arrival: float, size: int = MTU_BYTES, flow: int = 0,
                 ecn: int = NOT_ECT, dscp: int = 0, source: int = 0,
                 destination: int = 0) -> None:
        self.id = packet_id
        self.arrival = arrival
        self.size = size
        self.flow = flow
        self.ecn = ecn
        self.dscp = dscp
        self.source = source
        self.destination = destination
        self.marked = False

    @property
    def ecn_capable(self) -> bool:
        return self.ecn != NOT_ECT

    def mark(self) -> bool:
        """Set CE, as the kernel's INET_ECN_set_ce: only an ECN-capable packet takes it."""
        if self.ecn == NOT_ECT:
            return False
        self.marked = True
        return True


@dataclass(frozen=True)
class Settings:
    """A discipline's parameters; None: the kernel's default for that discipline."""

    limit: int = 1000  # packets
    ecn: bool = False
    target: float | None = None  # seconds
    interval: float | None = None  # CoDel's
    tupdate: float | None = None  # PIE's
    flows: int | None = None  # flow queues
    quantum: int | None = None  # bytes per round
    rate: float | None = None  # bits/s of the link (classes police their priority by it)
    step: float | None = None  # DualPI2's L queue marking threshold, seconds
    coupling: int | None = None  # DualPI2's k
    any_ect: bool = False  # DualPI2 takes ECT(0) into its L queue too (DCTCP's packets)


class Discipline:
    """A queue: `enqueue` takes a packet at its arrival time and returns what it dropped
    (the packet itself when the queue is full, or others: a flow-queueing discipline drops
    from its fattest flow); `dequeue` at the moment the wire is free returns the packet to
    send (None: empty) and what it dropped on the way. Counters: drops and marks."""

    def __init__(self) -> None:
        self.packets = 0
        self.bytes = 0
        self.drops = 0
        self.marks = 0

    def enqueue(self, packet: Packet, now: float) -> list[Packet]:
        raise NotImplementedError

    def dequeue(self, now: float) -> tuple[Packet | None, list[Packet]]:
        raise NotImplementedError

    def drain(self) -> list[Packet]:
        """Every packet held, in arrival order, taken out without judging them."""
        raise NotImplementedError

    def sending(self, size: int, until: float) -> None:
        """The frame `dequeue` just gave is on the wire until `until` (the kernel's tbf
        holds that frame peeked meanwhile, and its child's backlog counts it)."""
