"""The agent loop: query the model, run its tool calls, record every step before acting on it, repeat.

The loop itself is :meth:`Agent.optimize` (one screen). Each step is journaled in the run's event log
(``snapshot`` and ``model_reply`` for a turn, ``tool_call`` and ``tool_result`` for a tool,
``compaction``, ``final``); on resume the same loop replays the recorded steps without calling the
model or re-running tools, then continues live.

Background work (a training task's experiments run while the agent goes on) reaches the loop's history
at step boundaries only: before each live turn or tool call the domain's ``collect`` hands over what
ended since, and the loop journals it at that step (``collected``), so a replay sees it at the same
step. Before ``finish`` and before the run concludes, running background work is waited for
(``settle``); when the loop dies on an error or an interrupt, it is stopped first.

Drivers other than :meth:`Agent.optimize` (the MCP server, where the client is the model) use the same
public step API: :meth:`Agent.begin` (step 0), :meth:`Agent.collect` and :meth:`Agent.observe` (apply
background and tool results), :meth:`Agent.settle` and :meth:`Agent.conclude` (the final choice).
The agent holds its model calls (held, journaled and debited; retried, continued or sent to a fallback:
:class:`~reasearch.agent.model_calls.ModelCalls`), its clock (active time over resumed sessions) and its
domain (the toolset of the task's kind, :class:`~reasearch.agent.tools.domain.AgentDomain`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reasearch.agent.config import AgentConfig
from reasearch.agent.console import write_final_files
from reasearch.agent.model_calls import ActiveClock, ModelCalls, require_prices, role_models
from reasearch.agent.prompts import (
    LESSONS_TEMPLATE,
    NO_TOOL_NUDGE,
    SUMMARY_REQUEST,
    agent_system,
    no_tool_warning,
    wrap_up_notice,
)
from reasearch.agent.snapshot import EvalRecord, best_of, render_snapshot
from reasearch.agent.tools.context import ToolContext, ToolState
from reasearch.agent.tools.domain import AgentDomain
from reasearch.agent.tools.program import ControlTools, ProgramTools
from reasearch.agent.tools.prompt import PromptTools
from reasearch.agent.tools.schema import Tool, ToolError, ToolOutput, tools_of
from reasearch.agent.tools.workspace import ExecFn, Quota, Workspace, WorkspaceTools
from reasearch.agent.traces import TraceGroup, TraceTools
from reasearch.ast_lock import format_exc as format_exc_locked
from reasearch.errors import BudgetExceededError, ModelError
from reasearch.evaluators.base import Task, candidate_sha256
from reasearch.evaluators.kinds import ProgramKind, PromptKind, RepositoryKind, task_kind
from reasearch.models import Model
from reasearch.models.messages import (
    ModelReply,
    ModelRequest,
    ToolCall,
    estimate_tokens,
    text_block,
    tool_result_block,
)
from reasearch.runs.events import EventKind, base_kind
from reasearch.runs.journal import Journal
from reasearch.runs.model_budget import spent_hard_cap
from reasearch.runs.run import Run
from reasearch.runs.steering import Steering

__all__ = ["LESSONS_FILE", "TASK_FILE", "Agent", "AgentProgress", "AgentResult", "require_prices"]

LESSONS_FILE = "lessons.md"
TASK_FILE = "TASK.md"
_MAX_SOURCE = 2 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class AgentResult:
    """How a run ended: the final candidate, who chose it and why."""

    run_id: str
    state: str
    final_candidate: str | None
    final_score: float | None
    chosen_by: str  # "agent" (it called finish) or "harness" (a limit came first)
    reason: str
    turns: int
    steps: int


@dataclass(frozen=True, slots=True)
class AgentProgress:
    """What a live display shows after each step."""

    turn: int
    step: int
    best_score: float | None
    remaining: Mapping[Any, float | None]
    last_tool: str
    context_tokens: int


class Agent:
    """One agent working on one run.

    Args:
        run: the run (a :class:`reasearch.runs.Run`).
        root: this run's directory (``<run_dir>/<run_id>``): ``workspace/`` and ``transcripts/`` live there.
        config: loop settings; default: read from ``run.config["agent"]``.
        models: a model per role (``agent``, ``editor``, ``summarizer``); missing roles are built from
            the config's specs (the editor and summarizer default to the agent's model).
        lessons: text preloaded into ``lessons.md`` (``--lessons FILE`` of an earlier run).
        exec_fn: sandbox command runner for ``python_exec``/``bash`` (default: the engine's).
        on_progress: called after every step (live displays).
        clock: monotonic seconds (tests pass a fake one).
    """

    def __init__(self, run: Run, root: str | Path, *, config: AgentConfig | None = None,
                 models: Mapping[str, Model] | None = None, lessons: str | None = None,
                 exec_fn: ExecFn | None = None, on_progress: Callable[[AgentProgress], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.run = run
        self.config = config or AgentConfig.from_dict(dict(run.config.get("agent") or {}))
        self.root = Path(root)
        self.workspace = Workspace(self.root / "workspace", quota=Quota(
            self.config.workspace_max_mb << 20, self.config.workspace_max_files))
        self.transcripts = self.root / "transcripts"
        self.journal = Journal(run)
        self.steering = Steering(run, self.journal)  # a person's interventions, applied at each turn's step
        self.models = role_models(self.config, dict(models or {}), self.journal)
        self.lessons_preload = lessons
        self.on_progress = on_progress
        self.clock = ActiveClock(clock)
        ws_tools = WorkspaceTools(self.workspace, exec_fn=exec_fn, timeout_s=self.config.tool_timeout_s,
                                  memory_mb=self.config.tool_memory_mb, sandbox_mode=self.config.sandbox_mode)
        self.task: Task = run.task
        self.calls = ModelCalls(run, self.config, self.journal, self.models, task=self.task, workspace=self.workspace,
                                exec_fn=exec_fn, clock=self.clock, step=lambda: self.step)
        ctx = ToolContext(
            run,
            self.task,
            self.workspace,
            lambda role, request, kind: self.calls.complete(role, request, kind=kind),
            lambda: ToolState(self.step, self.parent, tuple(self.history)),
            lambda: self.snapshot_text(include_lessons=False),
        )
        # The domain toolset, by the task's kind: program tools, prompt tools, or experiments and git.
        self.candidate_file: str = self.task.candidate_file
        extra_tools: list[object] = []
        self.domain: AgentDomain
        match task_kind(self.task):
            case RepositoryKind(task=training):
                from reasearch.agent.tools.experiments import experiment_toolset

                self.domain, extra_tools = experiment_toolset(ctx, training)
            case PromptKind():
                self.domain = PromptTools(ctx)
            case ProgramKind():
                self.domain = ProgramTools(ctx)
        self.tools: dict[str, Tool] = tools_of(ws_tools, self.domain, *extra_tools, ControlTools(ctx))
        if not self.config.use_compaction:  # the no-compaction ablation: the context only grows
            self.tools.pop("compact", None)
        self.traces = TraceGroup.of(run)  # a trace of a multi-trace fleet: the others' lessons and best
        if self.traces is not None:
            self.tools.update(tools_of(TraceTools(self.traces, self.workspace, self._best_score, self.candidate_file)))
        template = self.domain.system_template
        self.system = template.format(task=self.task.describe()) if template else agent_system(self.task.describe())
        # Loop state; rebuilt identically when a resumed run replays its journal.
        self.step = -1
        self.turn = 0
        self.messages: list[dict[str, Any]] = []
        self.pending: list[dict[str, Any]] = []
        self.history: list[EvalRecord] = []
        self.parent: str | None = None
        self.final: dict[str, Any] | None = None
        self.compact_requested = False
        self.snapshot_fresh = False
        self.wrapped_up = False
        self.context_tokens = 0
        self.no_tool_streak = 0  # consecutive replies without a tool call
        self.last_tool = ""
        self.final_files: dict[str, str] = {}

    # ---------------------------------------------------------------- the loop
    def optimize(self) -> AgentResult:
        """Runs (or resumes) the agent until it calls ``finish`` or a limit is reached."""
        self.begin()
        try:
            while True:
                step = self._next_step()
                if (stopped := self._steer(step)) is not None:
                    return self.conclude(step, stopped)
                action, reason = self._decide(step)
                if action == "compact":
                    self._compact(step, reason)
                    continue
                if action == "stop":
                    return self.conclude(step, reason)
                reply = self._turn(step, wrap_up=reason)
                self.no_tool_streak = 0 if reply.tool_calls else self.no_tool_streak + 1
                self.pending = self._execute_all(reply.tool_calls) or [text_block(self._nudge())]
                if self.final is not None:
                    return self.conclude(self._next_step(), "the agent called finish")
        except BudgetExceededError as exc:  # a retry or a helper call met a spent cap
            return self.conclude(self._next_step(), str(exc))
        except ModelError as exc:  # resumable: the journal holds every step up to here
            self.settle(stop=True)
            self.run.finish(state="interrupted", reason=f"model error: {exc}")
            raise
        except KeyboardInterrupt:
            self.settle(stop=True)
            self.run.finish(state="interrupted", reason="interrupted by the user")
            raise

    def _nudge(self) -> str:
        """What a reply without a tool call gets back (with a warning when one more such reply stops the run)."""
        limit = self.config.max_turns_without_tools
        if self.no_tool_streak == limit - 1:
            return NO_TOOL_NUDGE + "\n" + no_tool_warning(self.no_tool_streak, limit)
        return NO_TOOL_NUDGE

    # ---------------------------------------------------------------- steps
    def _next_step(self) -> int:
        self.step += 1
        return self.step

    def begin(self) -> None:
        """Step 0: the workspace (task, seed program, lessons) and the run's provenance."""
        self.step = 0
        if self.journal.get(0, "start") is None:
            self.workspace.write_text(TASK_FILE, self.task.describe())
            self.domain.setup_workspace()  # the seed program (or prompt; a repository task's, committed)
            if self.config.use_lessons:
                self.workspace.write_text(LESSONS_FILE, self.lessons_preload or LESSONS_TEMPLATE)
            self.journal.record(0, "start", {
                "task_id": self.task.id, "config": self.config.to_dict(),
                "models": {role: m.name for role, m in self.models.items()}, "endpoints": self.calls.endpoints(),
                "lessons_text": self.lessons_preload, "workspace": str(self.workspace.root),
            })
        self.pending = [text_block(self.domain.start_message)]

    def _steer(self, step: int) -> str | None:
        """A person's interventions at this step (runs/steering.py); a pin puts the candidate in the workspace
        (once, before the step's turn is recorded). Returns why a person stopped the run, or None."""
        self.steering.at(step)
        pin = self.steering.state.take_pin()
        if pin is not None:
            self.parent = pin
            fresh = all(base_kind(kind) == EventKind.STEER for kind in self.journal.kinds(step))
            if fresh and not isinstance(task_kind(self.task), RepositoryKind):  # a repository: the workspace is it
                self.workspace.write_text(self.candidate_file, self.run.candidate_source(pin))
        return self.steering.stop_reason

    def _decide(self, step: int) -> tuple[str, str | None]:
        """What this step is: ``compact``, ``stop`` or a ``turn`` (a recorded step replays as it was)."""
        if (rec := self.journal.get(step, "compaction")) is not None:
            return "compact", rec["reason"]
        if (rec := self.journal.get(step, "final")) is not None:
            return "stop", rec["stop_reason"]
        if (rec := self.journal.get(step, "snapshot")) is not None:
            return "turn", rec.get("wrap_up")
        if self.compact_requested:
            return "compact", "the agent called compact()"
        size = self.context_tokens + estimate_tokens(self.pending)
        if self.config.use_compaction and size > self.config.compact_threshold_tokens:
            return "compact", f"the context reached ~{size} tokens (threshold {self.config.compact_threshold_tokens})"
        limit, hard = self._limit()
        if limit is None:
            return "turn", None
        if hard or self.wrapped_up or not self.config.wrap_up_turn:
            return "stop", limit
        return "turn", limit

    def _limit(self) -> tuple[str | None, bool]:
        """(the first limit reached, whether it is hard), checked before every model call."""
        remaining = self.run.remaining()
        why = spent_hard_cap(remaining)
        if why is not None:
            return why, True
        if self.no_tool_streak >= self.config.max_turns_without_tools:  # hard: it would not call finish either
            return (f"the model answered {self.no_tool_streak} turns in a row without calling a tool "
                    f"(limit {self.config.max_turns_without_tools})"), True
        if self.turn >= self.config.max_turns:
            return f"the turn limit ({self.config.max_turns}) is reached", False
        if self.config.max_wall_s is not None and self.clock.elapsed() >= self.config.max_wall_s:
            return f"the wall-time limit ({self.config.max_wall_s:g} s) is reached", False
        unit = self.run.eval_unit  # a prompt task spends student calls
        left = remaining.get(unit)
        if left is not None and left <= 0:
            return f"the {unit.value} budget is spent", False
        return None, False

    def settle(self, *, stop: bool = False) -> None:
        """Waits for the domain's background work (``stop``: stops it first); a no-op for most domains."""
        self.domain.settle(stop=stop)

    def collect(self, step: int, *, live: bool) -> None:
        """Applies the background results journaled at ``step``; live, first asks the domain for new ones."""
        rec = self.journal.get(step, "collected")
        if rec is None and live:
            items = self.domain.collect(tuple(self.history))
            if items:
                rec = self.journal.record(step, "collected", {"items": items})
        for data in (rec or {}).get("items", []):
            self.observe(data)

    def _turn(self, step: int, *, wrap_up: str | None) -> ModelReply:
        """One model turn: the snapshot goes into the prompt, the reply is recorded before any tool runs."""
        self.collect(step, live=self.journal.get(step, "snapshot") is None)
        steering = self.steering.state.notes(self.steering.state.take_hints())  # hints once, bans until lifted
        rec = self.journal.get(step, "snapshot") or self.journal.record(step, "snapshot", {
            "turn": self.turn + 1, "wrap_up": wrap_up,
            "text": self.snapshot_text(notice=wrap_up_notice(wrap_up) if wrap_up else ""),
            **({"steering": steering} if steering else {})})
        content = list(self.pending)
        if not self.snapshot_fresh and self.config.use_snapshot:  # after a compaction it is already message one
            content.append(text_block(rec["text"]))
        if rec.get("steering"):  # a person's words reach the model as this recorded block, live and on replay
            content.append(text_block(rec["steering"]))
        self.snapshot_fresh = False
        self.messages.append({"role": "user", "content": content})
        self.turn += 1
        self.wrapped_up = self.wrapped_up or bool(wrap_up)
        tools = [self.tools["finish"]] if wrap_up else list(self.tools.values())
        request = ModelRequest(self.system, list(self.messages), [t.schema for t in tools])
        reply = self.calls.complete("agent", request, kind="model_reply", step=step)
        self.messages.append(reply.as_message())
        # The context is what the last call saw and wrote (a continued reply sums its calls' usage).
        self.context_tokens = self.calls.last_usage.context_tokens or estimate_tokens(self.messages)
        self._progress()
        return reply

    def _execute_all(self, calls: list[ToolCall]) -> list[dict[str, Any]]:
        results = []
        for call in calls:
            if self.final is not None:  # every tool_use needs an answer, but nothing runs after finish
                results.append(
                    tool_result_block(call.id, "not run: finish was called earlier in this reply", is_error=True)
                )
                continue
            results.append(self._execute(call))
        return results

    def _execute(self, call: ToolCall) -> dict[str, Any]:
        """One tool call as one step: recorded before it runs, its result recorded before it is used."""
        step = self._next_step()
        rec = self.journal.get(step, "tool_result")
        if rec is None and call.name == "finish":
            self.settle()  # every running experiment is recorded before the final choice
        self.collect(step, live=rec is None)
        if rec is None:
            self.journal.record(step, "tool_call", {"id": call.id, "name": call.name, "input": dict(call.input)})
            rec = self.journal.record(step, "tool_result", self._run_tool(call))
        self.observe(rec.get("data") or {})
        self.last_tool = call.name
        self._progress()
        text = rec["text"]
        limit = self.config.tool_result_max_chars
        if len(text) > limit:
            text = text[:limit] + f"\n[... {len(text) - limit} characters cut]"
        return tool_result_block(call.id, text, is_error=bool(rec["is_error"]))

    def _run_tool(self, call: ToolCall) -> dict[str, Any]:
        allowed = ["finish"] if self.wrapped_up else list(self.tools)
        t = self.tools.get(call.name) if call.name in allowed else None
        if t is None:
            return {"name": call.name, "is_error": True, "data": None,
                    "text": f"no tool named {call.name!r} is available now; available: {', '.join(allowed)}"}
        try:
            out = t(call.input)
        except ToolError as exc:
            return {"name": call.name, "is_error": True, "data": None, "text": str(exc)}
        except Exception as exc:  # a failing tool answers the model with an error; the loop goes on
            return {"name": call.name, "is_error": True, "data": None, "traceback": format_exc_locked()[-4000:],
                    "text": f"{call.name} failed: {type(exc).__name__}: {exc}"}
        out = out if isinstance(out, ToolOutput) else ToolOutput(str(out))
        return {"name": call.name, "is_error": False, "text": out.text, "data": dict(out.data) if out.data else None}

    def observe(self, data: Mapping[str, Any]) -> None:
        """Applies a tool result's effect on the loop state (live and when replaying)."""
        if "evaluation" in data:
            rec = EvalRecord.from_dict(data["evaluation"])
            self.history.append(rec)
            self.parent = rec.candidate
        if data.get("compact"):
            self.compact_requested = True
        if "final" in data:
            self.final = dict(data["final"])

    def _compact(self, step: int, reason: str | None) -> None:
        """Saves the transcript; replaces the history by the snapshot, a summary and lessons.md."""
        rec = self.journal.get(step, "compaction")
        if rec is None:
            transcript = self._save_transcript(f"compaction-{step:05d}")
            closing = {"role": "user", "content": [*self.pending, text_block(SUMMARY_REQUEST)]}
            request = ModelRequest(self.system, [*self.messages, closing], [t.schema for t in self.tools.values()])
            try:
                summary = self.calls.complete("summarizer", request, kind="summary", step=step).text.strip()
            except BudgetExceededError as exc:  # compact anyway: lessons.md and the snapshot carry on
                summary = f"(no summary: {exc})"
            rec = self.journal.record(step, "compaction", {
                "reason": reason, "transcript": transcript, "tokens_before": self.context_tokens,
                "summary": summary or "(the summarizer wrote nothing)",
                "snapshot": self.snapshot_text(include_lessons=False), "lessons": self.lessons()})
        first = rec["snapshot"] if self.config.use_snapshot else "The context was compacted."
        self.messages = [
            {"role": "user", "content": [text_block(first)]},
            {
                "role": "assistant",
                "content": [
                    text_block(
                        "Summary of the work so far (written before the context was compacted):\n" + rec["summary"]
                    )
                ],
            },
        ]
        lessons = f"## lessons.md\n{rec['lessons'].strip()}\n\n" if self.config.use_lessons else ""
        self.pending = [text_block(f"{lessons}Continue the work from here.")]
        self.snapshot_fresh, self.compact_requested = True, False
        self.context_tokens = estimate_tokens(self.messages)

    def conclude(self, step: int, stop_reason: str | None) -> AgentResult:
        """Records the final choice (the agent's, else the best OK candidate) and why; ends the run."""
        rec = self.journal.get(step, "final")
        if rec is None:
            self.settle()
        self.collect(step, live=rec is None)
        if rec is None:
            if self.final is not None:
                rec = {**self.final, "chosen_by": "agent"}
            else:
                best = self.best_record()
                rec = {"candidate": best.candidate if best else None, "score": best.score if best else None,
                       "step": best.step if best else None, "chosen_by": "harness",
                       "reason": f"{stop_reason}; the agent did not call finish, so the harness chose "
                                 + ("the best-scoring OK candidate" if best else "nothing (no candidate scored OK)")}
            rec["stop_reason"] = stop_reason
            rec["transcript"] = self._save_transcript("final")
            rec = self.journal.record(step, "final", rec)
        self.run.finish(
            state="finished", final_candidate=rec["candidate"], reason=f"{rec['chosen_by']}: {rec['reason']}"
        )
        self.final_files = write_final_files(self, rec["candidate"])  # best_candidate.py (+ its picture)
        self.domain.on_finish(rec)  # e.g. the trusted side scores a final prompt on the sealed test split
        self._progress()
        return AgentResult(self.run.id, "finished", rec["candidate"], rec["score"], rec["chosen_by"], rec["reason"],
                           self.turn, self.step)

    # ---------------------------------------------------------------- state
    def lessons(self) -> str:
        """lessons.md through the workspace's guarded reader (never a symlink, FIFO or device; capped);
        empty in the no-lessons ablation."""
        if not self.config.use_lessons:
            return ""
        try:
            return self.workspace.read_text(LESSONS_FILE, missing="")
        except ToolError as exc:
            return f"(lessons.md is not shown: {exc})"

    def best_record(self) -> EvalRecord | None:
        return best_of(self.history, self.task.spec)

    def _best_score(self) -> float | None:
        best = self.best_record()
        return None if best is None else best.score

    def snapshot_text(self, *, include_lessons: bool = True, notice: str = "") -> str:
        best = self.best_record()
        try:  # the guarded reader: what the snapshot shows of the candidate is its hash, never host files
            sha = candidate_sha256(
                self.workspace.read_text(self.candidate_file, cap=_MAX_SOURCE, cut=False, missing="")
            )
            seen = next((r for r in reversed(self.history) if r.candidate == sha), None)
            current = (f"candidate {sha[:12]}, evaluated at step {seen.step}: {seen.status}" if seen
                       else f"candidate {sha[:12]}, not evaluated yet")
        except ToolError as exc:
            current = f"unreadable ({exc})"
        if (text := self.domain.current_text()) is not None:  # a repository task: the workspace, not one file
            current = text
        if self.traces is not None and include_lessons:
            self.traces.publish(self.step, self.lessons())
            notice = "\n\n".join(part for part in (self.traces.snapshot_section(), notice) if part)
        return render_snapshot(
            turn=self.turn + 1, max_turns=self.config.max_turns, spec=self.task.spec, remaining=self.run.remaining(),
            best=(best.candidate, best.score, best.normalized_score) if best else None, history=self.history,
            current=current, lessons=self.lessons() if include_lessons and self.config.use_lessons else None,
            stagnation_after=self.config.stagnation_after, recent=self.config.recent_evaluations,
            lessons_max_chars=self.config.lessons_max_chars, elapsed_s=self.clock.elapsed(),
            max_wall_s=self.config.max_wall_s,
            notice="\n".join([*self.domain.snapshot_lines(), notice]).strip(),
            current_label=self.domain.current_label)

    def _save_transcript(self, name: str) -> str:
        self.transcripts.mkdir(parents=True, exist_ok=True)
        path = self.transcripts / f"{name}.json"
        path.write_text(
            json.dumps({"system": self.system, "messages": self.messages, "pending": self.pending}, indent=1)
        )
        return str(path.relative_to(self.root))

    def _progress(self) -> None:
        if self.on_progress is not None:
            best = self.best_record()
            self.on_progress(AgentProgress(self.turn, self.step, best.score if best else None, self.run.remaining(),
                                           self.last_tool, self.context_tokens))
