"""The MCP driver: an MCP client (Claude Code, any agent) is the optimizer of a run, the harness stays trusted.

The driver is an :class:`~reasearch.agent.loop.Agent` without a model: the same workspace, the same
typed tools (program, control and whatever domain toolset the task has: experiments, prompts), the
same snapshot, the same ``Run`` (sandbox, cache, budget ledger, store). Where the agent loop asks a
model for the next tool call, the driver takes it from the client. Every call is one step of the run:
``mcp_call`` is written before the tool runs and ``mcp_result`` before the answer goes back, so
``reasearch show``/``export`` see an MCP run like any other, and a server started again with
``--run RUN`` continues where the last one stopped, re-spending nothing (steps, evaluations, the
cache and the ledger are all in the store).

Tools that need the harness's own model (``edit_code``) or the loop's context (``compact``) are not
offered: over MCP the client is the model and owns its context.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reasearch.agent.config import ROLES, AgentConfig
from reasearch.agent.loop import LESSONS_FILE, TASK_FILE, Agent
from reasearch.agent.snapshot import EvalRecord, fmt_score
from reasearch.agent.tools.schema import Tool, ToolError, ToolOutput, tool, tools_of
from reasearch.agent.tools.workspace import ExecFn
from reasearch.ast_lock import format_exc as format_exc_locked
from reasearch.errors import ConfigError
from reasearch.evaluators.result import Status
from reasearch.models import ModelSpec
from reasearch.models.messages import ModelReply, ModelRequest
from reasearch.runs import Budget, Run, RunState, Store
from reasearch.runs.events import EventKind
from reasearch.runs.run import driver_alive

__all__ = ["HIDDEN_TOOLS", "McpCallResult", "McpDriver", "McpResource", "open_mcp_run", "start_mcp_run"]

HIDDEN_TOOLS = frozenset({"edit_code", "compact"})  # need the harness's model or the loop's context
_MCP_MODEL = "mcp-client"
_CALL_KINDS = (EventKind.MCP_CALL, EventKind.MCP_RESULT)


class _ClientIsTheModel:
    """Stands for every model role: over MCP the client is the model, the server calls none."""

    name = _MCP_MODEL

    def complete(self, request: ModelRequest) -> ModelReply:
        raise ToolError("this tool needs a model on the server, and over MCP there is none: you are the model. "
                        "Do the work yourself (e.g. write the file with write_file, then evaluate)")


@dataclass(frozen=True, slots=True)
class McpCallResult:
    """What a tool call answers: text for the client, an error flag, and the plain data recorded with it."""

    step: int
    name: str
    text: str
    is_error: bool
    data: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class McpResource:
    """A read-only document the client may read (task statement, lessons.md, the best candidate)."""

    uri: str
    name: str
    description: str
    mime_type: str = "text/markdown"


class _McpTools:
    """Tools of the MCP driver itself (the rest are the agent's own)."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    @tool
    def update_lessons(self, content: str) -> str:
        """Replaces lessons.md: what worked, what failed, what to try next (kept with the run, shown on reconnect).

        Args:
            content: the whole new content of lessons.md.
        """
        self.agent.workspace.write_text(LESSONS_FILE, content)
        return f"lessons.md updated ({len(content.encode())} bytes)"


class McpDriver:
    """One run driven by an MCP client: tools, resources and the journal of every call.

    Calls are serialized (one step at a time, whatever the transport's concurrency). Build it with
    :func:`start_mcp_run` or :func:`open_mcp_run`.

    Args:
        agent: the model-less agent of the run (its tools, workspace and snapshot).
        max_calls: tool calls the client may make in total (every call is a step of the run).
    """

    def __init__(self, agent: Agent, *, max_calls: int) -> None:
        self.agent = agent
        self.run = agent.run
        self.max_calls = int(max_calls)
        exposed = {n: t for n, t in agent.tools.items() if n not in HIDDEN_TOOLS}
        extra = tools_of(_McpTools(agent))
        clash = sorted(set(exposed) & set(extra))
        if clash:
            raise TypeError(f"MCP tools named like the agent's: {clash}")
        self.tools: dict[str, Tool] = {**exposed, **extra}
        self._lock = threading.Lock()
        self.calls = 0
        self.finished = False
        self._recover()

    # ------------------------------------------------------------ state
    def _recover(self) -> None:
        """Rebuilds the agent's state from the run's journal: every recorded result is observed again; a
        call whose result was never written (the server died during it) is closed with what the store holds."""
        results: dict[int, dict[str, Any]] = {}
        calls: dict[int, dict[str, Any]] = {}
        for e in self.run.events():
            if e.kind == EventKind.MCP_CALL:
                calls[int(e.step)] = dict(e.payload)
            elif e.kind == EventKind.MCP_RESULT:
                results[int(e.step)] = dict(e.payload)
        for step in sorted(calls):
            self.agent.collect(step, live=False)  # background results (experiments) handed over at this step
            rec = results.get(step)
            if rec is None:
                rec = self._close_dangling(step, calls[step])
            self._observe(rec)
        self.calls = len(calls)
        self.agent.turn = self.calls
        self.agent.step = self.run.last_step()
        self.finished = self.run.state is RunState.FINISHED

    def _close_dangling(self, step: int, call: Mapping[str, Any]) -> dict[str, Any]:
        data: dict[str, Any] | None = None
        note = "it did not finish"
        ev = self.run.store.get_evaluation(self.run.id, step)
        if ev is not None:
            res = ev.result
            data = {"evaluation": EvalRecord(step, ev.candidate_id, res.status.value, res.score,
                                             res.normalized_score, res.cached).to_dict()}
            note = f"its evaluation was recorded: {res.status.value} {fmt_score(res.score)}"
        rec = {"name": call.get("name"), "is_error": True, "data": data, "interrupted": True,
               "text": f"the server stopped during this call ({call.get('name')}); {note}"}
        self.run.log_event(step, EventKind.MCP_RESULT, rec)
        return rec

    def _observe(self, rec: Mapping[str, Any]) -> None:
        data = dict(rec.get("data") or {})
        data.pop("final", None)  # a recorded finish is the run's state, read from the store
        self.agent.observe(data)

    # ------------------------------------------------------------ calls
    def call(self, name: str, arguments: Mapping[str, Any] | None, *, client: str = "") -> McpCallResult:
        """Runs one tool call as one step of the run (recorded before it runs and before it answers)."""
        with self._lock:
            step = self.run.last_step() + 1
            args = dict(arguments or {})
            self.run.log_event(step, EventKind.MCP_CALL, {"name": name, "arguments": args, "call": self.calls + 1,
                                                  "client": client, "at": time.time()})
            self.calls += 1
            self.agent.turn = self.calls
            self.agent.step = step
            if not self.finished:
                if name == "finish":
                    self.agent.settle()  # running experiments are recorded before the final choice
                self.agent.collect(step, live=True)  # what ended in the background since the last call
            rec = self._run_tool(name, args)
            self.run.log_event(step, EventKind.MCP_RESULT, rec)
            self._observe(rec)
            data = rec.get("data") or {}
            if not rec["is_error"] and "final" in data:
                self._finish(dict(data["final"]))
            return McpCallResult(step, name, rec["text"], bool(rec["is_error"]), rec.get("data"))

    def _run_tool(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        def error(text: str, **more: Any) -> dict[str, Any]:
            return {"name": name, "is_error": True, "data": None, "text": text, **more}

        if self.finished:
            return error(f"run {self.run.id} is finished; start a new run to continue the work "
                         "(reasearch mcp TASK_ID --lessons ...)")
        if self.calls > self.max_calls:
            return error(f"the call limit ({self.max_calls}) is reached: call finish")
        t = self.tools.get(name)
        if t is None:
            return error(f"no tool named {name!r}; available: {', '.join(sorted(self.tools))}")
        try:
            out = t(args)
        except ToolError as exc:
            return error(str(exc))
        except Exception as exc:  # a failing tool answers with an error; the server goes on
            return error(f"{name} failed: {type(exc).__name__}: {exc}", traceback=format_exc_locked()[-4000:])
        out = out if isinstance(out, ToolOutput) else ToolOutput(str(out))
        data = dict(out.data) if out.data else None
        if data and "evaluation" in data and data["evaluation"].get("status") == Status.REFUSED.value:
            return {"name": name, "is_error": False, "data": data, "text": out.text + "\n" + self.budget_line()}
        return {"name": name, "is_error": False, "text": out.text, "data": data}

    def _finish(self, final: dict[str, Any]) -> None:
        self.agent.final = final
        self.agent.conclude(self.run.last_step() + 1, "the MCP client called finish")
        self.finished = True

    def budget_line(self) -> str:
        """What is left of each capped unit, e.g. ``left: evaluations 0 of 3``."""
        caps = self.run.budget.units()
        left = self.run.remaining()
        parts = [f"{u.value} {left.get(u, 0) or 0:g} of {cap:g}" for u, cap in caps.items()]
        return "left: " + ("; ".join(parts) if parts else "no caps")

    # ------------------------------------------------------------ resources
    def resources(self) -> list[McpResource]:
        """The documents a client may read."""
        return [
            McpResource("reasearch://task", "task statement", f"the task {self.agent.task.spec.id}: what to write, "
                        "how it is scored, limits"),
            McpResource("reasearch://lessons", "lessons.md", "what was learned so far in this run (update_lessons)"),
            McpResource("reasearch://best", "best candidate", "source of the best-scoring candidate so far",
                        "text/x-python"),
            McpResource("reasearch://status", "status", "budget left, best so far, recent evaluations", "text/plain"),
        ]

    def read_resource(self, uri: str) -> str:
        """The text of a resource; raises ToolError for an unknown URI."""
        if uri == "reasearch://task":
            return self.agent.task.describe()
        if uri == "reasearch://lessons":
            return self.agent.lessons()
        if uri == "reasearch://status":
            return self.status()
        if uri == "reasearch://best":
            best = self.run.best()
            if best is None:
                return "# no candidate has scored OK yet\n"
            return self.run.candidate_source(best[0])
        raise ToolError(f"no resource {uri!r}; known: {', '.join(r.uri for r in self.resources())}")

    def status(self) -> str:
        """The state snapshot, as ``get_status`` shows it."""
        with self._lock:
            return self.tools["get_status"]({}) if "get_status" in self.tools else self.agent.snapshot_text()

    def instructions(self) -> str:
        """What the server tells a client when it connects."""
        return (f"You are the optimizer of run {self.run.id} on the task {self.agent.task.spec.id} "
                f"({self.agent.task.spec.direction}). Read the task (resource reasearch://task or read_file "
                f"{TASK_FILE}), work in the workspace with the file tools, score programs with evaluate (each new "
                f"program costs budget; repeats are free), keep lessons.md current with update_lessons, and call "
                f"finish with your chosen candidate. get_status shows the budget left and the best so far.")

    def close(self) -> None:
        """Stops driving the run (the run stays resumable unless it was finished); running experiments are
        stopped and recorded first."""
        if not self.finished:
            self.agent.settle(stop=True)
            self.run.close()


def _agent(run: Run, root: Path, *, exec_fn: ExecFn | None, lessons: str | None = None) -> Agent:
    config = AgentConfig.from_dict(dict(run.config.get("agent") or {}))
    model = _ClientIsTheModel()
    return Agent(run, root, config=config, models={role: model for role in ROLES}, lessons=lessons,
                 exec_fn=exec_fn)


def start_mcp_run(task_id: str, *, store: Store, run_dir: str | Path, budget: Budget | Mapping[str, float],
                  task_params: Mapping[str, Any] | None = None, seed: int = 0, lessons: str | None = None,
                  max_calls: int = 10_000, transport: str = "stdio", sandbox_mode: str = "auto",
                  executor: Any = None, exec_fn: ExecFn | None = None) -> McpDriver:
    """Creates a run of ``task_id`` driven over MCP (recorded with ``driver: mcp`` in its config).

    Args:
        task_id: registry id, e.g. ``circle_packing/n26-v1``.
        store: where the run is recorded.
        run_dir: directory of ``<run_id>/workspace``.
        budget: caps per unit, e.g. ``{"evaluations": 50}``.
        task_params: constructor parameters of the task.
        seed: the run's seed.
        lessons: text preloaded into lessons.md.
        max_calls: tool calls allowed in total.
        transport: ``stdio`` or ``http`` (recorded).
        sandbox_mode: sandbox of ``python_exec``/``bash``.
        executor: where evaluations run (default: the engine's local executor).
        exec_fn: runner of ``python_exec``/``bash`` (default: the engine's).
    """
    if max_calls < 1:
        raise ConfigError(f"max_calls must be >= 1, not {max_calls}")
    budget = budget if isinstance(budget, Budget) else Budget.from_dict(budget)
    # No model of the harness runs: the client is the model (recorded so, never an API model's name).
    config = AgentConfig(models={"agent": ModelSpec(provider="scripted", name=_MCP_MODEL)}, max_turns=max_calls,
                         sandbox_mode=sandbox_mode)
    run_config = {"driver": "mcp", "agent": config.to_dict(), "mcp": {"transport": transport, "max_calls": max_calls},
                  # runs/steering.py: the client drives each call; no step boundary of ours where a person's words land
                  "unsteerable": "an MCP client drives it (its own loop takes no interventions)"}
    run = Run.create(store, task_id=task_id, task_params=dict(task_params or {}), seed=seed, budget=budget,
                     config=run_config, executor=executor)
    agent = _agent(run, Path(run_dir) / run.id, exec_fn=exec_fn, lessons=lessons)
    agent.begin()  # the workspace: TASK.md, the seed candidate (or the domain's setup), lessons.md
    driver = McpDriver(agent, max_calls=max_calls)
    run.log_event(run.last_step() + 1, EventKind.MCP_SESSION, _session_info(transport, resumed=False))
    return driver


def open_mcp_run(run_id: str, *, store: Store, run_dir: str | Path, transport: str = "stdio",
                 executor: Any = None, exec_fn: ExecFn | None = None) -> McpDriver:
    """Reconnects to an MCP run: its recorded calls are observed again (nothing runs or is spent twice).

    A server that died (``kill -9``) leaves its driver record behind; when every other driver of the
    run is known dead (stopped, silent for longer than the staleness limit, or a process of this host
    that no longer exists) this one takes over and their budget reservations are charged at once (an
    evaluation in flight may have run; see :meth:`Store.reclaim`).

    Raises:
        ConfigError: the run was not driven over MCP, or another live process drives it.
    """
    run = Run.open(store, run_id, executor=executor)
    if run.config.get("driver") != "mcp":
        raise ConfigError(f"run {run.id} is driven by {run.config.get('driver') or 'something else'!r}, not MCP: "
                          "use `reasearch resume` for agent runs")
    alive = [d for d in store.drivers(run.id) if _alive(d)]
    if alive:
        d = alive[0]
        raise ConfigError(f"run {run.id} is being driven by a live process ({d.host} pid {d.pid}); stop it first")
    if run.state is not RunState.FINISHED:
        run.resume(takeover=True)
    mcp = dict(run.config.get("mcp") or {})
    agent = _agent(run, Path(run_dir) / run.id, exec_fn=exec_fn)
    driver = McpDriver(agent, max_calls=int(mcp.get("max_calls", 10_000)))
    if not driver.finished:
        run.log_event(run.last_step() + 1, EventKind.MCP_SESSION, _session_info(transport, resumed=True))
    return driver


def _alive(d: Any) -> bool:
    """A driver that holds the run: on this host while its process is there (whatever its heartbeat's age)."""
    return driver_alive(d)


def _session_info(transport: str, *, resumed: bool) -> dict[str, Any]:
    return {"transport": transport, "resumed": resumed, "pid": os.getpid(), "host": socket.gethostname(),
            "at": time.time()}
