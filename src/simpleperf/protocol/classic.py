"""The classic Simpleperf exchange: payload bytes, then `BYE`; the server answers `ACK: BYE`.

The receiver is a small state machine fed whatever each read returned. It copes with
`BYE` glued to the last data chunk or split across reads, and never counts it as payload.
"""

from __future__ import annotations

from ..errors import ProtocolError

FINISH = b"BYE"
ACK = b"ACK: BYE"
ACK_PREFIX = b"ACK"
CLASSIC_CHUNK = 1000  # what classic peers read and write; not visible on the wire


class ClassicReceiver:
    """Counts payload bytes of one classic connection and spots the finish message.

    The sender waits for our acknowledgement after `BYE`, so `BYE` is always the last thing
    on the stream: a stream whose most recent three bytes are `BYE` has finished.
    """

    __slots__ = ("received", "finished", "_tail")

    def __init__(self) -> None:
        self.received = 0  # every byte seen, including a trailing BYE
        self.finished = False
        self._tail = b""

    def feed(self, data: bytes | bytearray | memoryview) -> bool:
        """Account one read's bytes; returns True once the finish message has arrived."""
        if self.finished:
            raise ProtocolError("data after the finish message")
        size = len(data)
        self.received += size
        self._tail = (self._tail + bytes(data[-3:]))[-3:] if size < 3 else bytes(data[-3:])
        if self._tail == FINISH:
            self.finished = True
        return self.finished

    def account(self, count: int, tail: bytes) -> bool:
        """`count` bytes read elsewhere (the compiled read loop), after which the stream's
        last bytes are `tail`; returns True once the finish message has arrived."""
        if self.finished:
            raise ProtocolError("data after the finish message")
        self.received += count
        self._tail = tail
        self.finished = tail == FINISH
        return self.finished

    @property
    def tail(self) -> bytes:
        """The stream's last bytes so far, as many as the finish message has."""
        return self._tail

    @property
    def payload_bytes(self) -> int:
        return self.received - len(FINISH) if self.finished else self.received


def is_acknowledgement(reply: bytes) -> bool:
    """Classic servers answer `ACK: BYE`, `ACK:BYE` or just `ACK`: accept any of them."""
    return reply.startswith(ACK_PREFIX)

