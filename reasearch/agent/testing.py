"""Fakes for tests, benchmarks and replays of the agent (shipped so other packages can use them).

- :class:`ScriptedModel`, :func:`say`, :func:`call`: a deterministic model.
- :class:`MemoryRun`: the Run API in memory (same step, budget and idempotency rules), for loop tests.
- :class:`StaticRunner`: a ``SandboxRunner`` that never executes code: it reads the literal a
  candidate's entry point returns (``return [1.0, 2.0]``) from the syntax tree. For harness tests and
  benchmarks that must exclude evaluation time; real evaluations go through the engine's sandbox.
- :class:`FakeAnthropicServer`: a local HTTP stand-in for the Messages API (``POST /v1/messages``).
"""

from __future__ import annotations

import ast
import itertools
import json
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from reasearch.agent.messages import ModelReply
from reasearch.agent.models.scripted import ScriptedModel, call, say
from reasearch.runs.ledger import Budget, Unit, refusal_message
from reasearch.errors import ConfigError, StoreError
from reasearch.evaluators.base import Task, candidate_sha256
from reasearch.engine.protocol import RunOutcome, RunRequest
from reasearch.evaluators.result import EvalResult, Status

__all__ = [
    "FakeAnthropicServer",
    "MemoryEvent",
    "MemoryRun",
    "ScriptedModel",
    "StaticRunner",
    "call",
    "messages_api_json",
    "say",
]


@dataclass(frozen=True, slots=True)
class MemoryEvent:
    """An event of a :class:`MemoryRun` (the fields of ``reasearch.engine.Event``)."""

    run_id: str
    step: int
    kind: str
    payload: Mapping[str, Any]
    ts: float


@dataclass
class MemoryRun:
    """The Run API in memory: same rules (idempotent steps, debits and events; REFUSED past a cap;
    deterministic tasks cached), nothing persisted.

    Args:
        task: the task.
        budget: caps per unit.
        executor: sandbox runner passed to ``task.evaluate`` (None: the engine's default pool).
        config: the driver's config (``config["agent"]`` holds the agent's).
    """

    task: Task
    budget: Budget = field(default_factory=Budget)
    executor: Any = None
    config: dict = field(default_factory=dict)
    seed: int = 0
    id: str = "memory-run"
    state: str = "running"
    final_candidate: str | None = None
    final_reason: str = ""
    candidates: dict[str, str] = field(default_factory=dict)
    evaluations: dict[int, tuple[str, EvalResult]] = field(default_factory=dict)
    ledger: dict[tuple[int, Unit, str], float] = field(default_factory=dict)
    event_log: list[MemoryEvent] = field(default_factory=list)
    runs_executed: int = 0

    @property
    def task_id(self) -> str:
        return self.task.spec.id

    def add_candidate(self, source: str, *, parent: str | None = None, note: str = "") -> str:
        cid = candidate_sha256(source)
        self.candidates.setdefault(cid, source)
        return cid

    def evaluate(self, source: str, *, step: int, parent: str | None = None, note: str = "",
                 seed: int | None = None, repeat: bool = False) -> EvalResult:
        cid = self.add_candidate(source, parent=parent, note=note)
        if step in self.evaluations:
            if self.evaluations[step][0] != cid:
                raise ConfigError(f"step {step} already evaluated another candidate")
            return self.evaluations[step][1]
        seed = self.seed if seed is None else seed
        # Like the store's cache: only outcomes that do not depend on machine load are served again.
        cached = next((r for c, r in self.evaluations.values()
                       if c == cid and not r.cached and r.status in (Status.OK, Status.INVALID)
                       and not r.metrics.get("repeat")),
                      None) if self.task.spec.deterministic and not repeat else None
        if cached is not None:
            result = cached.with_(cached=True)
        else:
            used = self.used().get(Unit.EVALUATIONS, 0.0)
            if not self.budget.allows(Unit.EVALUATIONS, used):
                cap = self.budget.cap(Unit.EVALUATIONS)
                assert cap is not None
                result = EvalResult.failure(Status.REFUSED, refusal_message(Unit.EVALUATIONS, used, cap))
            else:
                self.runs_executed += 1
                result = self.task.evaluate(source, seed=seed, executor=self.executor)
                if repeat:  # like Run.evaluate(repeat=True): charged, marked, never served again
                    result = result.with_(metrics={**dict(result.metrics), "repeat": True})
                self.ledger[(step, Unit.EVALUATIONS, "evaluate")] = 1.0
        self.evaluations[step] = (cid, result)
        return result

    def debit(self, unit: Unit, amount: float, *, step: int, note: str = "") -> None:
        self.ledger.setdefault((step, Unit(unit), note), float(amount))

    def log_event(self, step: int, kind: str, payload: Mapping[str, Any]) -> None:
        if any(e.step == step and e.kind == kind for e in self.event_log):
            return
        # A JSON round trip, as a store does: what is logged must be plain data.
        self.event_log.append(MemoryEvent(self.id, step, kind, json.loads(json.dumps(payload)), time.time()))

    def events(self, *, kind: str | None = None) -> list[MemoryEvent]:
        return [e for e in self.event_log if kind is None or e.kind == kind]

    def last_step(self) -> int:
        steps = [e.step for e in self.event_log] + list(self.evaluations) + [k[0] for k in self.ledger]
        return max(steps, default=-1)

    def used(self) -> dict[Unit, float]:
        out = {u: 0.0 for u in Unit}
        for (_, unit, _), amount in self.ledger.items():
            out[unit] += amount
        return out

    def remaining(self) -> dict[Unit, float | None]:
        used = self.used()
        return {u: self.budget.left(u, used[u]) for u in Unit}

    def best(self) -> tuple[str, EvalResult] | None:
        best = None
        for step in sorted(self.evaluations):
            cid, res = self.evaluations[step]
            if res.status is Status.OK and res.score is not None and (
                    best is None or self.task.spec.is_better(res.score, best[1].score)):
                best = (cid, res)
        return best

    def candidate_source(self, candidate_id: str) -> str:
        try:
            return self.candidates[candidate_id]
        except KeyError:
            raise StoreError(f"no candidate {candidate_id!r}") from None

    def finish(self, *, state: str = "finished", final_candidate: str | None = None, reason: str = "") -> None:
        if final_candidate is not None and final_candidate not in self.candidates:
            raise StoreError(f"final candidate {final_candidate!r} is not a candidate of this run")
        self.state, self.final_candidate, self.final_reason = str(state), final_candidate, reason


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
