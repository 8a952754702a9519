"""HTTP/1.1 on one connection (cleartext, or TLS whose client offered no h2): requests read
one after another (keep-alive), each head at most MAX_HEADER_BYTES, a POST's body read and
let go (Content-Length or chunked), the large object written until the client closes. A
request that cannot be read gets a 400 and the connection ends."""

from __future__ import annotations

from collections.abc import Callable

from . import endpoints
from .endpoints import Answer
from .wire import ZEROS, Closed, Wire

REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
           411: "Length Required", 413: "Content Too Large", 503: "Service Unavailable"}


class BadRequest(Exception):
    pass


class _Reader:
    """The connection's bytes, taken a head or a body at a time."""

    def __init__(self, wire: Wire) -> None:
        self.wire = wire
        self.buffer = b""

    def _more(self) -> None:
        data = self.wire.recv()
        if not data:
            raise Closed
        self.buffer += data

    def head(self) -> bytes:
        """The next request's head; while none of it has come, the connection is idle (a
        keep-alive connection the server may close for a new one's place)."""
        while b"\r\n\r\n" not in self.buffer:
            if len(self.buffer) > endpoints.MAX_HEADER_BYTES:
                raise BadRequest("a request head beyond "
                                 f"{endpoints.MAX_HEADER_BYTES} bytes")
            self.wire.idle(not self.buffer)
            self._more()
        self.wire.idle(False)
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        if len(head) > endpoints.MAX_HEADER_BYTES:
            raise BadRequest(f"a request head beyond {endpoints.MAX_HEADER_BYTES} bytes")
        return head

    def discard(self, size: int) -> None:
        """`size` bytes of body, read and let go."""
        while size > 0:
            if not self.buffer:
                self._more()
            taken = min(size, len(self.buffer))
            self.buffer = self.buffer[taken:]
            size -= taken

    def line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            if len(self.buffer) > endpoints.MAX_HEADER_BYTES:
                raise BadRequest("a chunk's size line too long")
            self._more()
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    def discard_chunked(self) -> None:
        while True:
            try:
                size = int(self.line().split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise BadRequest("a chunk size that is not hexadecimal") from None
            if size < 0:
                raise BadRequest("a negative chunk size")
            if size == 0:
                while self.line():  # trailers, up to the empty line
                    pass
                return
            self.discard(size)
            if self.line():
                raise BadRequest("a chunk not followed by its line end")


def serve_http1(wire: Wire, answer: Callable[[str, str, str | None, str], Answer],
                scheme: str) -> None:
    reader = _Reader(wire)
    while True:
        try:
            method, target, headers = _request(reader.head())
            length = headers.get("content-length")
            if "chunked" in headers.get("transfer-encoding", "").lower():
                reader.discard_chunked()
            elif length is not None:
                if not length.isdigit():
                    raise BadRequest("a Content-Length that is not a number")
                reader.discard(int(length))
            elif method == "POST":
                _write(wire, endpoints.refusal(411, "a POST needs a Content-Length or "
                                               "chunks"), method, close=True)
                return
        except BadRequest as error:
            _write(wire, endpoints.refusal(400, str(error)), "GET", close=True)
            return
        found = answer(method, target, headers.get("host"), scheme)
        close = headers.get("connection", "").lower() == "close"
        _write(wire, found, method, close)
        if close:
            return


def _request(head: bytes) -> tuple[str, str, dict[str, str]]:
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise BadRequest("a request head that is not ASCII") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest("not an HTTP/1.1 request line")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise BadRequest("a header line without a name and a colon")
        headers[name.lower()] = value.strip()
    return parts[0], parts[1], headers


def _write(wire: Wire, found: Answer, method: str, close: bool) -> None:
    lines = [f"HTTP/1.1 {found.status} {REASONS.get(found.status, 'OK')}",
             *(f"{name.title()}: {value}" for name, value in found.headers)]
    if close:
        lines.append("Connection: close")
    wire.send(("\r\n".join(lines) + "\r\n\r\n").encode())
    if method == "HEAD":
        return
    wire.send(found.body)
    left = found.stream
    while left > 0:  # the large object, until the client has had enough and closes
        wire.wait_writable()
        size = min(left, wire.record)
        wire.send(ZEROS[:size])
        left -= size
