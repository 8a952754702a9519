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
from typing import Any

from aiohttp import web

from ..net import build, lifecycle, ownership
from . import actions, counters, qdiscs, running, views

TOKEN_HEADER = "X-Simpleperf-Token"
LIVE_SECONDS = 1.0  # a reading of every lab's counters this often
MAX_LIVE = 16  # live connections at once
MAX_BODY = 64 * 1024  # bytes of a request's body
MAX_LINE, MAX_FIELD = 4096, 4096  # bytes of the request line and of a header
STATIC = {"console.js": "text/javascript", "console.css": "text/css",
          "vendor/cytoscape.min.js": "text/javascript",
          "vendor/uPlot.iife.min.js": "text/javascript", "vendor/uPlot.min.css": "text/css"}


def _refusal(status: int, why: str) -> web.Response:
    return web.Response(status=status, text=why + "\n", content_type="text/plain")


class Console:
    """The labs as the page sees them: their models (rebuilt when a record changes) and
    the last two readings of their counters."""

    def __init__(self, token: str, hosts: set[str]) -> None:
        self.token, self.hosts = token, hosts
        self.models: dict[str, tuple[float, Any, dict[str, Any]]] = {}  # lab -> (mtime, ...)
        self.previous: views.Reading | None = None  # the last reading, every lab's
        self.live: dict[str, Any] = {"at": None, "labs": {}}
        self.changed = asyncio.Condition()
        self.watchers = 0
        self.flows = running.PageFlows()

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
            before, self.previous = self.previous, reading
            rates = {lab: {"links": [] if before is None else views.link_rates(
                               model, before, reading, egress[lab]),
                           "flows": self.flows.of(lab)} for lab, model in models.items()}
            async with self.changed:
                self.live = {"at": time.time(), "labs": rates}
                self.changed.notify_all()
            await asyncio.sleep(LIVE_SECONDS)

    # -- the requests --------------------------------------------------------------------

    @web.middleware
    async def guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.headers.get("Host", "") not in self.hosts:
            return _refusal(403, "this console answers only at the address it listens on "
                            "(a Host header naming another: DNS rebinding?)")
        given = request.headers.get(TOKEN_HEADER, "")
        if request.method == "GET" and not given:  # the page's own link, and live updates
            given = request.query.get("token", "")
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            return _refusal(403, "a wrong or missing token: open the address `simpleperf "
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
            return _refusal(404, f"no such file: {name}")
        return web.Response(body=_static(name), content_type=STATIC[name])

    async def labs_json(self, request: web.Request) -> web.Response:
        labs = await asyncio.get_running_loop().run_in_executor(None, self.labs)
        return web.json_response({"labs": [view for _, view in labs.values()]})

    async def live_events(self, request: web.Request) -> web.StreamResponse:
        if self.watchers >= MAX_LIVE:
            return _refusal(503, f"{MAX_LIVE} pages are watching already")
        self.watchers += 1
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-store"})
        try:
            await response.prepare(request)
            while True:
                async with self.changed:
                    await self.changed.wait()
                    live = self.live
                await response.write(f"data: {json.dumps(live)}\n\n".encode())
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.watchers -= 1
        return response


    async def change(self, request: web.Request) -> web.Response:
        """A link's or a node's change, through the code `lab link` and `lab node` use:
        JSON {"action": "down" | "up" | "set", "set": {property: text, ...}}."""
        try:
            asked = await request.json()
            wanted = actions.change_of(request.match_info["kind"], request.match_info["name"],
                                       asked)
        except (ValueError, actions.ActionError) as error:
            return _refusal(400, str(error).splitlines()[0] if str(error) else
                            "a body that is not the JSON of a change")
        lab = request.match_info["lab"]
        try:
            took, routing = await asyncio.get_running_loop().run_in_executor(
                None, lifecycle.change, lab, wanted)
        except lifecycle.LabError as error:
            return _refusal(409, str(error))
        return web.json_response({"done": wanted.describe(), "seconds": took,
                                  "routing": routing})


    async def start_flow(self, request: web.Request) -> web.Response:
        """A flow across a lab: JSON as an experiment's flow table (kind, from, to, ...)."""
        lab = request.match_info["lab"]
        try:
            asked = await request.json()
        except ValueError:
            return _refusal(400, "a body that is not the JSON of a flow")
        labs = await asyncio.get_running_loop().run_in_executor(None, self.labs)
        if lab not in labs:
            return _refusal(409, f"no lab named {lab} is up")
        try:
            started = await asyncio.get_running_loop().run_in_executor(
                None, self.flows.start, lab, labs[lab][0], asked)
        except running.FlowError as error:
            return _refusal(400, str(error).splitlines()[0])
        return web.json_response(started.view())

    async def stop_flow(self, request: web.Request) -> web.Response:
        number = request.match_info["number"]
        stopped = await asyncio.get_running_loop().run_in_executor(
            None, self.flows.stop, int(number), True) if number.isdigit() else None
        if stopped is None or stopped.lab != request.match_info["lab"]:
            return _refusal(404, f"no flow {number} in lab {request.match_info['lab']}")
        return web.json_response(stopped.view())


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
    app.router.add_post("/api/labs/{lab}/{kind:links|nodes}/{name}", console.change)
    app.router.add_post("/api/labs/{lab}/flows", console.start_flow)
    app.router.add_post("/api/labs/{lab}/flows/{number}/stop", console.stop_flow)

    async def start_sampling(app: web.Application) -> Any:
        task = asyncio.create_task(console.sample())
        yield
        task.cancel()
        # the page's flows end with the console (lab down would end them too)
        await asyncio.get_running_loop().run_in_executor(None, console.flows.stop_all)

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


def serve(listen: str, port: int, token: str, say: Any) -> None:
    """Serve until Ctrl-C; `say` prints the address with its token first."""
    _quiet_logs()
    console = Console(token, hosts_for(listen, port))
    where = f"[{listen}]" if ":" in listen else listen
    say(f"simpleperf lab web: http://{where}:{port}/?token={token}")
    web.run_app(make_app(console), host=listen, port=port, print=None, access_log=None,
                handle_signals=True)

