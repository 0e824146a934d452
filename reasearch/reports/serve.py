"""``reasearch serve``: a read-only live dashboard over a run store (Starlette + uvicorn, the ``web`` extra).

Pages (the workbench, :mod:`reasearch.reports.workbench`): ``/`` lists the runs grouped by task, fleet or
method (normalized scores, sparklines, state, spend; filters as query parameters), ``/run/{id}`` is the
run's report with its running experiments, its lessons file and the steering slot, ``/fleet/{id}`` compares
a fleet's members as ``reasearch compare`` does. The index and run pages update in place as evaluations
land: the server polls the store (a few cheap queries every ``poll_interval_s``) and pushes an ``update``
server-sent event when a run changed; the page then fetches the new data. Nothing here writes to the store
unless steering is on: with ``--steer`` (:mod:`reasearch.reports.steer_web`) each run page carries a
steering panel instead of the slot and the app takes writes, each behind a write token of its own.

Access: the app binds 127.0.0.1 by default and then answers only requests whose ``Host`` is a loopback
name (a web page elsewhere cannot reach it through DNS rebinding). Binding any other address needs an
access token, which every request must then carry: ``Authorization: Bearer TOKEN``, or ``?token=TOKEN``
once (the answer sets an HttpOnly, SameSite=Strict cookie the browser sends from then on).
"""

from __future__ import annotations

import asyncio
import hmac
import html
import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote

from reasearch.errors import ConfigError, StoreError
from reasearch.reports._hosts import host_of, is_loopback
from reasearch.reports._model import load_run
from reasearch.reports._page import CSS, plotly_js, report_html, report_payload, script_json
from reasearch.reports._status import store_error_status
from reasearch.reports.workbench import (
    QueryError,
    index_html,
    parse_query,
    run_extra_sections,
    run_live_sections,
    workbench_rows,
)
from reasearch.runs.store import Store

if TYPE_CHECKING:
    from reasearch.reports.steer_web import SteerGate

__all__ = ["create_app", "check_bind", "host_of", "is_loopback", "serve"]

_COOKIE = "reasearch_token"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def check_bind(host: str, token: str | None) -> None:
    """Refuses a non-loopback address without an access token (and a token too short to resist guessing).

    Raises:
        ConfigError: what to do instead.
    """
    if token is not None and len(token) < 16:
        raise ConfigError("the access token must be at least 16 characters (e.g. `python -c 'import secrets; "
                          "print(secrets.token_urlsafe(24))'`)")
    if not is_loopback(host) and not token:
        raise ConfigError(f"refusing to serve on {host!r} without an access token: the dashboard shows candidate "
                          "sources and transcripts; pass --token (or $REASEARCH_SERVE_TOKEN), or bind 127.0.0.1")


class _Guard:
    """Pure ASGI middleware: the token check (when a token is set) or the loopback Host check (when not)."""

    def __init__(self, app: Callable[..., Awaitable[None]], token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if self.token is None:
            if not is_loopback(host_of(headers.get("host", ""))):
                await _deny(send, 400, "this dashboard answers only to a loopback Host (127.0.0.1, localhost)")
                return
            await self.app(scope, receive, send)
            return
        given: list[str] = []
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            given.append(auth[7:].strip())
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # a malformed cookie header is no token
            pass
        if _COOKIE in cookie:
            given.append(cookie[_COOKIE].value)
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        from_query = query.get("token", [])
        given += from_query
        if not any(hmac.compare_digest(g.encode(), self.token.encode()) for g in given):
            await _deny(send, 401, "an access token is required: ?token=TOKEN or Authorization: Bearer TOKEN")
            return
        if not from_query:
            await self.app(scope, receive, send)
            return

        async def send_with_cookie(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                value = f"{_COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/"
                message["headers"] = [*message.get("headers", []), (b"set-cookie", value.encode("latin-1"))]
            await send(message)

        await self.app(scope, receive, send_with_cookie)


async def _deny(send: Send, status: int, text: str) -> None:
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


_INDEX_JS = r"""
(function () {
  "use strict";
  var status = document.getElementById("live-status");
  var es = new EventSource("events");
  es.addEventListener("update", function () {
    fetch("runs.json" + window.location.search, {cache: "no-store", credentials: "same-origin"})
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.json(); })
      .then(function (d) { document.getElementById("runs-box").innerHTML = d.html;
                           status.textContent = "live: updated " + new Date().toLocaleTimeString(); })
      .catch(function (e) { status.textContent = "live: " + e; });
  });
  es.onerror = function () { status.textContent = "live: reconnecting"; };
})();
"""


_INDEX_CSS = """
#filters{margin:8px 0}#filters a,#filters b{margin-right:6px}
.active-filter{background:#eef;padding:0 4px;margin-right:6px}
section.group h2{font-size:15px}.group-name{font-family:ui-monospace,monospace}svg.sparkline{vertical-align:middle}
"""


def create_app(store: Store, *, token: str | None = None, poll_interval_s: float = 0.5,
               steer: SteerGate | None = None) -> Any:
    """The dashboard as an ASGI app (Starlette).

    Args:
        store: an open run store (read only unless ``steer`` is given).
        token: the access token every request must carry; None: no token, loopback Host only.
        poll_interval_s: how often the event streams look at the store for changes.
        steer: the write path's gate (``serve --steer``): adds the steering routes and each run page's panel
            (:mod:`reasearch.reports.steer_web`); None: read only.
    """
    try:
        from sse_starlette.sse import EventSourceResponse
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import HTMLResponse, PlainTextResponse, Response
        from starlette.routing import Route
    except ImportError:
        raise ConfigError("the dashboard needs the web extra: pip install 'reasearch[web]'") from None
    import anyio

    if steer is not None:
        from reasearch.reports.steer_web import panel_html, steer_routes
    row_cache: dict[str, tuple[Any, dict[str, Any]]] = {}  # run id -> (its last write, its row)
    fleet_specs: dict[str, Any] = {}  # fleet id -> its spec (never changes)

    def _csp(nonce: str) -> str:
        return (f"default-src 'none'; script-src 'nonce-{nonce}' 'self'; style-src 'unsafe-inline'; img-src data:; "
                "connect-src 'self'; base-uri 'none'; form-action 'none'")

    def _index(request: Request) -> tuple[str, list[dict[str, Any]]]:
        query = parse_query(request.query_params.multi_items())  # QueryError: the caller answers 400
        rows = workbench_rows(store, row_cache, fleet_specs)
        return index_html(rows, query), rows

    async def index(request: Request) -> Response:
        import secrets

        try:
            body, _ = await anyio.to_thread.run_sync(_index, request)
        except QueryError as exc:
            return PlainTextResponse(str(exc), status_code=400)
        nonce = secrets.token_urlsafe(16)
        page = (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>reasearch runs</title>"
                f"<style>{CSS}{_INDEX_CSS}</style></head><body><header><h1>runs in {html.escape(store.display_url)}"
                f"<span id='live-status'>live</span></h1></header><main><div id='runs-box'>{body}</div></main>"
                f"<script nonce='{nonce}'>{_INDEX_JS}</script></body></html>")
        return HTMLResponse(page, headers={"Content-Security-Policy": _csp(nonce), "Cache-Control": "no-store"})

    async def runs_json(request: Request) -> Response:
        try:
            body, rows = await anyio.to_thread.run_sync(_index, request)
        except QueryError as exc:
            return PlainTextResponse(str(exc), status_code=400)
        # script_json: no raw "<" of a hostile task id or method even in the JSON (a sniffing client sees no markup)
        return Response(script_json({"html": body, "runs": rows}).encode(), media_type="application/json",
                        headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"})

    def _view(run_id: str) -> Any:
        return load_run(store, run_id)

    async def run_page(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        try:
            view = await anyio.to_thread.run_sync(_view, run_id)
        except StoreError as exc:
            return PlainTextResponse(str(exc), status_code=store_error_status(exc))
        rid = quote(view.record.id)
        page = report_html(
            view,
            live_url=f"{rid}/events",
            data_url=f"{rid}/data.json",
            plotly_src="../static/plotly.min.js",
            home_url="../",
            extra=run_extra_sections(view, steering_slot=steer is None),
            panel=None if steer is None else panel_html(),
        )
        # the page sets its CSP in a meta tag with its own nonce; the header adds nothing looser
        return HTMLResponse(page, headers={"Cache-Control": "no-store"})

    async def run_data(request: Request) -> Response:
        try:
            view = await anyio.to_thread.run_sync(_view, request.path_params["run_id"])
        except StoreError as exc:
            return PlainTextResponse(str(exc), status_code=store_error_status(exc))
        payload = report_payload(view)
        payload["sections"].update(run_live_sections(view))
        return Response(script_json(payload).encode(), media_type="application/json",
                        headers={"Cache-Control": "no-store"})

    async def run_download(request: Request) -> Response:
        try:
            view = await anyio.to_thread.run_sync(_view, request.path_params["run_id"])
        except StoreError as exc:
            return PlainTextResponse(str(exc), status_code=store_error_status(exc))
        return HTMLResponse(report_html(view), headers={
            "Content-Disposition": f'attachment; filename="report-{view.record.id}.html"'})

    plotly_bytes: list[bytes] = []

    async def plotly_static(request: Request) -> Response:
        if not plotly_bytes:
            plotly_bytes.append(plotly_js().encode())
        return Response(plotly_bytes[0], media_type="text/javascript", headers={"Cache-Control": "max-age=3600"})

    def _signature(run_id: str | None) -> Any:
        if run_id is None:
            return [(r.id, r.state.value, r.updated_at) for r in store.list_runs()]
        rec = store.get_run(run_id)
        return (rec.state.value, rec.updated_at, store.last_step(rec.id))

    def _stream(request: Request, run_id: str | None) -> Any:
        async def events() -> Any:
            last = None
            while True:
                if await request.is_disconnected():
                    return
                try:
                    sig = await anyio.to_thread.run_sync(_signature, run_id)
                except StoreError as exc:
                    yield {"event": "error", "data": str(exc)}
                    return
                if sig != last:
                    last = sig
                    yield {"event": "update", "data": json.dumps({"at": time.time()})}
                await asyncio.sleep(poll_interval_s)

        return EventSourceResponse(events(), ping=15, headers={"Cache-Control": "no-store"})

    async def fleet_page(request: Request) -> Response:
        from reasearch.errors import ReasearchError
        from reasearch.reports.workbench import fleet_page_html

        try:
            page = await anyio.to_thread.run_sync(
                lambda: fleet_page_html(store, request.path_params["fleet_id"], plotly_src="../static/plotly.min.js"))
        except StoreError as exc:
            return PlainTextResponse(str(exc), status_code=store_error_status(exc))
        except ReasearchError as exc:  # a member's task cannot be built here: one line
            return PlainTextResponse(f"cannot compare this fleet here: {exc}", status_code=500)
        return HTMLResponse(page, headers={"Cache-Control": "no-store"})

    async def index_events(request: Request) -> Response:
        return _stream(request, None)

    async def run_events(request: Request) -> Response:
        try:
            rid = (await anyio.to_thread.run_sync(store.get_run, request.path_params["run_id"])).id
        except StoreError as exc:
            return PlainTextResponse(str(exc), status_code=store_error_status(exc))
        return _stream(request, rid)

    routes = [
        Route("/", index), Route("/runs.json", runs_json), Route("/events", index_events),
        Route("/static/plotly.min.js", plotly_static),
        Route("/run/{run_id}", run_page), Route("/run/{run_id}/data.json", run_data),
        Route("/run/{run_id}/events", run_events), Route("/run/{run_id}/report.html", run_download),
        Route("/fleet/{fleet_id}", fleet_page),
    ]
    if steer is not None:
        routes += steer_routes(store, steer)
    app = Starlette(routes=routes)
    return _Guard(app, token)


def serve(store: Store, *, host: str = "127.0.0.1", port: int = 8765, token: str | None = None,
          poll_interval_s: float = 0.5, log_level: str = "warning", steer_token: str | None = None) -> None:
    """Serves the dashboard until interrupted (uvicorn).

    Args:
        steer_token: the write token of ``--steer`` (None: read only). Writes are answered for the bound
            host (and loopback names) only; the access log stays off, so no request line is ever logged.

    Raises:
        ConfigError: a non-loopback ``host`` without a token, or the web extra is missing.
    """
    check_bind(host, token)
    try:
        import uvicorn
    except ImportError:
        raise ConfigError("the dashboard needs the web extra: pip install 'reasearch[web]'") from None
    gate = None
    if steer_token is not None:
        from reasearch.reports.steer_web import SteerGate

        gate = SteerGate(steer_token, None if is_loopback(host) else {host.strip("[]")})
    app = create_app(store, token=token, poll_interval_s=poll_interval_s, steer=gate)
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)
