"""Fakes for tests, benchmarks and replays of the agent (shipped so other packages can use them).

- :class:`ScriptedModel`, :func:`say`, :func:`call`: a deterministic model.
- :func:`memory_run`: a real ``Run`` on the in-memory store (``memory://``), evaluating with a task
  instance on a given runner (:class:`InstanceExecutor`); :func:`ledger_map`, :func:`executed` for assertions.
- :class:`StaticRunner`: a ``SandboxRunner`` that never executes code: it reads the literal a
  candidate's entry point returns (``return [1.0, 2.0]``) from the syntax tree. For harness tests and
  benchmarks that must exclude evaluation time; real evaluations go through the engine's sandbox.
- :class:`FakeAnthropicServer`: a local HTTP stand-in for the Messages API (``POST /v1/messages``).
- :class:`FakeOpenAIServer`: a local OpenAI-compatible endpoint (``POST /v1/chat/completions``,
  ``GET /v1/models``) answering with a function of the request body.
"""

from __future__ import annotations

import ast
import itertools
import json
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from reasearch.engine.protocol import RunOutcome, RunRequest, SandboxRunner
from reasearch.errors import ConfigError
from reasearch.evaluators.base import Task
from reasearch.evaluators.result import EvalResult, Status
from reasearch.models.messages import ModelReply
from reasearch.models.scripted import ScriptedModel, call, say
from reasearch.runs import Budget, Run, Unit, open_store
from reasearch.runs.executor import EvalRequest, Executor
from reasearch.runs.store import MEMORY_URL

__all__ = [
    "FakeAnthropicServer",
    "FakeOpenAIServer",
    "InstanceExecutor",
    "executed",
    "ledger_map",
    "memory_run",
    "ScriptedModel",
    "StaticRunner",
    "call",
    "messages_api_json",
    "say",
]


class InstanceExecutor(Executor):
    """Evaluates every request with one task *instance* on a given sandbox runner (tests and benchmarks).

    The runs layer rebuilds a task from its recorded class, which a class defined inside a test cannot
    be rebuilt from; this executor keeps the instance. It only runs evaluations: the step, budget and
    cache rules stay the real ``Run``'s.

    Attributes:
        submitted: how many evaluations really ran (cache hits and refusals never reach an executor).
    """

    def __init__(self, task: Task, runner: SandboxRunner | None = None) -> None:
        self.task = task
        self.runner = runner
        self.submitted = 0

    @property
    def parallelism(self) -> int:
        return 1

    def submit(self, request: EvalRequest) -> Future[EvalResult]:
        self.submitted += 1
        fut: Future[EvalResult] = Future()
        try:
            fut.set_result(self.task.evaluate(request.source, seed=request.seed, executor=self.runner,
                                              **dict(request.options)))
        except BaseException as exc:  # the engine's own failure, handed to the caller as the Run expects
            fut.set_exception(exc)
        return fut

    def close(self) -> None:
        """Nothing to release."""


def memory_run(task: Task, budget: Budget | Mapping[str, float] | None = None, *,
               runner: SandboxRunner | None = None, config: Mapping[str, Any] | None = None, seed: int = 0) -> Run:
    """A real :class:`~reasearch.runs.Run` on an in-memory store, evaluating with ``task`` on ``runner``.

    The same step, budget, cache and event rules as any run (one implementation); nothing persisted.
    """
    store = open_store(MEMORY_URL)
    budget = budget if isinstance(budget, Budget) else Budget.from_dict(dict(budget or {}))
    return Run.create(store, task=task, budget=budget, config=dict(config or {}), seed=seed,
                      executor=InstanceExecutor(task, runner))


def ledger_map(run: Run) -> dict[tuple[int, Unit, str], float]:
    """The run's ledger as ``{(step, unit, note): amount}`` (for assertions)."""
    return {(e.step, e.unit, e.note): e.amount for e in run.store.ledger(run.id)}


def executed(run: Run) -> int:
    """Evaluations that really ran for a :func:`memory_run` (not cached, not refused)."""
    ex = run.executor
    assert isinstance(ex, InstanceExecutor), "executed() counts the evaluations of a memory_run"
    return ex.submitted


class StaticRunner:
    """A ``SandboxRunner`` that executes nothing: it reads the literal the entry point returns.

    ``def run(): return [1.0, 2.0]`` gives ``[1.0, 2.0]``; anything it cannot read statically is a
    ``CRASH``. Only for tests and benchmarks of the harness (no candidate code ever runs).
    """

    mode = "static"

    def __init__(self) -> None:
        self.requests: list[RunRequest] = []

    def run(self, request: RunRequest) -> RunOutcome:
        self.requests.append(request)
        try:
            tree = ast.parse(request.source)
        except SyntaxError as exc:
            return RunOutcome(Status.CRASH, None, 0.0, 0.0, error=f"SyntaxError: {exc}", sandbox_mode=self.mode)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in tuple(request.entry):
                for stmt in ast.walk(node):
                    if isinstance(stmt, ast.Return) and stmt.value is not None:
                        try:
                            return RunOutcome(Status.OK, ast.literal_eval(stmt.value), 0.0, 0.0, sandbox_mode=self.mode)
                        except ValueError as exc:
                            return RunOutcome(Status.CRASH, None, 0.0, 0.0, error=f"not a literal: {exc}",
                                              sandbox_mode=self.mode)
        return RunOutcome(Status.CRASH, None, 0.0, 0.0, error=f"no function named {request.entry[0]!r}",
                          sandbox_mode=self.mode)

    def session(self, request: RunRequest) -> Any:
        raise ConfigError("StaticRunner has no sessions")


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


class FakeAnthropicServer:
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
        self._script = list(script)
        self._failures = list(fail_first)
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                status, payload = server._answer(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                if status != 200:
                    self.send_header("retry-after", "0")
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def _answer(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            if path.split("?")[0] != "/v1/messages":
                return 404, {"type": "error", "error": {"type": "not_found_error", "message": f"no route {path}"}}
            if not (headers.get("authorization", "").startswith("Bearer ") or headers.get("x-api-key")):
                return 401, {"type": "error", "error": {"type": "authentication_error", "message": "no key"}}
            self.requests.append(body)
            self.headers.append(headers)
            if self._failures:
                status = self._failures.pop(0)
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

    def __enter__(self) -> FakeAnthropicServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


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


class FakeOpenAIServer:
    """An OpenAI-compatible endpoint on 127.0.0.1 (``url`` ends in ``/v1``).

    Args:
        answer: request body (chat completion JSON) -> :class:`ModelReply`; called under a lock.
        fail_first: HTTP statuses to answer first (each with ``retry-after: 0``), to exercise retries.

    Attributes:
        requests: JSON bodies of the chat completions received, in order.
    """

    def __init__(self, answer: Any, *, fail_first: Iterable[int] = ()) -> None:
        self._answer = answer
        self._failures = list(fail_first)
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                if status != 200:
                    self.send_header("retry-after", "0")
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": "fake", "object": "model"}]})
                else:
                    self._send(404, {"error": f"no route {self.path}"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                if self.path != "/v1/chat/completions":
                    self._send(404, {"error": f"no route {self.path}"})
                    return
                with server._lock:
                    server.requests.append(body)
                    status = server._failures.pop(0) if server._failures else 0
                    reply = None if status else server._answer(body)
                if reply is None:
                    self._send(status, {"error": {"message": f"fake {status}"}})
                    return
                self._send(200, chat_completion_json(reply, model=body.get("model", "fake")))

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
