"""A metering OpenAI-compatible endpoint on 127.0.0.1 that a peer optimizer (OpenEvolve) talks to.

One proxy per run: a random port and a random bearer token. ``POST /v1/chat/completions`` hands the
request to :meth:`MethodDriver.ask` (the run's model client, the run's and its fleet's caps reserved
before the call, the reply journaled before it is returned, debited as every method's calls are);
``GET /v1/models`` names the one model. ``POST /reasearch/evaluate`` takes a program file path from the
peer's evaluator and evaluates it through :meth:`MethodDriver.evaluate` (the run's sandbox, budget,
cache and store). A spent budget is an HTTP 400 for a model call (the peer counts a failed call) and a
failed evaluation (``combined_score`` 0.0) for a program; neither is ever made.

Requests are served at once, each on its own HTTP thread, so a peer's parallel workers do not queue
behind one another: the driver hands out steps under its lock and the run reserves every model call and
every evaluation against its caps atomically in the store, so N requests at once against a cap of k < N
get exactly k answers and the budget is never overspent. A model failure (``ModelError``) on any request
ends :meth:`MeteringProxy.serve` with that error (the run stays resumable); when serving ends, requests
still in flight are waited for and later ones are answered 503.

Trust boundary: only the holder of the token (the peer package this process started) is served; the
request body is untrusted JSON, parsed and size-capped here; a program file is read size-capped and
runs only in the task's sandbox.
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

from reasearch.errors import BudgetExceededError, ModelError
from reasearch.methods._driver import MethodDriver

__all__ = ["MeteringProxy"]

T = TypeVar("T")
MAX_BODY = 8 * 1024 * 1024
_MODEL = "reasearch-metered"


def _error(message: str, kind: str = "reasearch_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": kind}}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    return ""


def split_messages(messages: Any) -> tuple[str, str]:
    """(system, user text) of an OpenAI ``messages`` list; several turns become one user text, labelled."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list")
    system = "\n\n".join(
        _text(m.get("content")) for m in messages if isinstance(m, Mapping) and m.get("role") == "system"
    )
    turns = [m for m in messages if isinstance(m, Mapping) and m.get("role") != "system"]
    if not turns:
        raise ValueError("messages hold no user turn")
    if len(turns) == 1:
        return system, _text(turns[0].get("content"))
    return system, "\n\n".join(f"[{m.get('role')}]\n{_text(m.get('content'))}" for m in turns)


class MeteringProxy:
    """The per-run endpoint (see the module docstring); ``evaluate`` maps a program path to the peer's answer."""

    def __init__(self, driver: MethodDriver, *, evaluate: Callable[[str], dict[str, Any]] | None = None,
                 note: str = "proposal", on_refused: Callable[[], None] | None = None,
                 refuse: Callable[[], str | None] | None = None) -> None:
        self.driver = driver
        self.note = note
        self._refuse = refuse  # a reason to refuse a model call before it is made (e.g. no evaluation left)
        self._on_refused = on_refused  # called (on the request's thread) after each refused model call
        self.token = secrets.token_urlsafe(32)
        self._evaluate = evaluate
        self._cond = threading.Condition()
        self._open = False
        self._in_flight = 0
        self._ended = threading.Event()  # the peer's body returned, or a request hit a fatal error
        self._fatal: BaseException | None = None
        self.calls = 0
        self.refused = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.model_name = _MODEL

    # ------------------------------------------------------------ serving
    def serve(self, body: Callable[[], T]) -> T:
        """Runs ``body`` (the peer's loop) on a thread while the proxy answers requests; returns its value.

        Raises:
            ModelError: a model call failed on some request (the peer's process is the caller's to end).
        """
        out: dict[str, Any] = {}

        def target() -> None:
            try:
                out["value"] = body()
            except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
                out["error"] = exc
            finally:
                self._ended.set()

        http = threading.Thread(target=self._server.serve_forever, name="reasearch-proxy", daemon=True)
        with self._cond:
            self._open = True
        http.start()
        peer = threading.Thread(target=target, name="reasearch-peer", daemon=True)
        peer.start()
        try:
            self._ended.wait()
        finally:
            with self._cond:  # later requests are answered "over"
                self._open = False
            try:  # those in flight finish (their spend is recorded); a second Ctrl-C stops waiting for them
                with self._cond:
                    self._cond.wait_for(lambda: self._in_flight == 0)
            finally:
                self._server.shutdown()
                self._server.server_close()
        if self._fatal is not None:
            raise self._fatal
        peer.join()
        if "error" in out:
            raise out["error"]
        return out["value"]

    @property
    def in_flight(self) -> int:
        """Requests being served now."""
        with self._cond:
            return self._in_flight

    def _answer(self, fn: Callable[[], tuple[int, dict[str, Any]]]) -> tuple[int, dict[str, Any]]:
        """``fn``'s answer on this request's thread; 503 once serving has ended."""
        with self._cond:
            if not self._open:
                return 503, _error("the run is over")
            self._in_flight += 1
        try:
            return fn()
        except ModelError as exc:
            with self._cond:
                if self._fatal is None:
                    self._fatal = exc
            self._ended.set()
            return 502, _error("the model failed; the run stops (resumable)")
        except Exception as exc:  # noqa: BLE001 - the peer gets an answer; the run's side goes on
            return 500, _error(f"{type(exc).__name__}: {exc}"[:500])
        finally:
            with self._cond:
                self._in_flight -= 1
                self._cond.notify_all()

    # ------------------------------------------------------------ the work (on the request's thread)
    def complete(self, body: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        """One chat completion through the driver: journaled, reserved, debited; a spent budget is a 400."""
        try:
            system, user = split_messages(body.get("messages"))
        except ValueError as exc:
            return 400, _error(str(exc), "invalid_request_error")
        try:
            why = self._refuse() if self._refuse is not None else None
            if why is not None:
                raise BudgetExceededError(why)
            step, reply = self.driver.ask_reply(system, user, note=self.note)
        except BudgetExceededError as exc:
            with self._cond:
                self.refused += 1
            if self._on_refused is not None:
                self._on_refused()
            return 400, _error(f"budget spent: {exc}", "budget_exhausted")
        with self._cond:
            self.calls += 1
        text, usage = reply.text, reply.usage
        prompt = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        completion = usage.output_tokens
        return 200, {
            "id": f"reasearch-{self.driver.run.id}-{step}",
            "object": "chat.completion",
            "created": 0,
            "model": _MODEL,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def _send(self, code: int, data: Mapping[str, Any]) -> None:
                raw = json.dumps(data).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _authorized(self) -> bool:
                given = self.headers.get("Authorization", "")
                if hmac.compare_digest(given.encode(), f"Bearer {proxy.token}".encode()):
                    return True
                self._send(401, _error("a bearer token is required", "authentication_error"))
                return False

            def do_GET(self) -> None:
                if not self._authorized():
                    return
                if self.path.rstrip("/") in ("/v1/models", "/models"):
                    self._send(
                        200, {"object": "list", "data": [{"id": _MODEL, "object": "model", "owned_by": "reasearch"}]}
                    )
                else:
                    self._send(404, _error(f"no such path {self.path[:100]}"))

            def do_POST(self) -> None:
                if not self._authorized():
                    return
                size = int(self.headers.get("Content-Length") or 0)
                if not 0 < size <= MAX_BODY:
                    self._send(413, _error(f"a request body of 1..{MAX_BODY} bytes is required"))
                    return
                try:
                    body = json.loads(self.rfile.read(size))
                except ValueError:
                    self._send(400, _error("the body is not JSON", "invalid_request_error"))
                    return
                if not isinstance(body, dict):
                    self._send(400, _error("the body is not a JSON object", "invalid_request_error"))
                    return
                path = self.path.rstrip("/")
                if path in ("/v1/chat/completions", "/chat/completions"):
                    self._send(*proxy._answer(lambda: proxy.complete(body)))
                elif path == "/reasearch/evaluate" and proxy._evaluate is not None:
                    program = body.get("program_path")
                    if not isinstance(program, str):
                        self._send(400, _error("program_path must be a string"))
                        return
                    evaluate = proxy._evaluate
                    self._send(*proxy._answer(lambda: (200, evaluate(program))))
                else:
                    self._send(404, _error(f"no such path {self.path[:100]}"))

        return Handler
