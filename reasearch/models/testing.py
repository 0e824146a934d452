"""Model doubles for tests, benchmarks and demos, shipped so other packages can use them.

- :class:`ScriptedModel`, :func:`say`, :func:`call`: a deterministic model (re-exported from
  :mod:`reasearch.models.scripted`).
- :class:`FakeAnthropicServer`: a local HTTP stand-in for the Messages API (``POST /v1/messages``).
- :class:`FakeOpenAIServer`: a local OpenAI-compatible endpoint (``POST /v1/chat/completions``,
  ``GET /v1/models``) answering with a function of the request body.

Both servers share :class:`FakeJSONServer` (one way to read a JSON request and send a JSON answer), on
:class:`LocalHTTPServer` (a server on a free local port, in a thread, for a ``with`` block).
Trust boundary: they listen on 127.0.0.1 only and answer from the test's script; nothing is executed.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from reasearch.models.messages import ModelReply
from reasearch.models.scripted import ScriptedModel, call, say

__all__ = [
    "FakeAnthropicServer",
    "FakeJSONServer",
    "FakeOpenAIServer",
    "LocalHTTPServer",
    "ScriptedModel",
    "call",
    "chat_completion_json",
    "messages_api_json",
    "say",
]

Answer = tuple[int, Any]  # (HTTP status, JSON payload)


class LocalHTTPServer:
    """An HTTP server on 127.0.0.1 (a free port) that serves ``handler`` in a daemon thread while used as a
    context manager; ``url`` is its address."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


class FakeJSONServer(LocalHTTPServer):
    """A JSON-over-HTTP server on 127.0.0.1, serving in a daemon thread while used as a context manager.

    Subclasses answer :meth:`answer_post` (and :meth:`answer_get`, which by default is not supported).
    Every answer that is not a 200 carries ``retry-after: 0``, so a client's retries do not sleep.

    Args:
        fail_first: HTTP statuses to answer before the script starts (e.g. ``[529, 429]``), to
            exercise the client's retries.

    Attributes:
        requests: JSON bodies of the requests the subclass accepted, in order.
    """

    def __init__(self, *, fail_first: Iterable[int] = ()) -> None:
        self._failures = list(fail_first)
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _send(self, answer: Answer | None) -> None:
                if answer is None:
                    self.send_error(501, f"Unsupported method ({self.command!r})")
                    return
                status, payload = answer
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                if status != 200:
                    self.send_header("retry-after", "0")
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._send(server.answer_get(self.path))

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                self._send(server.answer_post(self.path, {k.lower(): v for k, v in self.headers.items()}, body))

        super().__init__(Handler)

    def answer_get(self, path: str) -> Answer | None:
        """The answer to ``GET path``; None: the method is not supported (501)."""
        return None

    def answer_post(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> Answer:
        """The answer to ``POST path`` with a JSON ``body`` (``headers`` with lower-case names)."""
        return 404, {"error": f"no route {path}"}

    def _next_failure(self) -> int:
        """The next status of ``fail_first`` (0 when they are used up); call it under the lock."""
        return self._failures.pop(0) if self._failures else 0


_msg_ids = itertools.count(1)


def messages_api_json(reply: ModelReply, *, model: str = "claude-fake") -> dict[str, Any]:
    """The Messages API body of a reply (what the real API sends)."""
    u = reply.usage
    return {
        "id": f"msg_{next(_msg_ids):08d}", "type": "message", "role": "assistant", "model": reply.model or model,
        "content": [dict(b) for b in reply.content], "stop_reason": reply.stop_reason.value, "stop_sequence": None,
        "usage": {"input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
                  "cache_read_input_tokens": u.cache_read_tokens, "cache_creation_input_tokens": u.cache_write_tokens},
    }


class FakeAnthropicServer(FakeJSONServer):
    """A Messages API on 127.0.0.1 answering ``POST /v1/messages`` from a script.

    Args:
        script: replies in order: :class:`ModelReply`, a Messages API dict, or a callable taking the
            request body and returning either.
        fail_first: HTTP statuses to answer before the script starts (e.g. ``[529, 429]``), to
            exercise the client's retries; each carries ``retry-after: 0``.

    Attributes:
        requests: JSON bodies received, in order. headers: their headers (lower-case names).
    """

    def __init__(self, script: Iterable[Any], *, fail_first: Iterable[int] = ()) -> None:
        super().__init__(fail_first=fail_first)
        self._script = list(script)
        self.headers: list[dict[str, str]] = []

    def answer_post(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> Answer:
        with self._lock:
            if path.split("?")[0] != "/v1/messages":
                return 404, {"type": "error", "error": {"type": "not_found_error", "message": f"no route {path}"}}
            if not (headers.get("authorization", "").startswith("Bearer ") or headers.get("x-api-key")):
                return 401, {"type": "error", "error": {"type": "authentication_error", "message": "no key"}}
            self.requests.append(body)
            self.headers.append(headers)
            if status := self._next_failure():
                kind = "overloaded_error" if status == 529 else "rate_limit_error" if status == 429 else "api_error"
                return status, {"type": "error", "error": {"type": kind, "message": f"fake {status}"}}
            if not self._script:
                return 500, {"type": "error", "error": {"type": "api_error", "message": "script used up"}}
            item = self._script.pop(0)
            if callable(item) and not isinstance(item, ModelReply):
                item = item(body)
            if isinstance(item, ModelReply):
                item = messages_api_json(item, model=body.get("model", "claude-fake"))
            return 200, item


def chat_completion_json(reply: ModelReply, *, model: str = "fake") -> dict[str, Any]:
    """The chat completion body of a reply (what an OpenAI-compatible server sends)."""
    text = "".join(b.get("text", "") for b in reply.content if b.get("type") == "text")
    calls = [{"id": b["id"], "type": "function", "function": {"name": b["name"], "arguments": json.dumps(b["input"])}}
             for b in reply.content if b.get("type") == "tool_use"]
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    return {"model": model, "choices": [{"finish_reason": "tool_calls" if calls else "stop", "message": message}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5}}


class FakeOpenAIServer(FakeJSONServer):
    """An OpenAI-compatible endpoint on 127.0.0.1 (``url`` ends in ``/v1``).

    Args:
        answer: request body (chat completion JSON) -> :class:`ModelReply`; called under a lock.
        fail_first: HTTP statuses to answer first (each with ``retry-after: 0``), to exercise retries.

    Attributes:
        requests: JSON bodies of the chat completions received, in order.
    """

    def __init__(self, answer: Callable[[dict[str, Any]], ModelReply], *, fail_first: Iterable[int] = ()) -> None:
        super().__init__(fail_first=fail_first)
        self._reply_to = answer

    @property
    def url(self) -> str:
        return f"{super().url}/v1"

    def answer_get(self, path: str) -> Answer:
        if path.rstrip("/") == "/v1/models":
            return 200, {"object": "list", "data": [{"id": "fake", "object": "model"}]}
        return 404, {"error": f"no route {path}"}

    def answer_post(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> Answer:
        if path != "/v1/chat/completions":
            return 404, {"error": f"no route {path}"}
        with self._lock:
            self.requests.append(body)
            status = self._next_failure()
            reply = None if status else self._reply_to(body)
        if reply is None:
            return status, {"error": {"message": f"fake {status}"}}
        return 200, chat_completion_json(reply, model=body.get("model", "fake"))
