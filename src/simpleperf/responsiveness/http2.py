"""HTTP/2 on one connection (TLS with ALPN h2, or cleartext with the client's preface):
h2's state machine, fed what the wire reads; each request answered as endpoints.py says,
the large object's zeros sent as the flow-control windows open, uploads read and let go
(their window given back as they arrive), a self probe answered between the load's
frames. A peer that breaks HTTP/2's rules gets a GOAWAY and the connection ends."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

from . import endpoints
from .endpoints import Answer
from .wire import ZEROS, Wire

WAKE_SECONDS = 0.5
_ANSWERED = (h2.events.RequestReceived, h2.events.StreamEnded)  # what a response follows


class _Streams:
    """The connection's answers under way: large objects' bytes still to send, and the
    uploads whose answer waits for their body's end."""

    def __init__(self) -> None:
        self.large: dict[int, int] = {}
        self.uploads: dict[int, Answer] = {}


def serve_http2(wire: Wire, answer: Callable[[str, str, str | None, str], Answer],
                scheme: str) -> None:
    connection = h2.connection.H2Connection(h2.config.H2Configuration(
        client_side=False, header_encoding="utf-8"))
    connection.initiate_connection()
    # Our limits, in force once the client acknowledges them (h2 applies them then: the
    # header list's size to its decoder, the frame size to its reader)
    connection.update_settings({
        h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: endpoints.MAX_STREAMS,
        h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: endpoints.MAX_HEADER_BYTES,
        h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: endpoints.STREAM_WINDOW,
        # uploads in large frames: each frame is a turn of Python's, its bytes not
        h2.settings.SettingCodes.MAX_FRAME_SIZE: endpoints.MAX_FRAME_BYTES})
    # ... but frames up to that size are taken from the start: h2 checks a frame's length
    # against the limit in force when a read began, so a peer's acknowledgement and its
    # first large frame in one read would otherwise end the connection (FRAME_SIZE_ERROR)
    connection.max_inbound_frame_size = endpoints.MAX_FRAME_BYTES
    connection.increment_flow_control_window(4 * endpoints.STREAM_WINDOW)
    wire.send(connection.data_to_send())
    streams = _Streams()
    while True:
        wire.idle(not streams.large and not streams.uploads, closes_itself=True)
        if wire.drained.is_set() and wire.idle_since is not None:  # its place is wanted
            _go_away(wire, connection)
            return
        readable, writable = wire.ready(WAKE_SECONDS, write=_sending(connection, streams))
        if writable:  # a record of the large objects, as the unsent limit allows
            _send_large(connection, streams, wire.record)
            wire.send(connection.data_to_send())
        if not readable:
            continue
        data = wire.recv()
        if not data:
            return
        try:
            events = connection.receive_data(data)
        except h2.exceptions.ProtocolError:
            wire.send(connection.data_to_send())  # the GOAWAY h2 framed
            return
        # a request and its RST_STREAM can come in one read (mach resets the streams it
        # is done with), whose events h2 gives after all its frames: the stream is closed
        # by then, and answering it an error (its data is still acknowledged: the
        # connection's window)
        reset = {event.stream_id for event in events
                 if isinstance(event, h2.events.StreamReset)}
        for event in events:
            if isinstance(event, h2.events.ConnectionTerminated):
                return
            if not (isinstance(event, _ANSWERED) and event.stream_id in reset):
                _handle(connection, streams, event, answer, scheme)
        wire.send(connection.data_to_send())


def _go_away(wire: Wire, connection: h2.connection.H2Connection) -> None:
    """A GOAWAY: the client opens another connection for what it asks next (the server
    then closes this one as it closes every one, lingering: server.py)."""
    wire.idle(False)
    connection.close_connection()
    wire.send(connection.data_to_send())


def _handle(connection: h2.connection.H2Connection, streams: _Streams, event: h2.events.Event,
            answer: Callable[[str, str, str | None, str], Answer], scheme: str) -> None:
    if isinstance(event, h2.events.RequestReceived):
        headers: dict[str, str] = {}
        for name, value in event.headers or ():
            if isinstance(name, str) and isinstance(value, str):
                headers[name] = value
        found = answer(headers.get(":method", ""), headers.get(":path", ""),
                       headers.get(":authority") or headers.get("host"), scheme)
        sid = event.stream_id
        if found.status == 200 and headers.get(":method") == "POST" and not (
                event.stream_ended):
            streams.uploads[sid] = found  # answered once its body has come
            return
        _respond(connection, streams, sid, found)
    elif isinstance(event, h2.events.DataReceived):
        with contextlib.suppress(h2.exceptions.StreamClosedError):
            connection.acknowledge_received_data(event.flow_controlled_length,
                                                 event.stream_id)
    elif isinstance(event, h2.events.StreamEnded):
        waiting = streams.uploads.pop(event.stream_id, None)
        if waiting is not None:
            _respond(connection, streams, event.stream_id, waiting)
    elif isinstance(event, h2.events.StreamReset):
        streams.large.pop(event.stream_id, None)
        streams.uploads.pop(event.stream_id, None)


def _respond(connection: h2.connection.H2Connection, streams: _Streams, sid: int,
             found: Answer) -> None:
    headers = [(":status", str(found.status)), *found.headers]
    if found.stream:
        connection.send_headers(sid, headers)
        streams.large[sid] = found.stream
    elif found.body:
        connection.send_headers(sid, headers)
        connection.send_data(sid, found.body, end_stream=True)
    else:
        connection.send_headers(sid, headers, end_stream=True)


def _sending(connection: h2.connection.H2Connection, streams: _Streams) -> bool:
    """Whether a large object has bytes its window lets go."""
    return any(_window(connection, sid) > 0 for sid in streams.large)


def _send_large(connection: h2.connection.H2Connection, streams: _Streams, budget: int
                ) -> None:
    """The large objects' next bytes, as far as the windows allow (at most `budget` framed
    at once: the wire's record)."""
    framed = 0
    frame = connection.max_outbound_frame_size
    for sid in list(streams.large):
        while framed < budget:
            try:
                window = connection.local_flow_control_window(sid)
            except h2.exceptions.StreamClosedError:
                streams.large.pop(sid, None)
                break
            size = min(window, frame, streams.large[sid], len(ZEROS), budget - framed)
            if size <= 0:
                break
            left = streams.large[sid] - size
            connection.send_data(sid, ZEROS[:size].tobytes(), end_stream=left == 0)
            framed += size
            if left == 0:
                streams.large.pop(sid)
                break
            streams.large[sid] = left


def _window(connection: h2.connection.H2Connection, sid: int) -> int:
    try:
        return connection.local_flow_control_window(sid)
    except h2.exceptions.StreamClosedError:
        return 0
