"""--connect-only[=N] (iperf2's): TCP connects and nothing else, each timed from connect()
to its return (the three-way handshake as the client sees it), then closed. Against any TCP
server. N connects in all (iperf 2.1.8 makes 10 without a value; 0: until -t ends), in
bursts of -P at once, a burst every -i seconds (back to back without); a row per connect,
then iperf2's summary: min/avg/max/stdev, total and errors."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable

from .description.client_options import ClientOptions
from .errors import Interrupted, SimpleperfError
from .stats import summarise_rtt
from .transport import tcp

DEFAULT_CONNECTS = 10  # iperf 2.1.8's, without a value


class _Connect:
    """One connect's outcome: its ends and time, or why it failed."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.local: tuple[str, int] | None = None
        self.remote: tuple[str, int] | None = None
        self.ms: float | None = None
        self.error: str | None = None

    def run(self, options: ClientOptions, host: str) -> None:
        began = time.perf_counter()
        try:
            sock = tcp.connect(host, options.port, options.connect_timeout,
                               family=options.family, local=options.local,
                               tos=options.test.tos, mptcp=options.mptcp,
                               device=options.bind_dev, flowlabel=options.flowlabel)
        except SimpleperfError as error:
            self.error = str(error)
            return
        self.ms = (time.perf_counter() - began) * 1e3
        with contextlib.suppress(OSError):
            self.local, self.remote = sock.getsockname()[:2], sock.getpeername()[:2]
        sock.close()

    def row(self) -> str:
        if self.ms is None:
            return f"[{self.number:3d}] connect failed: {self.error}"
        ends = (f"{_end(self.local)} -> {_end(self.remote)}" if self.local and self.remote
                else "")
        return f"[{self.number:3d}] {ends}  connect {self.ms:.3f} ms"

    def entry(self) -> dict:
        if self.ms is None:
            return {"number": self.number, "error": self.error}
        return {"number": self.number, "local_host": self.local[0] if self.local else None,
                "local_port": self.local[1] if self.local else None,
                "connect_ms": round(self.ms, 6)}


def _end(address: tuple[str, int] | None) -> str:
    assert address is not None
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def run(options: ClientOptions, out: Callable[[str], None]) -> None:
    total = options.connect_only
    assert total is not None
    host = _numeric(options)
    if not options.json:
        many = f"{total} connects" if total else f"connects for {options.seconds:g} s"
        out(f"Connecting to {options.host}, TCP port {options.port}: {many} (the TCP "
            "three-way handshake only)")
    done: list[_Connect] = []
    began = time.monotonic()
    deadline = began + options.seconds
    every = options.interval or 0.0
    try:
        while (total == 0 or len(done) < total) and time.monotonic() < deadline:
            burst_began = time.monotonic()
            size = options.test.parallel if total == 0 else min(options.test.parallel,
                                                           total - len(done))
            burst = [_Connect(len(done) + i + 1) for i in range(size)]
            _burst(burst, options, host)
            done += burst
            if not options.json:
                for connect in burst:
                    out(connect.row())
            if every:
                time.sleep(max(0.0, min(every - (time.monotonic() - burst_began),
                                        deadline - time.monotonic())))
    except KeyboardInterrupt:
        raise Interrupted() from None
    finally:
        _report(options, done, time.monotonic() - began, out)


def _numeric(options: ClientOptions) -> str:
    """The server's address, resolved once: a connect's time holds no name lookup."""
    try:
        infos = socket.getaddrinfo(options.host, options.port, options.family,
                                   socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise SimpleperfError(f"cannot resolve {options.host}: {error.strerror}") from None
    return str(infos[0][4][0])


def _burst(burst: list[_Connect], options: ClientOptions, host: str) -> None:
    if len(burst) == 1:
        burst[0].run(options, host)
        return
    threads = [threading.Thread(target=c.run, args=(options, host), daemon=True)
               for c in burst]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _report(options: ClientOptions, done: list[_Connect], seconds: float,
            out: Callable[[str], None]) -> None:
    times = [c.ms for c in done if c.ms is not None]
    errors = len(done) - len(times)
    summary = summarise_rtt(times)
    if options.json:
        end: dict = {"total": len(done), "errors": errors, "seconds": round(seconds, 6)}
        if summary is not None:
            end.update(min_ms=summary.minimum, mean_ms=summary.average, max_ms=summary.maximum,
                       stdev_ms=summary.mdev, p50_ms=summary.p50, p99_ms=summary.p99)
        out(json.dumps({"start": {"connecting_to": {"host": options.host,
                                                    "port": options.port},
                                  "test_start": {"connect_only": options.connect_only}},
                        "connects": [c.entry() for c in done],
                        "end": {"connect_times": end}}, indent=2))
    elif summary is not None:
        out(f"connect times (min/avg/max/stdev) = {summary.minimum:.3f}/{summary.average:.3f}/"
            f"{summary.maximum:.3f}/{summary.mdev:.3f} ms (total/errors) = "
            f"{len(done)}/{errors}")
    if done and not times:
        raise SimpleperfError(f"no connect succeeded ({errors} tried): {done[-1].error}")
