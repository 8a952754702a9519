"""The draft's four endpoints, as a table: what a request's method and path get, the
configuration document, and the limits every connection keeps. No sockets here: server.py
reads requests and writes what this says.

As Apple's server specification (network-quality/server's SERVER_SPEC.md) and
draft-ietf-ippm-responsiveness-09 ask: a configuration (JSON, with the draft's keys and the
legacy `*_https_*` ones that goresponsiveness and older clients read), a small object of
one byte, a large object the client never finishes (streamed, never held: its bytes are
one buffer of zeros sent again), and an upload sink that discards any body. No content
encoding is applied.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

CONFIG_PATH = "/.well-known/nq"
SMALL_PATH = "/small"
LARGE_PATH = "/large"
UPLOAD_PATH = "/upload"
# The large object: at least 8 GB, as the specification asks; more than any test moves in
# its 20 s below 400 Gbit/s.
LARGE_BYTES = 10**12
CHUNK_BYTES = 256 * 1024  # the zeros the large object is sent from, one buffer
# Limits of every HTTP connection, whatever its protocol
MAX_HEADER_BYTES = 16 * 1024  # a request's head (HTTP/1.1) or header list (HTTP/2)
MAX_STREAMS = 100  # HTTP/2 streams open at once on one connection
CONNECTION_SECONDS = 120.0  # a connection's life: a test takes 20 s at the most
STREAM_WINDOW = 4 * 1024 * 1024  # HTTP/2: what a client may upload before we say more
MAX_FRAME_BYTES = 1024 * 1024  # HTTP/2: the largest frame a client may send us (16 KB is
# the protocol's default and least; 16 MB its most)


@dataclass(frozen=True)
class Endpoint:
    """What a path answers: its name (in the server's lines), the method it takes, and
    the status, content type and body size of its answer (None: streamed, LARGE_BYTES;
    0 with `sink`: the request's body is read and discarded first)."""

    name: str
    method: str
    content_type: str
    body: int | None
    sink: bool = False


ENDPOINTS: dict[str, Endpoint] = {
    CONFIG_PATH: Endpoint("config", "GET", "application/json", 0),
    SMALL_PATH: Endpoint("small", "GET", "application/octet-stream", 1),
    LARGE_PATH: Endpoint("large", "GET", "application/octet-stream", None),
    UPLOAD_PATH: Endpoint("upload", "POST", "text/plain", 0, sink=True),
}


@dataclass(frozen=True)
class Answer:
    """The status and headers of an answer, and its body: `body` bytes as they are, or
    `stream` bytes of zeros sent as the window allows."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes = b""
    stream: int = 0


def answer(method: str, target: str, authority: str | None, scheme: str) -> tuple[
        Answer, Endpoint | None]:
    """What a request of `method` for `target` gets (HEAD: GET's headers), and the endpoint
    it reached. `authority` (the Host header, HTTP/2's :authority) names this server in the
    configuration's URLs, so a client that reached it under any name or address is sent
    back to the same one."""
    path = target.split("?", 1)[0]
    endpoint = ENDPOINTS.get(path)
    if endpoint is None:
        return _plain(404, "not found: this server answers " + ", ".join(ENDPOINTS)), None
    head = method == "HEAD" and endpoint.method == "GET"
    if method != endpoint.method and not head:
        return _plain(405, f"{path} takes {endpoint.method}",
                      (("allow", endpoint.method),)), None
    if endpoint.name == "config":
        if not authority or not _is_authority(authority):
            return _plain(400, "the request names no host (Host, :authority)"), None
        body = config_document(f"{scheme}://{authority}").encode()
    elif endpoint.body is None:
        body = b""
    else:
        body = b"x" * endpoint.body if endpoint.body and not endpoint.sink else b""
    if endpoint.sink:
        body = b"OK\n"
    size = LARGE_BYTES if endpoint.body is None else len(body)
    headers = (("content-type", endpoint.content_type), ("content-length", str(size)),
               ("cache-control", "no-store"))
    if head:
        return Answer(200, headers), endpoint
    return Answer(200, headers, body, LARGE_BYTES if endpoint.body is None else 0), endpoint


def config_document(base: str) -> str:
    """The configuration JSON for a server reached at `base` (scheme://host:port)."""
    urls = {"small_download_url": base + SMALL_PATH, "large_download_url": base + LARGE_PATH,
            "upload_url": base + UPLOAD_PATH}
    legacy = {"small_https_download_url": urls["small_download_url"],
              "large_https_download_url": urls["large_download_url"],
              "https_upload_url": urls["upload_url"]}
    return json.dumps({"version": 1, "test_endpoint": base.split("://", 1)[1].rsplit(":", 1)[0]
                       .strip("[]"), "urls": {**legacy, **urls}}, indent=2) + "\n"


def refusal(status: int, why: str, retry_after: int | None = None) -> Answer:
    """An answer that refuses (429, 503: a server's limits; 400 a bad request)."""
    extra = (("retry-after", str(retry_after)),) if retry_after is not None else ()
    return _plain(status, why, extra)


def _plain(status: int, text: str, extra: tuple[tuple[str, str], ...] = ()) -> Answer:
    body = (text + "\n").encode()
    return Answer(status, (("content-type", "text/plain"), ("content-length", str(len(body))),
                           *extra), body)


def _is_authority(text: str) -> bool:
    """A host[:port] fit to put in a URL: no spaces, slashes or the like."""
    return 0 < len(text) <= 255 and all(c.isalnum() or c in ".-:[]_" for c in text)
