"""`simpleperf exporter`: a blackbox-style Prometheus exporter. Prometheus scrapes
/probe?target=HOST[:PORT]&module=NAME; the exporter runs that module's test against the
target within the scrape's timeout and answers with its figures; /metrics is the exporter's
own (probes by result, its process).

Throughput probes (tcp, udp, rpm) run one at a time per target, as perfSONAR schedules its
throughput tests: a probe that finds its target busy waits in a bounded queue (the wait is
reported) rather than measuring a path another probe is filling; rtt probes run beside them.
Every refusal is one line with its HTTP status.
"""

from __future__ import annotations

import argparse
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from ..command_line.cli import OneLineParser
from ..errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, UsageError
from . import modules
from . import probe as probing
from .targets import Allowed, Refused, Target, whole_number

DEFAULT_LISTEN = "127.0.0.1:9788"
DEFAULT_TIMEOUT = 30.0  # seconds a probe may take when the scrape does not say
TIMEOUT_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"
TIMEOUT_OFFSET = 0.5  # kept for the answer to reach Prometheus (blackbox_exporter's default)
DEFAULT_QUEUE = 8  # throughput probes that may wait for one target
DEFAULT_MAX_PROBES = 32  # probes at once, all targets
REQUEST_SECONDS = 10  # a client must send its whole request (line and headers) within this
MAX_TIMEOUT = 600.0


class Busy(Exception):
    """The target stayed busy: one line."""


class Turns:
    """Throughput probes take turns per target, in a queue of at most `queue` waiting."""

    def __init__(self, queue: int) -> None:
        self.queue = queue
        self._changed = threading.Condition()
        self._busy: set[tuple[str, int | None]] = set()
        self._waiting: dict[tuple[str, int | None], int] = {}

    @contextmanager
    def turn(self, key: tuple[str, int | None], start_by: float) -> Iterator[float]:
        """Wait for the target to be free, until the monotonic time `start_by` at the
        latest; yields the seconds waited. Busy when the queue is full or time runs out."""
        began = time.monotonic()
        with self._changed:
            if self._waiting.get(key, 0) >= self.queue:
                raise Busy(f"{self.queue} probes already wait for this target (--queue)")
            self._waiting[key] = self._waiting.get(key, 0) + 1
            try:
                while key in self._busy:
                    left = start_by - time.monotonic()
                    if left <= 0:
                        raise Busy(f"the target stayed busy with other throughput probes for "
                                   f"{time.monotonic() - began:.1f} s")
                    self._changed.wait(left)
                self._busy.add(key)
            finally:
                self._waiting[key] -= 1
                if not self._waiting[key]:
                    del self._waiting[key]
        try:
            yield time.monotonic() - began
        finally:
            with self._changed:
                self._busy.discard(key)
                self._changed.notify_all()


class Exporter:
    """What the handler needs: the modules, the allowed targets, turns, counters."""

    def __init__(self, known: dict[str, modules.Module], allowed: Allowed, queue: int,
                 max_probes: int) -> None:
        from prometheus_client import Counter

        self.modules, self.allowed = known, allowed
        self.turns = Turns(queue)
        self.clients = probing.Clients()
        self.slots = threading.BoundedSemaphore(max_probes)
        self.probes = Counter("simpleperf_exporter_probes", "probes run, by module and "
                              "result", ["module", "result"])
        self.refused = Counter("simpleperf_exporter_refused_requests", "requests answered "
                               "with an error status, by status", ["status"])

    def probe(self, module: modules.Module, target: Target, budget: float
              ) -> tuple[bytes, bool]:
        """Run one probe within `budget` seconds: its page and whether it succeeded."""
        from .exposition import page

        began = time.monotonic()
        readings, waited, success = probing.Readings(), 0.0, False
        needed = probing.seconds_needed(module)
        # Throughput probes take their turn; rtt probes go at once, beside them.
        turn = self.turns.turn((target.address, target.port), began + budget - needed) \
            if module.loads_the_path else nullcontext(0.0)
        try:
            with turn as waited:
                readings = self._measure(module, target, began + budget)
            success = True
        except (Busy, probing.ProbeFailed) as error:
            print(f"simpleperf exporter: probe {module.name} {target.host}: {error}",
                  file=sys.stderr, flush=True)
        self.probes.labels(module.name, "success" if success else "failure").inc()
        return page(readings, target.host, module.name, success,
                    time.monotonic() - began, waited + readings.server_wait), success

    def _measure(self, module: modules.Module, target: Target, deadline: float
                 ) -> probing.Readings:
        document = probing.run(module, target.address, target.port,
                               max(0.1, deadline - time.monotonic()), self.clients)
        return probing.readings(module, document)


class Handler(BaseHTTPRequestHandler):
    server_version = "simpleperf-exporter"
    timeout = REQUEST_SECONDS
    exporter: Exporter  # set on the class the server makes

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base's name
        pass  # probes that fail say so themselves; a line per scrape is noise

    def handle_one_request(self) -> None:
        """One request, its line and headers whole within REQUEST_SECONDS of the first
        wait for them (`timeout` bounds each read only: a byte every few seconds would
        hold a thread for ever): past it the connection is shut."""
        self._expiry = threading.Timer(REQUEST_SECONDS, self._expire)
        self._expiry.daemon = True
        self._expiry.start()
        try:
            super().handle_one_request()
        finally:
            self._expiry.cancel()

    def parse_request(self) -> bool:
        parsed = super().parse_request()
        self._expiry.cancel()  # the request is whole: what follows has its own limits
        return parsed

    def _expire(self) -> None:
        self.close_connection = True
        with suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        url = urlsplit(self.path)
        if url.path == "/metrics":
            from prometheus_client import REGISTRY, generate_latest

            self._answer(200, generate_latest(REGISTRY))
        elif url.path == "/probe":
            self._probe(url.query)
        elif url.path == "/":
            names = ", ".join(sorted(self.exporter.modules))
            self._answer(200, (f"simpleperf exporter\n/probe?target=HOST[:PORT]&module=NAME"
                               f" (modules: {names})\n/metrics: the exporter's own\n"
                               f"targets allowed: {self.exporter.allowed.describe()}\n"
                               ).encode(), "text/plain; charset=utf-8")
        else:
            self._refuse(404, f"no page {url.path[:100]}: /probe, /metrics")

    def _other(self) -> None:
        self._refuse(405, f"{self.command} is not served: GET /probe or /metrics")

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _other  # noqa: N815

    def _probe(self, query: str) -> None:
        try:
            fields = parse_qs(query, keep_blank_values=True, max_num_fields=8)
        except ValueError:
            return self._refuse(400, "too many query fields")
        for name in ("target", "module"):
            if len(fields.get(name, [])) != 1 or not fields[name][0]:
                return self._refuse(400, f"give one {name}: /probe?target=HOST[:PORT]&"
                                         "module=NAME")
        module = self.exporter.modules.get(fields["module"][0])
        if module is None:
            return self._refuse(400, f"unknown module {fields['module'][0][:64]!r} (modules: "
                                     f"{', '.join(sorted(self.exporter.modules))})")
        try:
            target = self.exporter.allowed.check(fields["target"][0])
        except Refused as refused:
            return self._refuse(refused.status, str(refused))
        budget = self._budget()
        if budget is None:
            return None
        if probing.seconds_needed(module) > budget:
            return self._refuse(400, f"module {module.name} needs "
                                     f"{probing.seconds_needed(module):g} s and the scrape allows "
                                     f"{budget:g} s: raise scrape_timeout or shorten the module")
        if not self.exporter.slots.acquire(blocking=False):
            return self._refuse(503, "too many probes at once (--max-probes)")
        try:
            body, _ = self.exporter.probe(module, target, budget)
        finally:
            self.exporter.slots.release()
        self._answer(200, body)
        return None

    def _budget(self) -> float | None:
        given = self.headers.get(TIMEOUT_HEADER)
        if given is None:
            return DEFAULT_TIMEOUT - TIMEOUT_OFFSET
        # digits and a point only: float() would take '1_0' as 10 and 'nan', 'inf', ' 5 '
        seconds = float(given) if re.fullmatch(r"[0-9]{1,6}(\.[0-9]{1,9})?", given) else -1.0
        if not 0 < seconds <= MAX_TIMEOUT:
            self._refuse(400, f"{TIMEOUT_HEADER}: {given[:32]!r} is not a number of seconds "
                              f"up to {MAX_TIMEOUT:g}")
            return None
        return seconds - TIMEOUT_OFFSET

    def _refuse(self, status: int, line: str) -> None:
        self.exporter.refused.labels(str(status)).inc()
        self._answer(status, (line + "\n").encode(), "text/plain; charset=utf-8")

    def _answer(self, status: int, body: bytes,
                kind: str = "text/plain; version=0.0.4; charset=utf-8") -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:  # Prometheus gave up waiting: nothing to answer
            self.close_connection = True


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="simpleperf exporter", description="A Prometheus exporter: "
                           "/probe?target=HOST[:PORT]&module=NAME runs a simpleperf test "
                           "and answers with its figures.")
    parser.add_argument("--listen", default=DEFAULT_LISTEN, metavar="[ADDR:]PORT",
                        help=f"where to serve (default {DEFAULT_LISTEN})")
    parser.add_argument("--config", metavar="FILE", help="a TOML file of modules "
                        "([modules.NAME]; the built-in ones without it)")
    parser.add_argument("--allow", action="append", metavar="NETWORK|NAME",
                        help="targets that may be probed, a network or a host name; again "
                             "for more (default: loopback only)")
    parser.add_argument("--queue", type=_count, default=DEFAULT_QUEUE, metavar="N",
                        help="throughput probes that may wait for one target (default "
                             f"{DEFAULT_QUEUE})")
    parser.add_argument("--max-probes", type=_count, default=DEFAULT_MAX_PROBES, metavar="N",
                        help=f"probes at once (default {DEFAULT_MAX_PROBES})")
    return parser


def _count(text: str) -> int:
    count = whole_number(text, 10000)
    if count is None or count < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to 10000, not "
                                         f"{text[:32]!r}")
    return count


def _address(text: str) -> tuple[str, int]:
    host, _, port_text = text.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    port = whole_number(port_text, 65535)
    if port is None:
        raise UsageError(f"--listen {text[:64]!r} is not [ADDR:]PORT")
    return host, port


def main(argv: list[str]) -> int:
    try:
        args = build_parser().parse_args(argv)
        known = modules.load(args.config)
        allowed = Allowed.parse(args.allow)
        host, port = _address(args.listen)
    except (UsageError, modules.ConfigError, ValueError) as error:
        print(f"simpleperf exporter: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        import prometheus_client  # noqa: F401 - said here, before anything listens
    except ImportError:
        print("simpleperf exporter: error: it needs prometheus_client (pip install "
              "'simpleperf[exporter]')", file=sys.stderr)
        return EXIT_FAILURE
    exporter = Exporter(known, allowed, args.queue, args.max_probes)
    handler = type("Handler", (Handler,), {"exporter": exporter})
    try:
        server = ThreadingHTTPServer((host, port), handler)
    except OSError as error:
        print(f"simpleperf exporter: error: cannot listen on {host}:{port}: "
              f"{error.strerror}", file=sys.stderr)
        return EXIT_FAILURE
    server.daemon_threads = True
    stop = threading.Event()

    def finish(signum, frame) -> None:
        stop.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, finish)
    signal.signal(signal.SIGINT, finish)
    print(f"simpleperf exporter on http://{host}:{server.server_address[1]}/probe "
          f"(modules: {', '.join(sorted(known))}; targets allowed: {allowed.describe()})",
          flush=True)
    try:
        server.serve_forever()
    finally:
        exporter.clients.close()  # probes under way: their clients end with the exporter
        server.server_close()
    return EXIT_OK
