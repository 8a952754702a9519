"""Every interface's counters in a lab's namespaces: /proc/thread-self/net/dev read from
inside each namespace (in_namespace: setns on the calling thread, which returns home
before the next), opened afresh at each reading so that no namespace is held open once
the lab is down; and the own shaper's queues, from its delay lines' statistics files."""

from __future__ import annotations

import ctypes
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from ..model.topology import Topology
from ..net import build
from ..net.ownership import RECORD_DIR
from ..net.shaping.delayline import QUEUES_SUFFIX
from ..net.system import NETNS_DIR

CLONE_NEWNET = 0x40000000
T = TypeVar("T")


@dataclass(frozen=True)
class Counters:
    """An interface's totals since it was made."""

    rx_bytes: int
    rx_packets: int
    rx_dropped: int
    tx_bytes: int
    tx_packets: int
    tx_dropped: int


def parse_dev(text: str) -> dict[str, Counters]:
    """/proc/net/dev's table: interface -> its counters (pure)."""
    found: dict[str, Counters] = {}
    for line in text.splitlines()[2:]:
        name, colon, rest = line.partition(":")
        fields = rest.split()
        if not colon or len(fields) < 16 or not all(field.isdigit() for field in fields):
            continue
        numbers = [int(field) for field in fields]
        found[name.strip()] = Counters(numbers[0], numbers[1], numbers[3], numbers[8],
                                       numbers[9], numbers[11])
    return found


def interfaces() -> dict[str, Counters]:
    """Every interface of the calling thread's namespace and its counters."""
    with open("/proc/thread-self/net/dev", encoding="ascii") as table:
        return parse_dev(table.read())


def in_namespace(name: str, work: Callable[[], T]) -> T | None:
    """`work()` done inside the network namespace `name` (None if it is gone): the calling
    thread enters it and comes back before returning, whatever happens."""
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        target = os.open(f"{NETNS_DIR}/{name}", os.O_RDONLY)
    except OSError:
        return None
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            return None
        try:
            return work()
        finally:
            if libc.setns(home, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "cannot return to our own namespace")
    finally:
        os.close(target)
        os.close(home)


def own_queues(lab: str, model: Topology) -> dict[tuple[str, str], dict[str, int]]:
    """What the own shaper's queues hold (packets, bytes) and dropped and marked so far, by
    link direction: each delay line's statistics file says it by kernel queue, which
    build.delay_queue_directions names."""
    directions = build.delay_queue_directions(model)
    found: dict[tuple[str, str], dict[str, int]] = {}
    for path in sorted(RECORD_DIR.glob(f"{lab}.delayline*{QUEUES_SUFFIX}")):
        try:
            stats = json.loads(path.read_text())
            for number, counts in stats.items():
                direction = directions.get(int(number))
                if direction is not None:
                    found[direction] = {key: int(value) for key, value in counts.items()}
        except (OSError, ValueError, TypeError, AttributeError):
            continue
    return found
