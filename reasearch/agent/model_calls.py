"""The agent's model calls: retries of unusable replies, a role's fallback model, and the budget holds.

:class:`ModelCalls` is the object through which :class:`~reasearch.agent.loop.Agent` calls models (the
agent holds one, so the loop stays one screen, and the two share no attributes): every call of a role
(``agent``, ``editor``, ``summarizer``) is held in the store at its worst cost before it is made (the run's
caps and its fleet's), journaled before its reply is used, and debited at its actual cost. A reply cut off
in plain text is continued; one cut off inside a tool call, or empty, is asked again; a role with a fallback
model sends an unusable reply (for an edit: code that does not compile, define the entry point or
import) to the fallback. On resume the journal's replies are used and debited as recorded; no model
is called again. :class:`ActiveClock` is the run's active wall time, which each journaled reply records
and a replayed one restores; the agent and its model calls hold the same clock.

Trust boundary: a model's reply is data (text and tool calls) checked before use; whatever a client
raises besides the project's own errors becomes a :class:`~reasearch.errors.ModelError` (resumable).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from reasearch.agent._routing import edit_problem, fallback_role
from reasearch.agent.config import ROLES, AgentConfig
from reasearch.agent.prompts import CONTINUE_MESSAGE, RETRY_CUT, RETRY_EMPTY
from reasearch.agent.tools.workspace import ExecFn, Workspace
from reasearch.errors import BudgetExceededError, ConfigError, ModelError
from reasearch.evaluators.base import Task
from reasearch.models import Model, ModelSpec, build_model
from reasearch.models.messages import ModelReply, ModelRequest, StopReason, Usage, text_block
from reasearch.runs.journal import Journal
from reasearch.runs.ledger import Unit
from reasearch.runs.model_budget import reserve_model_call, spent_hard_cap
from reasearch.runs.run import Run
from reasearch.runs.store import reservation_mark

__all__ = ["ActiveClock", "ModelCalls", "require_prices", "role_models"]


class ActiveClock:
    """Active wall seconds of a run, summed over its sessions (each journaled reply records the figure and a
    replayed one restores it).

    Args:
        now: monotonic seconds (tests pass a fake one).
    """

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self.now = now
        self._base, self._t0 = 0.0, now()

    def elapsed(self) -> float:
        """Active wall seconds so far."""
        return self._base + self.now() - self._t0

    def restore(self, elapsed_s: float) -> None:
        """Goes on from ``elapsed_s`` (what a replayed reply recorded) as of now."""
        self._base, self._t0 = float(elapsed_s), self.now()


class ModelCalls:
    """Model calls of an agent: journaled, held and debited, retried when unusable, sent to a fallback.

    Args:
        run: the run (its caps hold each call; its ledger is debited).
        config: the agent's settings (attempts, timeouts, the specs of its models).
        journal: the run's journal (every reply is recorded before it is used).
        models: a client per role (``agent``, ``editor``, ``summarizer``, ``ROLE:fallback``); the agent holds
            the same dict.
        task: the run's task (an edit's reply is checked against its entry points).
        workspace: the agent's workspace (where an edit's reply is test-imported).
        exec_fn: sandbox command runner for that import check (default: the engine's).
        clock: the run's active time (recorded with each reply, restored on replay).
        step: the agent's current step (the step of a call made without one).

    Attributes:
        last_usage: the usage of the last reply used (a continued reply: its last part's).
    """

    def __init__(self, run: Run, config: AgentConfig, journal: Journal, models: dict[str, Model], *, task: Task,
                 workspace: Workspace, exec_fn: ExecFn | None, clock: ActiveClock, step: Callable[[], int]) -> None:
        self.run, self.config, self.journal, self.models = run, config, journal, models
        self.task, self.workspace, self._exec_fn = task, workspace, exec_fn
        self.clock, self._step = clock, step
        self.last_usage = Usage()

    def complete(self, role: str, request: ModelRequest, *, kind: str, step: int | None = None) -> ModelReply:
        """A model call for ``role``; when the role has a fallback model and the reply is unusable (no
        usable reply; for an edit, code that does not compile, define the entry point or import), the
        fallback redoes the call. Every attempt of both models is journaled and debited."""
        step = self._step() if step is None else step
        fallback = fallback_role(role)
        if fallback not in self.models:
            return self._complete(role, request, kind=kind, step=step)
        rec = self.journal.get(step, f"fallback.{kind}")
        if rec is None:
            try:
                reply = self._complete(role, request, kind=kind, step=step)
                problem = self._reply_problem(kind, reply)
            except ModelError as exc:
                problem = f"no usable reply: {exc}"
            if problem is None:
                return reply
            rec = self.journal.record(step, f"fallback.{kind}", {
                "role": role, "from": self.models[role].name, "to": self.models[fallback].name, "reason": problem})
        else:  # replaying: the cheap attempts are debited as recorded (never called again), then the fallback's
            for attempt in range(self.config.max_reply_attempts):
                key = kind if attempt == 0 else f"{kind}.{attempt}"
                if (cheap := self.journal.get(step, key)) is None:
                    break
                self._debit(step, f"{role}:{key}", ModelReply.from_dict(cheap["reply"]))
        return self._complete(fallback, request, kind=f"{kind}.fallback", step=step)

    def _reply_problem(self, kind: str, reply: ModelReply) -> str | None:
        """Why a role's reply should go to its fallback (edits only: the other kinds fall back on errors)."""
        if kind != "edit_reply":
            return None
        return edit_problem(reply.text, self.task.spec.entries, workspace=self.workspace.root, exec_fn=self._exec_fn,
                            timeout_s=min(30.0, self.config.tool_timeout_s), memory_mb=self.config.tool_memory_mb,
                            sandbox_mode=self.config.sandbox_mode)

    def endpoints(self) -> dict[str, str | None]:
        """Where each role's model sends its calls (None: a model that calls nothing, e.g. scripted)."""
        return {role: getattr(m, "endpoint", None) for role, m in self.models.items()}

    def _complete(self, role: str, request: ModelRequest, *, kind: str, step: int) -> ModelReply:
        """A model call for ``role``, journaled and debited; empty or cut-off replies are recovered.

        A reply cut off in plain text is continued; one cut off inside a tool call, or empty, is asked
        again. Every attempt is recorded and debited; after ``max_reply_attempts`` it raises ModelError.
        """
        model, messages = self.models[role], list(request.messages)
        parts: list[ModelReply] = []
        for attempt in range(self.config.max_reply_attempts):
            key = kind if attempt == 0 else f"{kind}.{attempt}"
            rec = self.journal.get(step, key)
            token: str | None = None
            if rec is None:
                self._check_money()
                token, call_request = self._reserve_call(role, model, replace(request, messages=messages),
                                                         step=step, answer_kind=key)
                try:
                    reply = _call(model, call_request)
                except Exception:
                    self.run.release(token)  # the client raised: no answer, nothing to pay; the hold goes back
                    raise
                # Answered: should this write fail (a full disk), the hold stays and the resume charges it at
                # its reservation (Store.reclaim/takeover): an answered call is never dropped unpaid.
                rec = self.journal.record(step, key, {"role": role, "model": model.name, "attempt": attempt,
                                                      "reply": reply.to_dict(), "elapsed_s": self.clock.elapsed(),
                                                      "reservation": reservation_mark(token)})
            elif self.journal.replaying(step):
                self.clock.restore(float(rec.get("elapsed_s", 0.0)))
            reply = ModelReply.from_dict(rec["reply"])
            self.last_usage = reply.usage
            self._debit(step, f"{role}:{key}", reply, token)
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
        why = spent_hard_cap(self.run.remaining())
        if why is not None:
            raise BudgetExceededError(f"{why}: no further model call")

    def _reserve_call(self, role: str, model: Model, request: ModelRequest, *, step: int = -1,
                      answer_kind: str = "") -> tuple[str, ModelRequest]:
        """Holds one model call, its tokens and its dollars at their worst (the prompt's estimate plus the
        reply's max tokens, at the model's price) in the store before the call: the run's caps and its
        fleet's are then held by every driver and fleet member calling at once, not only checked. Near
        a token or dollar cap the reply's limit is lowered to what is left (the request returned).
        A refusal stops the run (BudgetExceededError) with the cap that refused it."""
        spec = getattr(model, "spec", None)
        token, refusal, request = reserve_model_call(self.run, request,
                                                     spec if isinstance(spec, ModelSpec) else self.config.model(role),
                                                     step=step, answer_kind=answer_kind)
        if token is None:  # no token exactly when a cap refused the call
            raise BudgetExceededError(refusal or "the model call could not be reserved")
        return token, request

    def _debit(self, step: int, note: str, reply: ModelReply, token: str | None = None) -> None:
        """The call's actual cost, debited together with the release of its reservation (the unused part returns)."""
        self.run.settle(token, {Unit.MODEL_CALLS: 1.0, Unit.TOKENS: float(reply.usage.total),
                                Unit.DOLLARS: float(reply.cost_usd or 0.0)}, step=step, note=note)


def require_prices(config: AgentConfig) -> None:
    """Raises ConfigError unless every model that can spend has a price (a dollar cap needs them)."""
    specs = [(role, config.model(role)) for role in ROLES]
    specs += [(f"{role} fallback", spec) for role, spec in config.fallbacks.items()]
    for role, spec in specs:
        if spec.provider != "scripted" and spec.price is None:
            raise ConfigError(f"the run caps dollars but no price is known for the {role} model {spec.name!r}: "
                              "give price_in and price_out (USD per million tokens; --price-in/--price-out)")


def role_models(config: AgentConfig, given: dict[str, Model], journal: Journal) -> dict[str, Model]:
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
            models[role] = build_model(config.model(role), seed=journal.run.seed)
            built.append(models[role])
    for role, spec in config.fallbacks.items():
        key = fallback_role(role)
        models[key] = given[key] if key in given else build_model(spec, seed=journal.run.seed)
        if key not in given:
            built.append(models[key])
    for model in built:  # a scripted model built from its file skips the replies the journal holds
        if hasattr(model, "advance"):
            model.advance(sum(len(journal.reply_kinds(role)) for role, m in models.items() if m is model))
    return models


def _call(model: Model, request: ModelRequest) -> ModelReply:
    """``model.complete``; whatever a client raises besides our own errors becomes a ModelError (resumable)."""
    try:
        reply = model.complete(request)
    except (ModelError, BudgetExceededError, KeyboardInterrupt):
        raise
    except Exception as exc:  # a client bug or an endpoint nobody anticipated: the run stays resumable
        raise ModelError(f"{model.name} failed: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}") from exc
    if not isinstance(reply, ModelReply):
        raise ModelError(f"{model.name} returned {type(reply).__name__}, not a ModelReply")
    return reply


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
    return ModelReply(
        tuple(blocks),
        last.stop_reason if last.stop_reason is not StopReason.MAX_TOKENS else StopReason.END_TURN,
        usage,
        sum(p.cost_usd for p in parts),
        last.model,
    )
