"""A TCP test over a slow path whose sender's socket could hold megabytes (-w 2M): the
sender keeps no more than about 50 ms of its rate unsent (engine/unsent.py), so what it
counts as sent is what the path took, and the test ends once the path's own queue has
drained, not the socket's buffer (before the limit: 5.04 MB "sent" in 5.1 s over 2 Mbit/s,
received over 21.1 s)."""

from __future__ import annotations

import json

from helpers import SIMPLEPERF
from lab_helpers import Ready, in_node, lab, needs_lab

from simpleperf.engine.unsent import BULK_INITIAL, BULK_LEAST, BULK_SECONDS

pytestmark = needs_lab

RATE = 2_000_000  # bit/s
QUEUE, FRAME, PAYLOAD = 100, 1514, 1448  # packets, and each one's bytes on the wire and of data
RTT = 0.02
SECONDS = 5
GSO_SKB = 65536  # a blocking write stops at an skb, which may hold this much past the limit


def test_a_sender_over_a_slow_path_counts_what_the_path_took():
    lab("up", "pair", "--rate", "2M", "--delay", "10ms", "--queue", str(QUEUE))
    server = Ready("h2", *SIMPLEPERF, "-s", "-p", "5201", ready="listening")
    try:
        done = in_node("h1", *SIMPLEPERF, "-c", "10.0.0.2", "-p", "5201", "-t", str(SECONDS),
                       "-C", "cubic", "-w", "2M", "--json")
        assert done.returncode == 0, done.stderr
        end = json.loads(done.stdout)["end"]
        sent, received = end["sum_sent"], end["sum_received"]
        carried = RATE / 8 * PAYLOAD / FRAME  # data bytes a second
        # In flight at the end: the window, at most twice what the queue and the path hold
        # (CUBIC's slow start overshoots to that before a loss shows), and what waits
        # unsent (its limit, 128 KiB before the first rate, and a write's last skb).
        window = 2 * (QUEUE * PAYLOAD + carried * RTT)
        unsent = max(BULK_INITIAL, BULK_LEAST, carried * BULK_SECONDS) + GSO_SKB
        assert received["bytes"] == sent["bytes"] <= carried * sent["seconds"] + window + unsent
        # ... so the receiver has it all once that much more has crossed the link
        assert sent["seconds"] <= SECONDS + 0.25, sent
        assert received["seconds"] <= sent["seconds"] + (window + unsent) / carried + 0.5, (
            sent, received)
    finally:
        server.stop()
        lab("down", "pair")
