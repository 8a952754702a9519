"""Data streams of a test: one thread each, moving bytes as fast as allowed and keeping
counters the interval sampler reads. Used by every driver, client and server alike; what
differs between TCP and UDP lives in tcp_stream.py and udp_stream.py, chosen once per
stream by its protocol."""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import ModuleType

from ..description.testspec import TestSpec
from ..errors import SimpleperfError
from ..transport import tcp
from . import pacing, tcp_stream, udp_stream
from .records import Stream

TRANSPORTS: dict[str, ModuleType] = {"tcp": tcp_stream, "udp": udp_stream}


def transport_of(stream: Stream) -> ModuleType:
    """The module that moves and accounts this stream's bytes: tcp_stream or udp_stream."""
    return TRANSPORTS[stream.protocol]


def run_stream(stream: Stream, spec: TestSpec, start: float, stop: threading.Event,
               send: Callable[..., None] | None = None) -> None:
    """Thread body: send or receive until the test's end, the peer's end, or `stop`.
    `send`: a sender other than the transport's (its arguments: the stream, the spec, the
    start, the deadline and `stop`)."""
    try:
        if spec.tos:
            tcp.set_tos(stream.sock, spec.tos)  # both ends, both directions: -S/--dscp
        if stream.sending:
            if spec.fq_rate:  # iperf3's --fq-rate: the socket's own pacing
                pacing.cap_rate(stream.sock, spec.fq_rate)
            deadline = None if spec.end is None else start + spec.end
            (send or transport_of(stream).send)(stream, spec, start, deadline, stop)
        else:
            transport_of(stream).receive(stream, spec, stop)
    except SimpleperfError as error:
        stream.error = str(error)
    except OSError as error:
        if not stop.is_set():
            stream.error = f"stream {stream.label}: " + (error.strerror or str(error)).lower()
    finally:
        stream.done.set()
