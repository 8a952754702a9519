"""The native exchange's messages as typed events (the wire form is in native.py).

Every message on a control connection is one of these. `decode` turns a framed JSON object
into its event, checking every field; `Event.to_message` is the inverse. Which event may
come when is exchange.py's business, not theirs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..delays import DelayAccount
from ..description.options import MAX_PEER_HISTOGRAM_BINS, is_congestion_name, is_int, is_number
from ..description.testspec import TestSpec
from ..errors import ProtocolError
from .native import (
    DELAY_RESULT_FIELDS,
    MAX_MESSAGE,
    MAX_PEER_INTERVALS,
    TOKEN_SIZE,
    VERSION,
    IntervalRow,
    parse_intervals,
    parse_results,
    parse_spec,
    spec_message,
)

MAX_TEXT = 300  # characters of a peer's free text (software, error) we keep
MAX_CHALLENGE = 128
MAX_CPU_PERCENT = 100.0 * 4096  # every core of the largest machine, busy


@dataclass(frozen=True)
class Event:
    TYPE: ClassVar[str] = ""

    @property
    def key(self) -> str:
        """What the state table is keyed by: the type, refined where the next state
        depends on a field (a welcome with a challenge)."""
        return self.TYPE

    def to_message(self) -> dict[str, Any]:
        return {"type": self.TYPE}

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> Event:
        return cls()


@dataclass(frozen=True)
class Hello(Event):
    TYPE: ClassVar[str] = "hello"
    version: int = VERSION
    software: str = ""

    def to_message(self) -> dict[str, Any]:
        # Only what differs from the defaults: the client's whole greeting must fit in the
        # 37 bytes an iperf3 server takes for a cookie (see native.padded).
        message: dict[str, Any] = {"type": self.TYPE}
        if self.version != VERSION:
            message["version"] = self.version
        if self.software:
            message["software"] = self.software
        return message

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> Hello:
        version = message.get("version", VERSION)
        return cls(version if is_int(version) else VERSION, _text(message.get("software")))


@dataclass(frozen=True)
class Welcome(Event):
    TYPE: ClassVar[str] = "welcome"
    version: int = VERSION
    software: str = ""
    challenge: str | None = None  # present when the server requires the shared secret

    @property
    def key(self) -> str:
        return "welcome+challenge" if self.challenge is not None else self.TYPE

    def to_message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"type": self.TYPE, "version": self.version,
                                   "software": self.software}
        if self.challenge is not None:
            message["challenge"] = self.challenge
        return message

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> Welcome:
        challenge = message.get("challenge")
        version = message.get("version", VERSION)
        return cls(version if is_int(version) else VERSION, _text(message.get("software")),
                   challenge[:MAX_CHALLENGE] if isinstance(challenge, str) else None)


@dataclass(frozen=True)
class Auth(Event):
    TYPE: ClassVar[str] = "auth"
    proof: str = ""

    def to_message(self) -> dict[str, Any]:
        return {"type": self.TYPE, "proof": self.proof}

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> Auth:
        proof = message.get("proof")  # hex digits: anything else is no proof at all
        return cls(proof if isinstance(proof, str) and proof.isascii() else "")


@dataclass(frozen=True)
class Authenticated(Event):
    TYPE: ClassVar[str] = "authenticated"


@dataclass(frozen=True)
class Test(Event):
    TYPE: ClassVar[str] = "test"
    spec: TestSpec = field(default_factory=TestSpec)

    def to_message(self) -> dict[str, Any]:
        return spec_message(self.spec)

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> Test:
        return cls(parse_spec(message))


@dataclass(frozen=True)
class Accepted(Event):
    TYPE: ClassVar[str] = "accepted"
    token: bytes = bytes(TOKEN_SIZE)

    def to_message(self) -> dict[str, Any]:
        return {"type": self.TYPE, "token": self.token.hex()}

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> Accepted:
        try:
            token = bytes.fromhex(str(message.get("token", "")))
        except ValueError:
            token = b""
        if len(token) != TOKEN_SIZE:
            raise ProtocolError("the server sent a malformed test token")
        return cls(token)


@dataclass(frozen=True)
class Start(Event):
    TYPE: ClassVar[str] = "start"


@dataclass(frozen=True)
class Finished(Event):
    TYPE: ClassVar[str] = "finished"


@dataclass(frozen=True)
class Results(Event):
    """One end's view of every stream, and its interval rows when they fit."""

    TYPE: ClassVar[str] = "results"
    streams: tuple[dict[str, Any], ...] = ()
    intervals: tuple[IntervalRow, ...] | None = None
    cpu: tuple[float, float] | None = None  # the end's user and system CPU, percent of a core
    congestion: str | None = None  # the congestion control its TCP streams ran

    @property
    def by_stream(self) -> dict[int, dict[str, Any]]:
        return {entry["stream"]: entry for entry in self.streams}

    def to_message(self) -> dict[str, Any]:
        """The interval rows go along while the message stays within MAX_MESSAGE, then the
        delay histograms' bins; the totals always do."""
        for with_bins, with_intervals in ((True, True), (True, False), (False, False)):
            message: dict[str, Any] = {"type": self.TYPE,
                                       "streams": _wire_streams(self.streams, with_bins)}
            if with_intervals and self.intervals is not None and \
                    len(self.intervals) <= MAX_PEER_INTERVALS:
                message["intervals"] = [list(row) for row in self.intervals]
            if self.cpu is not None:
                message["cpu"] = list(self.cpu)
            if self.congestion is not None:
                message["congestion"] = self.congestion
            if len(json.dumps(message, separators=(",", ":"))) <= MAX_MESSAGE - 64:
                break
        return message

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> Results:
        cpu = message.get("cpu")
        ours: tuple[float, float] | None = None
        if (isinstance(cpu, list) and len(cpu) == 2
                and all(is_number(v) and 0 <= v <= MAX_CPU_PERCENT for v in cpu)):
            ours = (float(cpu[0]), float(cpu[1]))
        congestion = message.get("congestion")
        return cls(tuple(parse_results(message).values()), tuple(parse_intervals(message)),
                   ours, congestion if is_congestion_name(congestion) else None)


def _wire_streams(streams: tuple[dict[str, Any], ...], with_bins: bool
                  ) -> list[dict[str, Any]]:
    """Result entries as JSON: delay accounts with their histograms' bins while those fit
    (MAX_PEER_HISTOGRAM_BINS in all), else with their moments and percentiles alone."""
    accounts = [entry[name] for entry in streams for name in DELAY_RESULT_FIELDS
                if isinstance(entry.get(name), DelayAccount)]
    with_bins = with_bins and sum(len(a.bins) for a in accounts) <= MAX_PEER_HISTOGRAM_BINS
    return [{name: value.to_result(with_bins) if isinstance(value, DelayAccount) else value
             for name, value in entry.items()} for entry in streams]


@dataclass(frozen=True)
class Bye(Event):
    TYPE: ClassVar[str] = "bye"


@dataclass(frozen=True)
class Error(Event):
    """A refusal or failure; its text is for the user."""

    TYPE: ClassVar[str] = "error"
    message: str = ""

    def to_message(self) -> dict[str, Any]:
        return {"type": self.TYPE, "message": self.message}

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> Error:
        return cls(_text(message.get("message")) or "the peer reported an error")


EVENTS: dict[str, type[Event]] = {kind.TYPE: kind for kind in (
    Hello, Welcome, Auth, Authenticated, Test, Accepted, Start, Finished, Results, Bye, Error)}


def decode(message: dict[str, Any]) -> Event:
    """The event a framed message carries; ProtocolError for an unknown type or a bad field."""
    kind = EVENTS.get(message["type"])
    if kind is None:
        raise ProtocolError(f"unknown message type '{message['type'][:40]}'")
    return kind.from_message(message)


def _text(value: object) -> str:
    return value[:MAX_TEXT] if isinstance(value, str) else ""
