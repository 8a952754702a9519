"""Every interface's counters in a lab's namespaces: /proc/thread-self/net/dev read from
inside each namespace (setns on the calling thread, which returns home before the next),
opened afresh at each reading so that no namespace is held open once the lab is down."""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

from ..net.system import NETNS_DIR

CLONE_NEWNET = 0x40000000


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


def read(namespaces: list[str]) -> dict[str, dict[str, Counters]]:
    """Each namespace's interfaces and their counters (a namespace gone: left out). Blocks:
    run it off the event loop, on a thread of its own while it runs."""
    libc = ctypes.CDLL(None, use_errno=True)
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    found: dict[str, dict[str, Counters]] = {}
    try:
        for name in namespaces:
            try:
                target = os.open(f"{NETNS_DIR}/{name}", os.O_RDONLY)
            except OSError:
                continue
            try:
                if libc.setns(target, CLONE_NEWNET) != 0:
                    continue
                with open("/proc/thread-self/net/dev", encoding="ascii") as table:
                    found[name] = parse_dev(table.read())
            finally:
                os.close(target)
                if libc.setns(home, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "cannot return to our own namespace")
    finally:
        os.close(home)
    return found
