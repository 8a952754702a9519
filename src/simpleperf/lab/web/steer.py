"""The page's requests that change a lab: a link's or node's change, flows, captures and
where its nodes are drawn. Each goes through the code the commands run (lifecycle.change,
the experiment runner's flow kinds, `lab capture`'s points), and the lab's journal says it
as it says a typed command. Every refusal is one line with its status."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from aiohttp import web

from ..net import lifecycle
from . import actions, captures, positions, running

T = TypeVar("T")


def refusal(status: int, why: str) -> web.Response:
    return web.Response(status=status, text=why.splitlines()[0] + "\n" if why else "\n",
                        content_type="text/plain")


async def off_loop(work: Callable[..., T], *arguments: Any) -> T:
    """Blocking work (namespaces, processes, files) in the default executor."""
    return await asyncio.get_running_loop().run_in_executor(None, work, *arguments)


async def body(request: web.Request, what: str) -> Any:
    try:
        return await request.json()
    except ValueError:
        raise web.HTTPBadRequest(text=f"a body that is not the JSON of {what}\n") from None


class Steering:
    """`labs()`: the labs that are up, each (model, view), as the console reads them."""

    def __init__(self, labs: Callable[[], dict[str, tuple[Any, dict[str, Any]]]]) -> None:
        self.labs = labs
        self.flows = running.PageFlows()
        self.captures = captures.PageCaptures()

    async def _model(self, request: web.Request) -> Any:
        lab = request.match_info["lab"]
        up = await off_loop(self.labs)
        if lab not in up:
            raise web.HTTPConflict(text=f"no lab named {lab} is up\n")
        return up[lab][0]

    async def change(self, request: web.Request) -> web.Response:
        """A link's or a node's change, through the code `lab link` and `lab node` use:
        JSON {"action": "down" | "up" | "set", "set": {property: text, ...}}."""
        asked = await body(request, "a change")
        try:
            wanted = actions.change_of(request.match_info["kind"], request.match_info["name"],
                                       asked)
        except actions.ActionError as error:
            return refusal(400, str(error))
        try:
            took, routing = await off_loop(lifecycle.change, request.match_info["lab"], wanted,
                                           "page")
        except lifecycle.LabError as error:
            return refusal(409, str(error))
        up = await off_loop(self.labs)
        if request.match_info["lab"] in up:  # the page's flows' paths, as routing left them
            await off_loop(self.flows.reroute, request.match_info["lab"],
                           up[request.match_info["lab"]][0])
        return web.json_response({"done": wanted.describe(), "seconds": took,
                                  "routing": routing})

    async def start_flow(self, request: web.Request) -> web.Response:
        """A flow across a lab: JSON as an experiment's flow table (kind, from, to, ...)."""
        asked = await body(request, "a flow")
        model = await self._model(request)
        try:
            started = await off_loop(self.flows.start, request.match_info["lab"], model,
                                     asked)
        except running.FlowError as error:
            return refusal(400, str(error))
        return web.json_response(started.view())

    async def stop_flow(self, request: web.Request) -> web.Response:
        number = request.match_info["number"]
        stopped = await off_loop(self.flows.stop, int(number), True) \
            if number.isdigit() else None
        if stopped is None or stopped.lab != request.match_info["lab"]:
            return refusal(404, f"no flow {number} in lab {request.match_info['lab']}")
        return web.json_response(stopped.view())

    async def start_capture(self, request: web.Request) -> web.Response:
        """JSON {"where": LINK or NODE:IFACE, "filter": BPF, "seconds": N}."""
        asked = await body(request, "a capture")
        model = await self._model(request)
        try:
            started = await off_loop(self.captures.start, request.match_info["lab"], model,
                                     asked)
        except (captures.PageCaptureError, captures.capture.CaptureError) as error:
            return refusal(400, str(error))
        return web.json_response(started.view())

    async def stop_capture(self, request: web.Request) -> web.Response:
        number = request.match_info["number"]
        stopped = await off_loop(self.captures.stop, int(number)) \
            if number.isdigit() else None
        if stopped is None or stopped.lab != request.match_info["lab"]:
            return refusal(404, f"no capture {number} in lab {request.match_info['lab']}")
        return web.json_response(stopped.view())

    async def download(self, request: web.Request) -> web.StreamResponse:
        """An ended capture's pcapng file."""
        number = request.match_info["number"]
        found = self.captures.download(request.match_info["lab"], int(number)) \
            if number.isdigit() else None
        if found is None:
            return refusal(404, f"no ended capture {number} in lab "
                                f"{request.match_info['lab']}")
        return web.FileResponse(found.path, headers={
            "Content-Type": "application/x-pcapng",
            "Content-Disposition": f"attachment; filename=\"{found.view()['file']}\""})

    async def place(self, request: web.Request) -> web.Response:
        """Where the page's nodes are drawn: JSON {node: {"x": X, "y": Y}}, kept with the
        lab."""
        asked = await body(request, "positions")
        model = await self._model(request)
        try:
            kept = await off_loop(positions.save, request.match_info["lab"], model, asked)
        except positions.PositionError as error:
            return refusal(400, str(error))
        return web.json_response({"kept": len(kept)})

    def live(self, lab: str) -> dict[str, Any]:
        """What the live updates carry of the page's own flows and captures."""
        return {"flows": self.flows.of(lab), "captures": self.captures.of(lab)}

    def stop_all(self) -> None:
        """The page's flows and captures end with the console (`lab down` would end them
        too)."""
        self.flows.stop_all()
        self.captures.stop_all()

    def routes(self, app: web.Application) -> None:
        lab = "/api/labs/{lab}"
        app.router.add_post(lab + "/{kind:links|nodes}/{name}", self.change)
        app.router.add_post(lab + "/flows", self.start_flow)
        app.router.add_post(lab + "/flows/{number}/stop", self.stop_flow)
        app.router.add_post(lab + "/captures", self.start_capture)
        app.router.add_post(lab + "/captures/{number}/stop", self.stop_capture)
        app.router.add_get(lab + "/captures/{number}/pcap", self.download)
        app.router.add_post(lab + "/positions", self.place)
