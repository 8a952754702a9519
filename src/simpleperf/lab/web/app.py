"""The console's web server (aiohttp, the `web` extra): the page, the labs that are up as
JSON, and their links' counters live as server-sent events, a reading a second.

The lab runs as root, so the page is a root interface, safe by default: it listens on
loopback unless told, every request carries the token (the page's own in its query, the
page's requests in a header; compared in constant time), a Host header other than the
address it listens on is refused (DNS rebinding), live connections, headers and bodies are
limited, and every refusal is one line of text with its status."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from importlib import resources
from pathlib import Path
from typing import Any

from aiohttp import web

from ..net import build, lifecycle, ownership
from . import counters, positions, qdiscs, runs, steer, timeline, views

TOKEN_HEADER = "X-Simpleperf-Token"
LIVE_SECONDS = 1.0  # a reading of every lab's counters this often
MAX_LIVE = 16  # live connections at once
MAX_BODY = 64 * 1024  # bytes of a request's body
MAX_LINE, MAX_FIELD = 4096, 4096  # bytes of the request line and of a header
STATIC = {"console.js": "text/javascript", "console.css": "text/css",
          "vendor/cytoscape.min.js": "text/javascript",
          "vendor/uPlot.iife.min.js": "text/javascript", "vendor/uPlot.min.css": "text/css"}


class Console:
    """The labs as the page sees them: their models (rebuilt when a record changes) and
    the last two readings of their counters."""

    def __init__(self, token: str, hosts: set[str], results: Path) -> None:
        self.token, self.hosts = token, hosts
        self.models: dict[str, tuple[float, Any, dict[str, Any]]] = {}  # lab -> (mtime, ...)
        self.previous: views.Reading | None = None  # the last reading, every lab's
        self.live = b""  # the last update, as the live connections send it
        self.changed = asyncio.Condition()
        self.watchers = 0
        self.steering = steer.Steering(self.labs)
        self.timelines = timeline.Timelines()
        self.runs = runs.PastRuns(results)

    # -- the labs ------------------------------------------------------------------------

    def labs(self) -> dict[str, tuple[Any, dict[str, Any]]]:
        """Every lab that is up: its model and the page's view of it."""
        found = {}
        for record in ownership.all_records():
            if record.state != "up":
                continue
            try:
                stamp = record.path.stat().st_mtime
            except OSError:
                continue
            cached = self.models.get(record.lab)
            if cached is None or cached[0] != stamp:
                model = lifecycle.model_of(record)
                cached = (stamp, model, views.topology_view(
                    record.lab, model, record.shaper, list(record.links_down)))
                self.models[record.lab] = cached
            found[record.lab] = cached[1:]
        for gone in set(self.models) - set(found):
            del self.models[gone]
        return found

    async def sample(self) -> None:
        """Every LIVE_SECONDS: every lab's links, each way, since the last reading."""
        loop = asyncio.get_running_loop()
        while True:
            labs = await loop.run_in_executor(None, self.labs)
            models = {lab: model for lab, (model, _) in labs.items()}
            egress = {lab: build.wire_egress(model) for lab, model in models.items()}
            reading = await loop.run_in_executor(None, _reading, models, egress)
            timelines = await loop.run_in_executor(None, self._timelines, models)
            before, self.previous = self.previous, reading
            rates = {lab: {"links": [] if before is None else views.link_rates(
                               model, before, reading, egress[lab]),
                           "timeline": timelines[lab], **self.steering.live(lab)}
                     for lab, model in models.items()}
            update = json.dumps({"at": time.time(), "labs": rates})
            async with self.changed:
                self.live = f"data: {update}\n\n".encode()
                self.changed.notify_all()
            await asyncio.sleep(LIVE_SECONDS)

    def _timelines(self, models: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
        self.timelines.keep_only(set(models))
        return {lab: self.timelines.of(lab, model) for lab, model in models.items()}

    # -- the requests --------------------------------------------------------------------

    @web.middleware
    async def guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.headers.get("Host", "") not in self.hosts:
            return steer.refusal(403, "this console answers only at the address it listens on "
                            "(a Host header naming another: DNS rebinding?)")
        given = request.headers.get(TOKEN_HEADER, "")
        if request.method == "GET" and not given:  # the page's own link, and live updates
            given = request.query.get("token", "")
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            return steer.refusal(403, "a wrong or missing token: open the address `simpleperf "
                            "lab web` printed")
        return await handler(request)

    async def page(self, request: web.Request) -> web.Response:
        text = _static("index.html").decode().replace(
            "{{TOKEN}}", json.dumps(self.token)[1:-1])
        return web.Response(text=text, content_type="text/html",
                            headers={"Cache-Control": "no-store",
                                     "Content-Security-Policy": "default-src 'self'"})

    async def static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in STATIC:
            return steer.refusal(404, f"no such file: {name}")
        return web.Response(body=_static(name), content_type=STATIC[name])

    async def labs_json(self, request: web.Request) -> web.Response:
        labs = await steer.off_loop(self._with_positions)
        return web.json_response({"labs": labs})

    def _with_positions(self) -> list[dict[str, Any]]:
        return [{**view, "positions": positions.read(lab, model)}
                for lab, (model, view) in self.labs().items()]

    async def runs_json(self, request: web.Request) -> web.Response:
        return web.json_response({"results": str(self.runs.root),
                                  "runs": await steer.off_loop(self.runs.listing)})

    async def report(self, request: web.Request) -> web.StreamResponse:
        """A past run's report.html: self-contained (its figures inline), so it may show
        inline images and its own style, and nothing else."""
        found = await steer.off_loop(self.runs.report, request.match_info["run"])
        if found is None:
            return steer.refusal(404, f"no report of a run named {request.match_info['run']}")
        return web.FileResponse(found, headers={
            "Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store",
            "Content-Security-Policy": "default-src 'none'; img-src data:; "
                                       "style-src 'unsafe-inline'"})

    async def live_events(self, request: web.Request) -> web.StreamResponse:
        if self.watchers >= MAX_LIVE:
            return steer.refusal(503, f"{MAX_LIVE} pages are watching already")
        self.watchers += 1
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-store"})
        try:
            await response.prepare(request)
            while True:
                async with self.changed:
                    await self.changed.wait()
                    live = self.live
                await response.write(live)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.watchers -= 1
        return response


def _reading(models: dict[str, Any], egress: dict[str, dict[tuple[str, str], tuple[str, str]]]
             ) -> views.Reading:
    """Every lab's counters at one time: each node's namespace entered once for its
    interfaces' counters and its qdiscs, each lab's wire for its ports' qdiscs, and the own
    shaper's queues. Blocks: run it off the event loop."""
    nodes = sorted({node for model in models.values() for node in model.nodes})
    wires = sorted({space for ports in egress.values() for space, _ in ports.values()})
    interfaces: dict[str, dict[str, counters.Counters]] = {}
    queues: dict[str, dict[str, list[qdiscs.QdiscStats]]] = {}
    for name in nodes:
        both = counters.in_namespace(name, _node_counts)
        if both is not None:
            interfaces[name], queues[name] = both
    for name in wires:
        found = counters.in_namespace(name, qdiscs.dump)
        if found is not None:
            queues[name] = found
    roots = {name: {interface: root for interface, found in by_interface.items()
                    if (root := qdiscs.root_of(found)) is not None}
             for name, by_interface in queues.items()}
    own = {lab: counters.own_queues(lab, model) for lab, model in models.items()}
    return views.Reading(time.monotonic(), interfaces, roots, own)


def _node_counts() -> tuple[dict[str, counters.Counters], dict[str, list[qdiscs.QdiscStats]]]:
    return counters.interfaces(), qdiscs.dump()


def _static(name: str) -> bytes:
    return (resources.files(__package__) / "static" / name).read_bytes()


def make_app(console: Console) -> web.Application:
    app = web.Application(middlewares=[console.guard], client_max_size=MAX_BODY,
                          handler_args={"max_line_size": MAX_LINE,
                                        "max_field_size": MAX_FIELD})
    app.router.add_get("/", console.page)
    app.router.add_get("/static/{name:.+}", console.static)
    app.router.add_get("/api/labs", console.labs_json)
    app.router.add_get("/api/live", console.live_events)
    app.router.add_get("/api/runs", console.runs_json)
    app.router.add_get("/runs/{run}/report.html", console.report)
    console.steering.routes(app)

    async def start_sampling(app: web.Application) -> Any:
        task = asyncio.create_task(console.sample())
        yield
        task.cancel()
        await steer.off_loop(console.steering.stop_all)

    app.cleanup_ctx.append(start_sampling)
    return app


def hosts_for(listen: str, port: int) -> set[str]:
    """The Host headers a request may carry: the address listened on (loopback's names
    for loopback), with the port."""
    names = {listen, f"[{listen}]"} if ":" in listen else {listen}
    if listen in ("127.0.0.1", "::1", "localhost"):
        names |= {"127.0.0.1", "localhost", "[::1]"}
    return {f"{name}:{port}" for name in names}


class _OneLine(logging.Filter):
    """aiohttp's own log of a request it could not handle (a header too long, a request
    line that is not HTTP), which it answers 400 itself: one line on stderr, not a
    traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            record.msg = f"{record.getMessage()}: {record.exc_info[1]}".splitlines()[0]
            record.args, record.exc_info, record.exc_text = (), None, None
        return True


def _quiet_logs() -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("simpleperf lab web: %(message)s"))
    handler.addFilter(_OneLine())
    for name in ("aiohttp.server", "aiohttp.web"):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.propagate = False


def serve(listen: str, port: int, token: str, results: Path, say: Any) -> None:
    """Serve until Ctrl-C; `say` prints the address with its token first."""
    _quiet_logs()
    console = Console(token, hosts_for(listen, port), results)
    where = f"[{listen}]" if ":" in listen else listen
    say(f"simpleperf lab web: http://{where}:{port}/?token={token}")
    web.run_app(make_app(console), host=listen, port=port, print=None, access_log=None,
                handle_signals=True)

