"""The native exchange's order (protocol/exchange.py), without sockets: the legal orders
carry both ends to the close, and any event out of order, from either end, in any phase,
is a clean ProtocolError that leaves the exchange where it was."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simpleperf.command_line.cli import parse_args
from simpleperf.description.testspec import TestSpec as Spec
from simpleperf.errors import ProtocolError
from simpleperf.protocol import events, iperf3
from simpleperf.protocol.exchange import (
    IPERF3_SERVER_STATES,
    TRANSITIONS,
    Exchange,
    Iperf3Order,
    Phase,
    Role,
)
from simpleperf.protocol.native import encode, parse_spec, spec_message

C, S = Role.CLIENT, Role.SERVER
RESULTS = events.Results(({"stream": 1, "bytes": 10, "seconds": 1.0},), ())
SAMPLES: list[events.Event] = [
    events.Hello(), events.Welcome(), events.Welcome(challenge="ab" * 16),
    events.Auth("proof"), events.Authenticated(), events.Test(Spec()),
    events.Accepted(bytes(16)), events.Start(), events.Finished(), RESULTS, events.Bye(),
    events.Error("no"),
]


def _legal_order(challenge: bool) -> list[tuple[Role, events.Event]]:
    order: list[tuple[Role, events.Event]] = [
        (C, events.Hello()), (S, events.Welcome(challenge="cd" * 16 if challenge else None))]
    if challenge:
        order += [(C, events.Auth("p")), (S, events.Authenticated())]
    order += [(C, events.Test(Spec())), (S, events.Accepted(bytes(range(16)))),
              (S, events.Start()), (S, events.Finished()), (C, events.Finished()),
              (C, RESULTS), (S, RESULTS), (C, events.Bye())]
    return order


@pytest.mark.parametrize("challenge", [False, True])
def test_a_whole_exchange_carries_both_ends_to_the_close(challenge):
    ends = {C: Exchange(C), S: Exchange(S)}
    for sender, event in _legal_order(challenge):
        data = ends[sender].send(event)
        received = ends[sender.peer].receive(data)
        assert received == [event]  # typed on the way out, the same typed on the way in
    assert ends[C].phase is ends[S].phase is Phase.CLOSED


def test_each_end_may_report_only_after_it_finished():
    exchange = Exchange(C)
    for sender, event in _legal_order(False)[:5]:  # up to start
        exchange._advance(sender, event)
    with pytest.raises(ProtocolError, match="unexpected 'results' from the server"):
        exchange._advance(S, RESULTS)
    exchange._advance(S, events.Finished())
    exchange._advance(S, RESULTS)
    with pytest.raises(ProtocolError, match="'bye'"):
        exchange._advance(C, events.Bye())  # the client has not reported yet


def test_an_error_ends_the_exchange_from_any_phase_and_nothing_follows_it():
    exchange = Exchange(S)
    hello = encode(events.Hello().to_message())
    assert exchange.receive(hello[:-1]) == []  # nothing complete yet
    assert exchange.receive(hello[-1:]) == [events.Hello()]
    exchange.send(events.Error("busy"))
    assert exchange.phase is Phase.CLOSED
    with pytest.raises(ProtocolError, match="after the exchange ended"):
        exchange._advance(C, events.Test(Spec()))


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([C, S]), st.sampled_from(SAMPLES)), max_size=20))
def test_any_order_is_followed_or_refused_cleanly(steps):
    exchange = Exchange(C)
    for sender, event in steps:
        before = (exchange.phase, dict(exchange.progress))
        legal = exchange.phase is not Phase.CLOSED and (
            isinstance(event, events.Error) or event.key in exchange.allowed(sender))
        try:
            exchange._advance(sender, event)
        except ProtocolError:
            assert not legal
            assert (exchange.phase, exchange.progress) == before  # nothing half-applied
            continue
        assert legal
        if before[0] not in (Phase.RUNNING, Phase.CLOSED) and not isinstance(
                event, events.Error):
            assert exchange.phase is TRANSITIONS[(before[0], sender, event.key)]


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.sampled_from(SAMPLES), max_size=12), st.integers(0, 2000))
def test_hostile_bytes_from_a_client_are_events_in_order_or_a_protocol_error(sequence, cut):
    data = b"".join(encode(event.to_message()) for event in sequence)
    server = Exchange(S)
    try:
        got = server.receive(data[:cut])
    except ProtocolError:
        return
    assert all(isinstance(event, events.Event) for event in got)



def test_an_iperf3_server_states_come_in_the_shared_phases_order():
    order = Iperf3Order()
    for state, phase in IPERF3_SERVER_STATES:
        order.advance(state)
        assert order.phase is phase
    assert order.phase is Phase.ENDING and order.expected is None
    with pytest.raises(ProtocolError, match="after the exchange ended"):
        order.advance(iperf3.IPERF_DONE)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.integers(-128, 127), max_size=8))
def test_an_iperf3_server_out_of_order_is_a_protocol_error(states):
    order = Iperf3Order()
    for position, state in enumerate(states):
        expected = order.expected
        if state == expected:
            order.advance(state)
            continue
        with pytest.raises(ProtocolError):
            order.advance(state)
        assert order.position == position  # nothing advanced
        return


def test_the_server_keeps_intervals_at_the_clients_sample_within_bounds():
    """`sample` asks the server for its intervals at the client's -i (0.05 to 60 s); an
    older client that sends none gets seconds."""
    fine = parse_args(["-c", "-i", "0.1", "--native"]).test
    assert fine.sample == 0.1 and parse_spec(spec_message(fine)).sample == 0.1
    finest = parse_args(["-c", "-i", "0.01", "--native"]).test
    assert finest.sample == 0.05
    old = {k: v for k, v in spec_message(Spec()).items() if k != "sample"}
    assert parse_spec(old).sample == 1.0
    for wrong in (0.01, 61, "1", True):
        with pytest.raises(ProtocolError):
            parse_spec({**spec_message(Spec()), "sample": wrong})
