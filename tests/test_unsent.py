"""The unsent limit a test's TCP sender keeps (engine/unsent.py), on synthetic readings."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from simpleperf.engine.unsent import (
    BULK_INITIAL,
    BULK_LEAST,
    BULK_SECONDS,
    MAX_UNSENT,
    MIN_UNSENT,
    RATE_SAMPLE_SECONDS,
    bulk_limit,
)


def test_a_bulk_sender_keeps_fifty_milliseconds_of_its_rate_once_it_is_known():
    unsent = bulk_limit()
    assert unsent.limit == BULK_INITIAL and unsent.due(0.0)  # until the rate is known
    assert not unsent.update(0.0, 0) and unsent.limit == BULK_INITIAL
    assert not unsent.due(0.01) and not unsent.update(0.01, 10**6)
    assert unsent.due(0.1) and unsent.update(0.1, 1_250_000)  # 100 Mbit/s: 625 kB
    assert unsent.limit == int(12_500_000 * BULK_SECONDS) // MIN_UNSENT * MIN_UNSENT
    assert unsent.update(0.2, 1_250_000 + 25_000)  # 2 Mbit/s: 12.5 kB, less than the least
    assert unsent.limit == BULK_LEAST
    assert not unsent.update(0.3, 1_275_000)  # nothing acknowledged: the least again
    unsent.update(0.4, 1_275_000 + 10**10)  # 800 Gbit/s: no more than the most
    assert MAX_UNSENT - MIN_UNSENT < unsent.limit <= MAX_UNSENT


@given(st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(0, 10**9)), max_size=40))
def test_the_limit_is_whole_segments_within_its_bounds(readings):
    unsent = bulk_limit()
    now, delivered = 0.0, 0
    first = None
    for step, more in readings:
        now, delivered = now + step, delivered + more
        first = now if first is None else first
        changed = unsent.update(now, delivered)
        if now - first < RATE_SAMPLE_SECONDS:  # no rate yet: the initial limit
            assert not changed and unsent.limit == BULK_INITIAL
            continue
        assert BULK_LEAST <= unsent.limit <= MAX_UNSENT and unsent.limit % MIN_UNSENT == 0
