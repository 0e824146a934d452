"""The dashboard's write path (``reasearch serve --steer``): steer a live run from its page.

Steering is off unless asked for. When on, four routes are added to the dashboard:

- ``GET /run/{id}/steer.json``: the run's interventions (:func:`reasearch.runs.steering.history`), their
  measured effect (:func:`~reasearch.runs.steering.effects`) and the candidates a person may pin or fork from
  (reading needs only what reading the dashboard needs);
- ``POST /steer/nonce``: a single-use nonce for the next write;
- ``POST /run/{id}/steer``: one intervention, ``{"verb": ..., "args": {...}}``, through
  :func:`~reasearch.runs.steering.submit`, with ``who`` = ``dashboard@CLIENT`` (and the name the person typed);
- ``POST /run/{id}/fork``: ``{"candidate": ..., "budget": {...}, "twin": bool}`` through
  :func:`~reasearch.runs.steering.fork`.

Every write must pass, in this order (:class:`SteerGate`): a Host the dashboard answers to (a loopback name
when bound to loopback: DNS rebinding is refused), no cross-site fetch metadata (``Sec-Fetch-Site`` other
than ``same-origin``/``none``) and an ``Origin``, when sent, equal to the page's own; ``Content-Type:
application/json`` and a body of at most :data:`MAX_BODY` bytes; the write token in the
``X-Reasearch-Steer-Token`` header (never in a URL, a cookie or a log line: a person who can read the dashboard,
with its read token or cookie, cannot steer without it); and a nonce from ``/steer/nonce`` that was never used
(a replayed request is refused). A custom header and a JSON body make every cross-origin write need a CORS
preflight, which this server never grants.
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from reasearch.errors import ConfigError, StoreError
from reasearch.reports._hosts import host_of, is_loopback
from reasearch.reports._sections import fmt_score
from reasearch.reports._status import store_error_status
from reasearch.runs import steering
from reasearch.runs.store import Store

__all__ = ["MAX_BODY", "NONCE_HEADER", "STEER_JS", "TOKEN_HEADER", "SteerGate", "check_steer_token", "panel_html",
           "steer_routes"]

TOKEN_HEADER = "x-reasearch-steer-token"
NONCE_HEADER = "x-reasearch-nonce"
MAX_BODY = 16 * 1024  # bytes of one write's JSON body
NONCE_TTL_S = 600.0
MAX_NONCES = 1024  # outstanding nonces kept; the oldest are dropped first
_MAX_CANDIDATES = 200


def check_steer_token(token: str) -> None:
    """Refuses a write token too short to resist guessing.

    Raises:
        ConfigError: what to do instead.
    """
    if len(token) < 16:
        raise ConfigError("the steering token must be at least 16 characters (leave it unset to have one made)")


class SteerGate:
    """The checks every write passes, and the single-use nonces.

    Args:
        token: the write token.
        hosts: the Host names writes are answered for; None: loopback names only (the default bind).
    """

    def __init__(self, token: str, hosts: set[str] | None = None) -> None:
        check_steer_token(token)
        self.token = token
        self.hosts = None if hosts is None else {h.lower() for h in hosts}
        self._nonces: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def issue(self) -> str:
        """A fresh nonce, good for one write within :data:`NONCE_TTL_S` seconds."""
        nonce = secrets.token_urlsafe(18)
        with self._lock:
            self._expire()
            self._nonces[nonce] = time.monotonic() + NONCE_TTL_S
            while len(self._nonces) > MAX_NONCES:
                self._nonces.popitem(last=False)
        return nonce

    def consume(self, nonce: str) -> bool:
        """True once for a nonce this gate issued and that has not expired; False ever after."""
        with self._lock:
            self._expire()
            return self._nonces.pop(nonce, None) is not None

    def _expire(self) -> None:
        now = time.monotonic()
        while self._nonces:
            first, until = next(iter(self._nonces.items()))
            if until > now:
                break
            self._nonces.pop(first)

    def refusal(self, headers: Mapping[str, str], scheme: str) -> tuple[int, str] | None:
        """(status, reason) when a write must be refused before its body is read and its nonce spent, else None."""
        host_header = headers.get("host", "")
        host = host_of(host_header).lower()
        if not (is_loopback(host) if self.hosts is None else (host in self.hosts or is_loopback(host))):
            return 400, "steering answers only to the Host the dashboard is bound to"
        site = headers.get("sec-fetch-site", "").lower()
        if site and site not in ("same-origin", "none"):
            return 403, f"cross-site write refused (Sec-Fetch-Site: {site[:40]})"
        origin = headers.get("origin")
        if origin is not None and origin != f"{scheme}://{host_header}":
            return 403, "cross-origin write refused (the Origin is not this dashboard)"
        ctype = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if ctype != "application/json":
            return 415, "a write is a JSON body (Content-Type: application/json)"
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            return 400, "a bad Content-Length"
        if length > MAX_BODY:
            return 413, f"the body is over {MAX_BODY} bytes"
        given = headers.get(TOKEN_HEADER, "")
        if not given or not hmac.compare_digest(given.encode(), self.token.encode()):
            return 401, f"steering needs the write token in the {TOKEN_HEADER} header (printed when serve started)"
        return None


def _history(store: Store, run_id: str) -> dict[str, Any]:
    record = store.get_run(run_id)
    effects = {e.intervention.seq: e for e in steering.effects(store, record.id)}
    rows = []
    for i in steering.history(store, record.id):
        e = effects.get(i.seq)
        rows.append({**i.to_dict(), "line": i.describe(),
                     "score_before": None if e is None else fmt_score(e.score_before),
                     "best_after": None if e is None else fmt_score(e.best_after),
                     "evaluations_after": None if e is None else e.evaluations_after,
                     "twin_after": None if e is None or e.twin_run is None else fmt_score(e.twin_after)})
    scored: list[tuple[float, str, str]] = []
    for ev in store.evaluations(record.id):
        if ev.result.score is not None:
            scored.append((float(ev.result.score), ev.candidate_id, fmt_score(ev.result.score)))
    sign = -1.0 if (record.task_spec is not None and record.task_spec.direction == "minimize") else 1.0
    best: dict[str, tuple[float, str]] = {}
    for score, cid, text in scored:
        if cid not in best or sign * score > sign * best[cid][0]:
            best[cid] = (score, text)
    candidates = sorted(best.items(), key=lambda kv: -sign * kv[1][0])[:_MAX_CANDIDATES]
    return {"run_id": record.id, "state": record.state.value, "verbs": list(steering.VERBS),
            "twin": bool(steering.fork_info(record.config).get("twin_of")), "interventions": rows,
            "candidates": [{"id": cid, "score": text} for cid, (_, text) in candidates]}


async def _read_json(request: Any) -> Any:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise ConfigError(f"the body is over {MAX_BODY} bytes")
    try:
        data = json.loads(body or b"null")
    except (ValueError, RecursionError):
        raise ConfigError("the body is not JSON") from None
    if not isinstance(data, dict):
        raise ConfigError("the body must be a JSON object")
    return data


def _who(request: Any, data: Mapping[str, Any]) -> str:
    client = request.client.host if request.client is not None else "unknown"
    name = data.get("who")
    if name is None or name == "":
        return f"dashboard@{client}"
    return f"{steering.clean_text(name, 'name', limit=64)} (dashboard@{client})"


def steer_routes(store: Store, gate: SteerGate) -> list[Any]:
    """The write path's routes (Starlette), to be mounted inside the dashboard's guard."""
    import anyio
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    def refused(request: Request) -> Response | None:
        headers = {k.lower(): v for k, v in request.headers.items()}
        why = gate.refusal(headers, request.url.scheme)
        if why is None:
            return None
        return JSONResponse({"error": why[1]}, status_code=why[0], headers={"Cache-Control": "no-store"})

    async def nonce(request: Request) -> Response:
        bad = refused(request)
        if bad is not None:
            return bad
        return JSONResponse({"nonce": gate.issue()}, headers={"Cache-Control": "no-store"})

    async def write(request: Request, action: Any) -> Response:
        bad = refused(request)
        if bad is not None:
            return bad
        if not gate.consume(request.headers.get(NONCE_HEADER, "")):
            return JSONResponse({"error": "a replayed or unknown nonce: ask /steer/nonce for a fresh one"},
                                status_code=409)
        try:
            data = await _read_json(request)
            out = await anyio.to_thread.run_sync(action, data, _who(request, data))
        except StoreError as exc:
            return JSONResponse({"error": str(exc)}, status_code=store_error_status(exc))
        except ConfigError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse(out, headers={"Cache-Control": "no-store"})

    async def steer(request: Request) -> Response:
        run_id = request.path_params["run_id"]

        def act(data: Mapping[str, Any], who: str) -> dict[str, Any]:
            verb, args = data.get("verb"), data.get("args") or {}
            if not isinstance(verb, str):
                raise ConfigError(f"give a verb, one of {', '.join(steering.VERBS)}")
            if not isinstance(args, dict):
                raise ConfigError("args must be a JSON object")
            i = steering.submit(store, run_id, verb, args, who=who)
            return {"intervention": i.to_dict(), "line": i.describe()}

        return await write(request, act)

    async def fork(request: Request) -> Response:
        run_id = request.path_params["run_id"]

        def act(data: Mapping[str, Any], who: str) -> dict[str, Any]:
            candidate, budget, twin = data.get("candidate"), data.get("budget"), data.get("twin", False)
            if not isinstance(candidate, str) or not candidate:
                raise ConfigError("give the candidate to fork from (its id or a unique prefix)")
            if not isinstance(budget, dict) or not budget:
                raise ConfigError("give the new run's budget, e.g. {\"evaluations\": 20}")
            if not isinstance(twin, bool):
                raise ConfigError("twin is true or false")
            new = steering.fork(store, run_id, candidate, budget, twin=twin)
            twin_id = steering.fork_info(store.get_run(new).config).get("twin")
            return {"run": new, "twin": twin_id, "resume": f"reasearch resume {new}", "by": who}

        return await write(request, act)

    async def state(request: Request) -> Response:
        try:
            data = await anyio.to_thread.run_sync(_history, store, request.path_params["run_id"])
        except StoreError as exc:
            return JSONResponse({"error": str(exc)}, status_code=store_error_status(exc))
        return JSONResponse(data, headers={"Cache-Control": "no-store"})

    async def steer_js(request: Request) -> Response:
        return Response(STEER_JS, media_type="text/javascript", headers={"Cache-Control": "no-store"})

    return [Route("/steer/nonce", nonce, methods=["POST"]), Route("/static/steer.js", steer_js),
            Route("/run/{run_id}/steer.json", state), Route("/run/{run_id}/steer", steer, methods=["POST"]),
            Route("/run/{run_id}/fork", fork, methods=["POST"])]


def panel_html() -> str:
    """The steering panel of a run page (its script is ``../static/steer.js``, allowed by the page's CSP)."""
    verbs = "".join(f"<option value='{v}'>{v}</option>" for v in steering.VERBS)
    return (
        "<section id='steer-panel'><h2>Steering</h2>"
        "<div class='small'>Every intervention is journaled with who and when, and reaches the optimizer at its next "
        "step. Paste the write token <code>serve --steer</code> printed (kept in this page only).</div>"
        "<div class='row'><label>token <input id='steer-token' type='password' autocomplete='off' size='28'></label>"
        "<label>name <input id='steer-who' size='14' maxlength='64'></label></div>"
        f"<div class='row'><label>verb <select id='steer-verb'>{verbs}</select></label>"
        "<label>candidate <select id='steer-candidate'></select></label>"
        "<label>ban # <input id='steer-ban' type='number' min='1' size='4'></label>"
        "<label>cap <select id='steer-unit'><option>evaluations</option><option>dollars</option>"
        "<option>wall_seconds</option><option>tokens</option></select>"
        "<input id='steer-value' type='number' min='0' step='any' size='8'></label></div>"
        "<textarea id='steer-text' rows='3' cols='80' maxlength='4096' "
        "placeholder='hint or ban text (what the optimizer reads next)'></textarea>"
        "<div class='row'><button id='steer-send' type='button'>send</button>"
        "<label>fork budget (evaluations) <input id='fork-evals' type='number' min='1' value='20' size='5'></label>"
        "<label><input id='fork-twin' type='checkbox'> with an unsteered twin</label>"
        "<button id='steer-fork' type='button'>fork from candidate</button></div>"
        "<div id='steer-status' class='small' role='status'></div>"
        "<table class='grid-table' id='steer-history'><tr><th>#</th><th>intervention</th><th>when</th>"
        "<th>applied at step</th><th>best before</th><th>best after</th><th>twin after</th></tr></table>"
        "<script src='../static/steer.js'></script></section>"
    )


# The panel's script. Everything a run or a person wrote is set as textContent, never parsed as HTML.
STEER_JS = r"""
(function () {
  "use strict";
  var $ = function (id) { return document.getElementById(id); };
  var base = location.pathname.replace(/\/+$/, "");
  var status = $("steer-status");
  function say(text, bad) { status.textContent = text; status.style.color = bad ? "#b00" : ""; }
  function cell(tr, text) { var td = document.createElement("td"); td.textContent = text == null ? "" : String(text);
                            tr.appendChild(td); }
  function load() {
    fetch(base + "/steer.json", {cache: "no-store", credentials: "same-origin"})
      .then(function (r) { return r.json(); })
      .then(function (d) {
        var table = $("steer-history");
        while (table.rows.length > 1) { table.deleteRow(1); }
        (d.interventions || []).forEach(function (i) {
          var tr = document.createElement("tr"); tr.className = "intervention"; tr.dataset.seq = i.seq;
          cell(tr, i.seq); cell(tr, i.line); cell(tr, i.at);
          cell(tr, i.applied_step == null ? "pending" : i.applied_step);
          cell(tr, i.score_before); cell(tr, i.best_after); cell(tr, i.twin_after);
          table.appendChild(tr);
        });
        var sel = $("steer-candidate"), keep = sel.value;
        while (sel.options.length) { sel.remove(0); }
        (d.candidates || []).forEach(function (c) {
          var o = document.createElement("option"); o.value = c.id;
          o.textContent = c.id.slice(0, 12) + "  " + c.score; sel.appendChild(o);
        });
        if (keep) { sel.value = keep; }
        document.body.dataset.interventions = String((d.interventions || []).length);
      })
      .catch(function (e) { say("steering: " + e, true); });
  }
  function post(path, body) {
    var token = $("steer-token").value;
    if (!token) { say("paste the write token first", true); return Promise.resolve(null); }
    var who = $("steer-who").value; if (who) { body.who = who; }
    var headers = {"Content-Type": "application/json", "X-Reasearch-Steer-Token": token};
    return fetch(location.pathname.replace(/\/run\/[^\/]+\/?$/, "") + "/steer/nonce",
                 {method: "POST", headers: headers, body: "{}", credentials: "same-origin"})
      .then(function (r) { return r.json().then(function (d) { if (!r.ok) { throw new Error(d.error); } return d; }); })
      .then(function (n) {
        var h = Object.assign({"X-Reasearch-Nonce": n.nonce}, headers);
        return fetch(base + path, {method: "POST", headers: h, body: JSON.stringify(body), credentials: "same-origin"});
      })
      .then(function (r) { return r.json().then(function (d) { if (!r.ok) { throw new Error(d.error); } return d; }); })
      .catch(function (e) { say(String(e.message || e), true); return null; });
  }
  $("steer-send").addEventListener("click", function () {
    var verb = $("steer-verb").value, args = {}, text = $("steer-text").value;
    if (verb === "pin") { args.candidate = $("steer-candidate").value; }
    else if (verb === "lift") { args.ban = Number($("steer-ban").value); }
    else if (verb === "cap") { args.unit = $("steer-unit").value; args.value = Number($("steer-value").value); }
    else if (text) { args.text = text; }
    post("/steer", {verb: verb, args: args}).then(function (d) {
      if (d) { say("sent: " + d.line); $("steer-text").value = ""; load(); }
    });
  });
  $("steer-fork").addEventListener("click", function () {
    post("/fork", {candidate: $("steer-candidate").value, budget: {evaluations: Number($("fork-evals").value)},
                   twin: $("fork-twin").checked}).then(function (d) {
      if (d) { say("forked: run " + d.run + (d.twin ? " and its twin " + d.twin : "") + "; start it: " + d.resume);
               load(); }
    });
  });
  load();
  setInterval(load, 3000);
})();
"""
