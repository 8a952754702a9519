"""The order of the native exchange, as a table both ends obey. No sockets: bytes in, events
out, and events in, bytes out.

    client                      server
    hello            ->
                     <-         welcome                 (with a challenge: auth ->,
                                                         <- authenticated)
    test             ->
                     <-         accepted                (the client opens its streams)
                     <-         start
    finished, results  <->  finished, results          (each end: finished, then results)
    bye              ->

Either end may send `error` at any moment before the close; it ends the exchange. Anything
else out of order is a ProtocolError, whoever sends it: our own drivers included.
"""

from __future__ import annotations

from enum import Enum

from ..errors import ProtocolError
from . import iperf3
from .events import Error, Event, decode
from .native import MessageReader, encode


class Role(Enum):
    CLIENT = "client"
    SERVER = "server"

    @property
    def peer(self) -> Role:
        return Role.SERVER if self is Role.CLIENT else Role.CLIENT


class Phase(Enum):
    GREETING = "greeting"  # the client's hello is due
    WELCOMING = "welcoming"  # the server's welcome is due
    AUTHENTICATING = "authenticating"  # the client's proof is due
    PROVING = "proving"  # the server's verdict on the proof is due
    DESCRIBING = "describing"  # the client's test is due
    DECIDING = "deciding"  # the server's accepted (or error) is due
    CONNECTING = "connecting"  # streams connect; the server's start is due
    RUNNING = "running"  # each end: finished, then results
    ENDING = "ending"  # both ends reported; the client's bye is due
    CLOSED = "closed"


class Progress(Enum):
    """One end's part of the running test."""

    MEASURING = "measuring"
    FINISHED = "finished"
    REPORTED = "reported"


C, S = Role.CLIENT, Role.SERVER

# (phase, who sends, event key) -> the phase after it.
TRANSITIONS: dict[tuple[Phase, Role, str], Phase] = {
    (Phase.GREETING, C, "hello"): Phase.WELCOMING,
    (Phase.WELCOMING, S, "welcome"): Phase.DESCRIBING,
    (Phase.WELCOMING, S, "welcome+challenge"): Phase.AUTHENTICATING,
    (Phase.AUTHENTICATING, C, "auth"): Phase.PROVING,
    (Phase.PROVING, S, "authenticated"): Phase.DESCRIBING,
    (Phase.DESCRIBING, C, "test"): Phase.DECIDING,
    (Phase.DECIDING, S, "accepted"): Phase.CONNECTING,
    (Phase.CONNECTING, S, "start"): Phase.RUNNING,
    (Phase.ENDING, C, "bye"): Phase.CLOSED,
}

# While RUNNING, each end's own progress: (its progress, event key) -> its progress after.
TEST_TRANSITIONS: dict[tuple[Progress, str], Progress] = {
    (Progress.MEASURING, "finished"): Progress.FINISHED,
    (Progress.FINISHED, "results"): Progress.REPORTED,
}


class Exchange:
    """One end's view of a native control connection."""

    def __init__(self, role: Role) -> None:
        self.role = role
        self.phase = Phase.GREETING
        self.progress = {C: Progress.MEASURING, S: Progress.MEASURING}
        self._reader = MessageReader()

    def send(self, event: Event) -> bytes:
        """The bytes that carry `event`; ProtocolError if we may not send it now."""
        self._advance(self.role, event)
        return encode(event.to_message())

    def receive(self, data: bytes) -> list[Event]:
        """The events complete in what arrived, each checked against the order."""
        events = []
        for message in self._reader.feed(data):
            event = decode(message)
            self._advance(self.role.peer, event)
            events.append(event)
        return events

    def allowed(self, sender: Role) -> set[str]:
        """The event keys `sender` may send now (error aside)."""
        if self.phase is Phase.RUNNING:
            mine = self.progress[sender]
            return {key for (progress, key) in TEST_TRANSITIONS if progress is mine}
        return {key for (phase, role, key) in TRANSITIONS
                if phase is self.phase and role is sender}

    def _advance(self, sender: Role, event: Event) -> None:
        if self.phase is Phase.CLOSED:
            raise ProtocolError(f"'{event.TYPE}' after the exchange ended")
        if isinstance(event, Error):
            self.phase = Phase.CLOSED
            return
        if self.phase is Phase.RUNNING:
            after = TEST_TRANSITIONS.get((self.progress[sender], event.key))
            if after is None:
                raise self._out_of_order(sender, event)
            self.progress[sender] = after
            if all(p is Progress.REPORTED for p in self.progress.values()):
                self.phase = Phase.ENDING
            return
        after_phase = TRANSITIONS.get((self.phase, sender, event.key))
        if after_phase is None:
            raise self._out_of_order(sender, event)
        self.phase = after_phase

    def _out_of_order(self, sender: Role, event: Event) -> ProtocolError:
        expected = "/".join(sorted(self.allowed(sender))) or "nothing"
        return ProtocolError(f"unexpected '{event.TYPE}' from the {sender.value} while "
                             f"{self.phase.value} (expected {expected})")


# iperf3's exchange has the same phases, driven by the server's one-byte states. Each state
# an iperf3 server sends, in the order it must come, and the phase it opens.
IPERF3_SERVER_STATES: tuple[tuple[int, Phase], ...] = (
    (iperf3.PARAM_EXCHANGE, Phase.DESCRIBING),
    (iperf3.CREATE_STREAMS, Phase.CONNECTING),
    (iperf3.TEST_START, Phase.RUNNING),
    (iperf3.TEST_RUNNING, Phase.RUNNING),
    (iperf3.EXCHANGE_RESULTS, Phase.RUNNING),  # the client has ended the test: TEST_END
    (iperf3.DISPLAY_RESULTS, Phase.ENDING),
)


class Iperf3Order:
    """An iperf3 client's view of the server's states: each must be the next in order."""

    def __init__(self) -> None:
        self.position = 0
        self.phase = Phase.GREETING

    def advance(self, state: int) -> None:
        if self.position >= len(IPERF3_SERVER_STATES):
            raise ProtocolError(f"state {state} after the exchange ended")
        expected, phase = IPERF3_SERVER_STATES[self.position]
        if state != expected:
            raise ProtocolError(f"expected state {expected} while {self.phase.value}, "
                                f"got {state}")
        self.position += 1
        self.phase = phase

    @property
    def expected(self) -> int | None:
        if self.position >= len(IPERF3_SERVER_STATES):
            return None
        return IPERF3_SERVER_STATES[self.position][0]
