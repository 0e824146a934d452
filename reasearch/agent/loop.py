"""The agent loop: query the model, run its tool calls, record every step before acting on it, repeat.

The loop itself is :meth:`Agent.optimize` (one screen). Each step is journaled in the run's event log
(``snapshot`` and ``model_reply`` for a turn, ``tool_call`` and ``tool_result`` for a tool,
``compaction``, ``final``); on resume the same loop replays the recorded steps without calling the
model or re-running tools, then continues live.
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from reasearch.agent.config import ROLES, AgentConfig
from reasearch.agent.journal import Journal, RunLike
from reasearch.agent.messages import (
    ModelReply,
    ModelRequest,
    StopReason,
    ToolCall,
    Usage,
    estimate_tokens,
    text_block,
    tool_result_block,
)
from reasearch.agent.models import Model, build_model
from reasearch.agent.prompts import (
    CONTINUE_MESSAGE,
    LESSONS_TEMPLATE,
    NO_TOOL_NUDGE,
    RETRY_CUT,
    RETRY_EMPTY,
    START_MESSAGE,
    SUMMARY_REQUEST,
    agent_system,
    wrap_up_notice,
)
from reasearch.agent.snapshot import EvalRecord, render_snapshot
from reasearch.agent.tools.program import CANDIDATE_FILE, ControlTools, ProgramTools
from reasearch.agent.tools.schema import Tool, ToolError, ToolOutput, tools_of
from reasearch.agent.tools.workspace import ExecFn, Workspace, WorkspaceTools
from reasearch.runs.ledger import Unit
from reasearch.errors import BudgetExceededError, ConfigError, ModelError
from reasearch.evaluators.base import Task, candidate_sha256

__all__ = ["LESSONS_FILE", "TASK_FILE", "Agent", "AgentProgress", "AgentResult", "require_prices"]

LESSONS_FILE = "lessons.md"
TASK_FILE = "TASK.md"
_HARD_UNITS = (Unit.TOKENS, Unit.DOLLARS, Unit.MODEL_CALLS)  # no wrap-up turn: it would spend more of them


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
        run: the run (``reasearch.engine.Run`` or anything with the same API).
        root: this run's directory (``<run_dir>/<run_id>``): ``workspace/`` and ``transcripts/`` live there.
        config: loop settings; default: read from ``run.config["agent"]``.
        models: a model per role (``agent``, ``editor``, ``summarizer``); missing roles are built from
            the config's specs (the editor and summarizer default to the agent's model).
        lessons: text preloaded into ``lessons.md`` (``--lessons FILE`` of an earlier run).
        exec_fn: sandbox command runner for ``python_exec``/``bash`` (default: the engine's).
        on_progress: called after every step (live displays).
        clock: monotonic seconds (tests pass a fake one).
    """

    def __init__(self, run: RunLike, root: str | Path, *, config: AgentConfig | None = None,
                 models: Mapping[str, Model] | None = None, lessons: str | None = None,
                 exec_fn: ExecFn | None = None, on_progress: Callable[[AgentProgress], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.run = run
        self.config = config or AgentConfig.from_dict(dict(run.config.get("agent") or {}))
        self.root = Path(root)
        self.workspace = Workspace(self.root / "workspace")
        self.transcripts = self.root / "transcripts"
        self.journal = Journal(run)
        if run.remaining().get(Unit.DOLLARS) is not None:
            require_prices(self.config)
        self.models = _role_models(self.config, dict(models or {}), self.journal)
        self.lessons_preload = lessons
        self.on_progress = on_progress
        self.clock = clock
        ws_tools = WorkspaceTools(self.workspace, exec_fn=exec_fn, timeout_s=self.config.tool_timeout_s,
                                  memory_mb=self.config.tool_memory_mb, sandbox_mode=self.config.sandbox_mode)
        self.task: Task = run.task
        # Training tasks (a repository candidate) get experiments and git instead of the program tools.
        self.domain: list[Any] = [ProgramTools(self)]
        if getattr(self.task, "candidate_kind", "program") == "repository":
            from reasearch.agent.tools.experiments import experiment_toolset

            self.domain = experiment_toolset(self)
        self.tools: dict[str, Tool] = tools_of(ws_tools, *self.domain, ControlTools(self))
        self.system = agent_system(self.task.describe())
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
        self.last_tool = ""
        self._elapsed_base, self._t0 = 0.0, clock()

    # ---------------------------------------------------------------- the loop
    def optimize(self) -> AgentResult:
        """Runs (or resumes) the agent until it calls ``finish`` or a limit is reached."""
        self._begin()
        try:
            while True:
                step = self._next_step()
                action, reason = self._decide(step)
                if action == "compact":
                    self._compact(step, reason)
                    continue
                if action == "stop":
                    return self._conclude(step, reason)
                reply = self._turn(step, wrap_up=reason)
                self.pending = self._execute_all(reply.tool_calls) or [text_block(NO_TOOL_NUDGE)]
                if self.final is not None:
                    return self._conclude(self._next_step(), "the agent called finish")
        except BudgetExceededError as exc:  # a retry or a helper call met a spent cap
            return self._conclude(self._next_step(), str(exc))
        except ModelError as exc:  # resumable: the journal holds every step up to here
            self.run.finish(state="interrupted", reason=f"model error: {exc}")
            raise
        except KeyboardInterrupt:
            self.run.finish(state="interrupted", reason="interrupted by the user")
            raise

    # ---------------------------------------------------------------- steps
    def _next_step(self) -> int:
        self.step += 1
        return self.step

    def _begin(self) -> None:
        """Step 0: the workspace (task, seed program, lessons) and the run's provenance."""
        self.step = 0
        if self.journal.get(0, "start") is None:
            self.workspace.write_text(TASK_FILE, self.task.describe())
            setup = getattr(self.domain[0], "setup_workspace", None)
            if setup is not None:
                setup()
            else:
                self.workspace.write_text(CANDIDATE_FILE, self.task.seed_program())
            self.workspace.write_text(LESSONS_FILE, self.lessons_preload or LESSONS_TEMPLATE)
            self.journal.record(0, "start", {
                "task_id": self.task.id, "config": self.config.to_dict(),
                "models": {role: m.name for role, m in self.models.items()},
                "lessons_text": self.lessons_preload, "workspace": str(self.workspace.root),
            })
        self.pending = [text_block(START_MESSAGE)]

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
        if size > self.config.compact_threshold_tokens:
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
        for unit in _HARD_UNITS:
            left = remaining.get(unit)
            if left is not None and left <= 0:
                return f"the {unit.value} budget is spent", True
        if self.turn >= self.config.max_turns:
            return f"the turn limit ({self.config.max_turns}) is reached", False
        if self.config.max_wall_s is not None and self.elapsed() >= self.config.max_wall_s:
            return f"the wall-time limit ({self.config.max_wall_s:g} s) is reached", False
        unit = Unit(getattr(self.run, "eval_unit", Unit.EVALUATIONS))  # a prompt task spends student calls
        left = remaining.get(unit)
        if left is not None and left <= 0:
            return f"the {unit.value} budget is spent", False
        return None, False

    def _turn(self, step: int, *, wrap_up: str | None) -> ModelReply:
        """One model turn: the snapshot goes into the prompt, the reply is recorded before any tool runs."""
        rec = self.journal.get(step, "snapshot") or self.journal.record(step, "snapshot", {
            "turn": self.turn + 1, "wrap_up": wrap_up,
            "text": self.snapshot_text(notice=wrap_up_notice(wrap_up) if wrap_up else "")})
        content = list(self.pending)
        if not self.snapshot_fresh:  # right after a compaction the snapshot is already message one
            content.append(text_block(rec["text"]))
        self.snapshot_fresh = False
        self.messages.append({"role": "user", "content": content})
        self.turn += 1
        self.wrapped_up = self.wrapped_up or bool(wrap_up)
        tools = [self.tools["finish"]] if wrap_up else list(self.tools.values())
        request = ModelRequest(self.system, list(self.messages), [t.schema for t in tools])
        reply = self.complete("agent", request, kind="model_reply", step=step)
        self.messages.append(reply.as_message())
        self.context_tokens = reply.usage.context_tokens or estimate_tokens(self.messages)
        self._progress()
        return reply

    def _execute_all(self, calls: list[ToolCall]) -> list[dict[str, Any]]:
        results = []
        for call in calls:
            if self.final is not None:  # every tool_use needs an answer, but nothing runs after finish
                results.append(tool_result_block(call.id, "not run: finish was called earlier in this reply", is_error=True))
                continue
            results.append(self._execute(call))
        return results

    def _execute(self, call: ToolCall) -> dict[str, Any]:
        """One tool call as one step: recorded before it runs, its result recorded before it is used."""
        step = self._next_step()
        rec = self.journal.get(step, "tool_result")
        if rec is None:
            self.journal.record(step, "tool_call", {"id": call.id, "name": call.name, "input": dict(call.input)})
            rec = self.journal.record(step, "tool_result", self._run_tool(call))
        self._observe(rec.get("data") or {})
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
            return {"name": call.name, "is_error": True, "data": None, "traceback": traceback.format_exc()[-4000:],
                    "text": f"{call.name} failed: {type(exc).__name__}: {exc}"}
        out = out if isinstance(out, ToolOutput) else ToolOutput(str(out))
        return {"name": call.name, "is_error": False, "text": out.text, "data": dict(out.data) if out.data else None}

    def _observe(self, data: Mapping[str, Any]) -> None:
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
                summary = self.complete("summarizer", request, kind="summary", step=step).text.strip()
            except BudgetExceededError as exc:  # compact anyway: lessons.md and the snapshot carry on
                summary = f"(no summary: {exc})"
            rec = self.journal.record(step, "compaction", {
                "reason": reason, "transcript": transcript, "tokens_before": self.context_tokens,
                "summary": summary or "(the summarizer wrote nothing)",
                "snapshot": self.snapshot_text(include_lessons=False), "lessons": self.lessons()})
        self.messages = [{"role": "user", "content": [text_block(rec["snapshot"])]},
                         {"role": "assistant", "content": [text_block(
                             "Summary of the work so far (written before the context was compacted):\n" + rec["summary"])]}]
        self.pending = [text_block(f"## lessons.md\n{rec['lessons'].strip()}\n\nContinue the work from here.")]
        self.snapshot_fresh, self.compact_requested = True, False
        self.context_tokens = estimate_tokens(self.messages)

    def _conclude(self, step: int, stop_reason: str | None) -> AgentResult:
        """Records the final choice (the agent's, else the best OK candidate) and why; ends the run."""
        rec = self.journal.get(step, "final")
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
        self.run.finish(state="finished", final_candidate=rec["candidate"], reason=f"{rec['chosen_by']}: {rec['reason']}")
        self._progress()
        return AgentResult(self.run.id, "finished", rec["candidate"], rec["score"], rec["chosen_by"], rec["reason"],
                           self.turn, self.step)

    # ---------------------------------------------------------------- model calls
    def complete(self, role: str, request: ModelRequest, *, kind: str, step: int | None = None) -> ModelReply:
        """A model call for ``role``, journaled and debited; empty or cut-off replies are recovered.

        A reply cut off in plain text is continued; one cut off inside a tool call, or empty, is asked
        again. Every attempt is recorded and debited; after ``max_reply_attempts`` it raises ModelError.
        """
        step = self.step if step is None else step
        model, messages = self.models[role], list(request.messages)
        parts: list[ModelReply] = []
        for attempt in range(self.config.max_reply_attempts):
            key = kind if attempt == 0 else f"{kind}.{attempt}"
            rec = self.journal.get(step, key)
            if rec is None:
                self._check_money()
                reply = model.complete(replace(request, messages=messages))
                rec = self.journal.record(step, key, {"role": role, "model": model.name, "attempt": attempt,
                                                      "reply": reply.to_dict(), "elapsed_s": self.elapsed()})
            elif self.journal.replaying(step):
                self._elapsed_base, self._t0 = float(rec.get("elapsed_s", 0.0)), self.clock()
            reply = ModelReply.from_dict(rec["reply"])
            self._debit(step, f"{role}:{key}", reply)
            if reply.truncated and reply.text and not reply.tool_calls:
                parts.append(reply)
                messages = [*messages, reply.as_message(), {"role": "user", "content": [text_block(CONTINUE_MESSAGE)]}]
            elif reply.truncated or reply.is_empty:
                parts = []
                messages = list(_with_note(request.messages, RETRY_CUT if reply.truncated else RETRY_EMPTY))
            else:
                return _merge([*parts, reply])
        raise ModelError(f"{model.name} gave no usable reply in {self.config.max_reply_attempts} attempts "
                         f"(replies were empty or cut off at the token limit); raise max_tokens or resume the run")

    def _check_money(self) -> None:
        """Before every live model call (agent, editor, summarizer): no call past a spent cap."""
        remaining = self.run.remaining()
        for unit in _HARD_UNITS:
            left = remaining.get(unit)
            if left is not None and left <= 0:
                raise BudgetExceededError(f"the {unit.value} budget is spent: no further model call")

    def _debit(self, step: int, note: str, reply: ModelReply) -> None:
        self.run.debit(Unit.MODEL_CALLS, 1, step=step, note=note)
        if reply.usage.total:
            self.run.debit(Unit.TOKENS, reply.usage.total, step=step, note=note)
        if reply.cost_usd:
            self.run.debit(Unit.DOLLARS, reply.cost_usd, step=step, note=note)

    # ---------------------------------------------------------------- state
    def elapsed(self) -> float:
        """Active wall seconds of this run, summed over resumed sessions."""
        return self._elapsed_base + self.clock() - self._t0

    def lessons(self) -> str:
        path = self.workspace.root / LESSONS_FILE
        return path.read_text() if path.is_file() else ""

    def best_record(self) -> EvalRecord | None:
        best = None
        for rec in self.history:
            if rec.status == "OK" and rec.score is not None and (best is None or self.task.spec.is_better(rec.score, best.score)):
                best = rec
        return best

    def snapshot_text(self, *, include_lessons: bool = True, notice: str = "") -> str:
        best = self.best_record()
        src = (self.workspace.root / CANDIDATE_FILE)
        sha = candidate_sha256(src.read_text()) if src.is_file() else ""
        seen = next((r for r in reversed(self.history) if r.candidate == sha), None)
        current = (f"candidate {sha[:12]}, evaluated at step {seen.step}: {seen.status}" if seen
                   else f"candidate {sha[:12]}, not evaluated yet")
        current_fn = getattr(self.domain[0], "current_text", None)
        if current_fn is not None:  # a repository task: the candidate is the workspace, not candidate.py
            current = current_fn()
        text = render_snapshot(
            turn=self.turn + 1, max_turns=self.config.max_turns, spec=self.task.spec, remaining=self.run.remaining(),
            best=(best.candidate, best.score, best.normalized_score) if best else None, history=self.history,
            current=current, lessons=self.lessons() if include_lessons else None,
            stagnation_after=self.config.stagnation_after, recent=self.config.recent_evaluations,
            lessons_max_chars=self.config.lessons_max_chars, elapsed_s=self.elapsed(),
            max_wall_s=self.config.max_wall_s, notice=notice)
        sections = [t.snapshot_section() for t in self.domain if hasattr(t, "snapshot_section")]
        return "\n\n".join([text, *sections])

    def _save_transcript(self, name: str) -> str:
        self.transcripts.mkdir(parents=True, exist_ok=True)
        path = self.transcripts / f"{name}.json"
        path.write_text(json.dumps({"system": self.system, "messages": self.messages, "pending": self.pending}, indent=1))
        return str(path.relative_to(self.root))

    def _progress(self) -> None:
        if self.on_progress is not None:
            best = self.best_record()
            self.on_progress(AgentProgress(self.turn, self.step, best.score if best else None, self.run.remaining(),
                                           self.last_tool, self.context_tokens))


def require_prices(config: AgentConfig) -> None:
    """Raises ConfigError unless every model that can spend has a price (a dollar cap needs them)."""
    for role in ROLES:
        spec = config.model(role)
        if spec.provider != "scripted" and spec.price is None:
            raise ConfigError(f"the run caps dollars but no price is known for the {role} model {spec.name!r}: "
                              "give price_in and price_out (USD per million tokens; --price-in/--price-out)")


def _role_models(config: AgentConfig, given: dict[str, Model], journal: Journal) -> dict[str, Model]:
    """A client per role: given ones, else built from the config; the editor and the summarizer share
    the agent's client unless the config names their own."""
    models: dict[str, Model] = {}
    built: list[Model] = []
    for role in ROLES:
        if role in given:
            models[role] = given[role]
        elif role != "agent" and role not in config.models:
            models[role] = models["agent"]
        else:
            models[role] = build_model(config.model(role))
            built.append(models[role])
    for model in built:  # a scripted model built from its file skips the replies the journal holds
        if hasattr(model, "advance"):
            model.advance(sum(len(journal.reply_kinds(role)) for role, m in models.items() if m is model))
    return models


def _with_note(messages: Any, note: str) -> list[dict[str, Any]]:
    """The conversation with ``note`` added to its last (user) message."""
    out = [dict(m) for m in messages]
    last = out[-1]
    content = last["content"] if isinstance(last["content"], list) else [text_block(str(last["content"]))]
    out[-1] = {**last, "content": [*content, text_block(note)]}
    return out


def _merge(parts: list[ModelReply]) -> ModelReply:
    """One reply from a reply cut off and its continuations (texts joined, usage summed)."""
    if len(parts) == 1:
        return parts[0]
    text = "".join(p.text for p in parts)
    last = parts[-1]
    blocks = [text_block(text)] + [b for b in last.content if b.get("type") != "text"]
    usage = Usage(*(sum(getattr(p.usage, f) for p in parts) for f in
                    ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")))
    return ModelReply(tuple(blocks), last.stop_reason if last.stop_reason is not StopReason.MAX_TOKENS else StopReason.END_TURN,
                      usage, sum(p.cost_usd for p in parts), last.model)
