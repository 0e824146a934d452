"""The harness every baseline method shares: journaled model calls, evaluations on the run, budget checks.

A method drives the same :class:`~reasearch.runs.Run` as the agent: evaluations go through
:meth:`Run.evaluate` (program tasks) or :meth:`PromptSplits.validate` (prompt tasks), so the budget
unit, cache, ledger and store are the agent's. Every model call is one step: its reply is written to the
run's event log (``method_reply``) before anything acts on it, and debited (model calls, tokens,
dollars) with the agent's ledger notes, idempotently per step. A method's loop is a deterministic
function of its seed, the recorded replies and the recorded evaluations, so a run killed at any point
resumes by running the loop again from the start: recorded steps replay from the store without calling
the model or the evaluator, and nothing is charged twice.

Trust boundary: model replies and candidate sources are untrusted text. They are only parsed here
(fenced blocks, SEARCH/REPLACE edits: in linear time with size caps, see :mod:`reasearch.models.reply_text`;
``compile`` as a syntax check), never executed on the host;
candidates run only inside the sandbox via the run.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from reasearch.errors import BudgetExceededError, ConfigError, ModelError
from reasearch.evaluators.base import candidate_sha256
from reasearch.evaluators.kinds import ProgramKind, PromptKind, RepositoryKind, task_kind
from reasearch.evaluators.result import EvalResult, Status
from reasearch.models import Model, ModelSpec
from reasearch.models.messages import ModelReply, ModelRequest, text_block
from reasearch.models.reply_text import apply_search_replace, fenced_blocks, search_replace_edits
from reasearch.runs.events import EventKind
from reasearch.runs.journal import Journal
from reasearch.runs.ledger import Unit
from reasearch.runs.model_budget import reserve_model_call, spent_hard_cap
from reasearch.runs.run import Run
from reasearch.runs.steering import Steering, start_source
from reasearch.runs.store import reservation_mark

__all__ = ["Candidate", "MethodDriver", "apply_edits", "config_from", "last_block"]

REPLY_EVENT = EventKind.METHOD_REPLY  # one model call of a method (the reply, recorded before it is used)
FINAL_EVENT = EventKind.FINAL
MAX_IDLE = 25  # proposals in a row that spent no budget (no code, or already evaluated) before a method stops
_MAX_CANDIDATE = 2 * 1024 * 1024  # a longer proposal is dropped, never evaluated cut

C = TypeVar("C")


def config_from(cls: type[C], data: Mapping[str, Any] | None) -> C:
    """An instance of the frozen config dataclass ``cls`` from plain data; unknown keys are an error."""
    data = dict(data or {})
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"unknown {cls.__name__} keys {unknown}; known: {sorted(known)}")
    for key, value in list(data.items()):
        if isinstance(value, list):
            data[key] = tuple(value)
    return cls(**data)


def last_block(text: str, fence: str) -> str | None:
    """The last fenced block of ``text`` tagged ``fence`` (or untagged); None when there is none."""
    tags = {"python": ("python", "py", ""), "text": ("text", "txt", "")}[fence]
    blocks = [body for tag, body in fenced_blocks(text) if tag.lower() in tags]
    if not blocks:
        return None
    body = blocks[-1]
    return body.rstrip() + "\n" if fence == "python" else body.strip()


def apply_edits(source: str, reply: str) -> str | None:
    """``source`` with the reply's SEARCH/REPLACE edits applied in order (None when it has none, one does
    not match, the reply holds more than ``MAX_EDITS`` or the result would pass the candidate cap: a partial
    edit is never evaluated). Linear in the reply (:mod:`reasearch.models.reply_text`)."""
    edits = search_replace_edits(reply)
    if not edits:
        return None
    return apply_search_replace(source, edits, max_chars=_MAX_CANDIDATE)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One evaluated candidate as a method keeps it."""

    step: int
    id: str
    source: str
    parent: str | None
    result: EvalResult

    @property
    def ok(self) -> bool:
        return self.result.status is Status.OK and self.result.score is not None


class MethodDriver:
    """A method's door to its run and its model (see the module docstring).

    Args:
        run: the run (created or reopened; the driver never creates one).
        model: the proposal model; requests carry no tools, replies hold one fenced block.
        method: the method's name (recorded with each reply).
    """

    def __init__(self, run: Run, model: Model, *, method: str) -> None:
        self.run = run
        self.model = model
        self.method = method
        self.task = run.task
        self.spec = self.task.spec
        kind = task_kind(self.task)
        if isinstance(kind, RepositoryKind):
            raise ConfigError(f"the {method} method drives program and prompt tasks; {self.spec.id} is a "
                              f"{kind.name} task (use the agent for it)")
        self.kind: ProgramKind | PromptKind = kind
        self.fence = "python" if isinstance(kind, ProgramKind) else "text"
        self._seed: str | None = None  # the seed program, read once: what a proposal without a parent derives from
        self.splits: Any = None
        if isinstance(kind, PromptKind):
            from reasearch.runs.prompt_splits import PromptSplits

            self.splits = PromptSplits(run)
        self.unit: Unit = run.eval_unit
        self.needed: float = float(run.evaluation_estimate().get(self.unit, 1.0))
        self.journal = Journal(run)
        self.steering = Steering(run, self.journal)  # a person's interventions, at the top of each iteration
        # The last step an earlier driver wrote before its conclusion: up to it the loop replays and never
        # stops on the budget (the store's totals already hold the spend of the steps still to replay).
        ending = {step for step in self.journal.steps()
                  if any(kind in (FINAL_EVENT, "test_result") for kind in self.journal.kinds(step))}
        written = self.journal.steps()
        written += [ev.step for ev in run.store.evaluations(run.id)] + [e.step for e in run.store.ledger(run.id)]
        self.replay_until = max((step for step in written if step not in ending), default=0)
        self.step = 0
        self.idle = 0  # proposals in a row that spent nothing
        self.history: list[Candidate] = []
        self.model_calls = 0
        # Steps, history and counters: a peer's proxy serves its workers' requests on threads at once. The
        # model call and the evaluation run outside it; the run reserves each against its caps atomically.
        self._lock = threading.RLock()

    # ------------------------------------------------------------ journal
    def record(self, step: int, kind: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        """Writes an event once (idempotent per step and kind) and returns what is stored."""
        return self.journal.record(step, kind, payload)

    def recorded(self, step: int, kind: str) -> dict[str, Any] | None:
        return self.journal.get(step, kind)

    def next_step(self) -> int:
        with self._lock:
            self.step += 1
            return self.step

    # ------------------------------------------------------------ model
    def ask(self, system: str, user: str, *, note: str) -> str:
        """One model call (no tools) as one step: replayed when recorded, else made, recorded, debited.

        Raises:
            BudgetExceededError: a token, dollar or model-call cap is spent (nothing is called).
            ModelError: the model failed after its retries (the run stays resumable).
        """
        return self.ask_reply(system, user, note=note)[1].text

    def ask_reply(self, system: str, user: str, *, note: str) -> tuple[int, ModelReply]:
        """:meth:`ask` returning its step and the whole reply (thread-safe: callers at once get their own steps).

        Raises:
            BudgetExceededError: a token, dollar or model-call cap is spent (nothing is called).
            ModelError: the model failed after its retries (the run stays resumable).
        """
        step = self.next_step()
        if notes := self.steering.state.notes(self.steering.state.take_hints()):  # hints once, bans until lifted
            user = f"{user}\n\n{notes}"
        rec = self.recorded(step, REPLY_EVENT)
        token: str | None = None
        if rec is None:
            self._check_money()
            request = ModelRequest(system, [{"role": "user", "content": [text_block(user)]}])
            # Held in the store before the call (the run's caps and its fleet's, whoever else calls at
            # once), at its worst case; the actual cost is settled below and the rest returned.
            spec = getattr(self.model, "spec", None)
            token, refusal, request = reserve_model_call(self.run, request,
                                                         spec if isinstance(spec, ModelSpec) else None,
                                                         step=step, answer_kind=REPLY_EVENT)
            if token is None:  # no token exactly when a cap refused the call
                raise BudgetExceededError(refusal or "the model call could not be reserved")
            try:
                reply = _call(self.model, request)
            except Exception:
                self.run.release(token)  # the client raised: no answer, nothing to pay
                raise
            # Answered: should this write fail (a full disk), the hold stays and the resume charges it at its
            # reservation (Store.reclaim/takeover): an answered call is never dropped unpaid.
            rec = self.record(step, REPLY_EVENT, {"method": self.method, "note": note, "model": self.model.name,
                                                  "reply": reply.to_dict(), "reservation": reservation_mark(token)})
        reply = ModelReply.from_dict(rec["reply"])
        ledger_note = f"{self.method}:{note}"
        self.run.settle(token, {Unit.MODEL_CALLS: 1.0, Unit.TOKENS: float(reply.usage.total),
                                Unit.DOLLARS: float(reply.cost_usd or 0.0)}, step=step, note=ledger_note)
        with self._lock:
            self.model_calls += 1
        return step, reply

    def _check_money(self) -> None:
        why = spent_hard_cap(self.run.remaining())
        if why is not None:
            raise BudgetExceededError(f"{why}: no further model call")

    def candidate_from(self, reply: str, parent_source: str | None = None) -> str | None:
        """The full candidate a reply proposes: SEARCH/REPLACE edits of ``parent_source`` when it holds
        some, else its last fenced block; None when there is none, it is oversized, or (programs) it
        does not compile (the cascade's free first stage: nothing is spent on it), or the task's
        :meth:`~reasearch.evaluators.base.Task.constrain` drops it (an edit outside an EVOLVE-BLOCK is reverted)."""
        source = apply_edits(parent_source, reply) if parent_source is not None else None
        if source is None:
            source = last_block(reply, self.fence)
        if not source or not source.strip() or len(source) > _MAX_CANDIDATE:
            return None
        if isinstance(self.kind, ProgramKind):
            if parent_source is None and self._seed is None:
                self._seed = self.seed_program()
            constrained = self.task.constrain(parent_source if parent_source is not None else str(self._seed), source)
            if constrained is None or len(constrained) > _MAX_CANDIDATE:
                return None
            source = constrained
            try:
                compile(source, "candidate.py", "exec")
            except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError):
                return None
        return source

    # ------------------------------------------------------------ evaluation
    def evaluate(self, source: str, *, parent: str | None, note: str) -> Candidate:
        """Evaluates a candidate as the next step (one budget unit, or nothing for a repeat in this run)."""
        step = self.next_step()
        if self.splits is not None:
            cid, result = self.splits.validate(source, step=step, parent=parent, note=note)
        else:
            cid = candidate_sha256(source)
            result = self.run.evaluate(source, step=step, parent=parent, note=note)
        cand = Candidate(step, cid, source, parent, result)
        with self._lock:
            self.history.append(cand)
            self.idle = self.idle + 1 if result.cached else 0
        return cand

    def skipped(self) -> None:
        """A proposal that gave nothing to evaluate (no block, no compile): counts toward :data:`MAX_IDLE`."""
        with self._lock:
            self.idle += 1

    def seed_program(self) -> str:
        """Where the method starts: the candidate a forked run starts from, else the task's seed program."""
        return start_source(self.run) or self.task.seed_program()

    def pinned(self) -> Candidate | None:
        """The evaluated candidate a person pinned as the parent of the next proposals, or None."""
        cid = self.steering.state.pin
        if cid is None:
            return None
        with self._lock:
            return next((c for c in reversed(self.history) if c.id == cid), None)

    def seen(self, source: str) -> Candidate | None:
        cid = candidate_sha256(source)
        with self._lock:
            return next((c for c in self.history if c.id == cid), None)

    def better(self, a: Candidate, b: Candidate | None) -> bool:
        """True when ``a`` scored OK and beats ``b`` in the task's direction."""
        score, other = a.result.score, None if b is None or not b.ok else b.result.score
        return a.ok and score is not None and (other is None or self.spec.is_better(float(score), float(other)))

    def best(self) -> Candidate | None:
        best: Candidate | None = None
        with self._lock:
            history = list(self.history)
        for c in history:
            if self.better(c, best):
                best = c
        return best

    def stop_reason(self) -> str | None:
        """Why the method must stop now (None: go on): its evaluation unit or a hard cap is spent, or it idles.
        Never while replaying the steps an earlier driver recorded (it went on there, so the replay does too).
        First, a person's interventions are applied at the next step (a stop ends the method; a pause waits)."""
        self.steering.at(self.step + 1)
        if (stopped := self.steering.stop_reason) is not None:
            return stopped
        if self.step < self.replay_until:
            return None
        remaining = self.run.remaining()
        why = spent_hard_cap(remaining)
        if why is not None:
            return why
        left = remaining.get(self.unit)
        if left is not None and left + 1e-9 < self.needed:
            return f"the {self.unit.value} budget is spent"
        if self.idle >= MAX_IDLE:
            return f"{MAX_IDLE} proposals in a row spent nothing (no new candidate)"
        return None

    # ------------------------------------------------------------ the end
    def conclude(self, reason: str) -> Candidate | None:
        """Records the final choice (the best OK candidate) and ends the run; a prompt's final prompt is
        scored on the sealed test split by the trusted side, as the agent's is."""
        best = self.best()
        step = self.next_step()
        self.record(step, FINAL_EVENT, {"candidate": best.id if best else None,
                                        "score": best.result.score if best else None, "chosen_by": self.method,
                                        "stop_reason": reason, "model_calls": self.model_calls})
        if self.splits is not None and best is not None and not self.run.events(kind="test_result"):
            from reasearch.runs.prompt_splits import score_test

            score_test(self.run, client=self.splits.client)
        self.run.finish(state="finished", final_candidate=best.id if best else None, reason=f"{self.method}: {reason}")
        return best

    def describe_result(self, cand: Candidate, limit: int = 4000) -> str:
        """What the model is told of an evaluation: status, score and the evaluator's feedback (cut)."""
        r = cand.result
        lines = [f"status: {r.status.value}"]
        if r.score is not None:
            lines.append(f"score: {r.score:.12g} ({self.spec.direction})")
        if r.feedback:
            lines.append("feedback:\n" + r.feedback[-limit:])
        return "\n".join(lines)

    def system_prompt(self) -> str:
        """The system prompt of every proposal: what to write and in which form."""
        what = "program" if isinstance(self.kind, ProgramKind) else "system prompt for the student model"
        return (f"You improve a {what} for an optimization task. Reply with exactly one fenced ```{self.fence} "
                f"block holding the full new {what} (not a fragment); text outside the block is ignored.")

    def block(self, source: str) -> str:
        """``source`` in this task's fence."""
        return f"```{self.fence}\n{source.rstrip()}\n```"


def _call(model: Model, request: ModelRequest) -> ModelReply:
    try:
        reply = model.complete(request)
    except (ModelError, BudgetExceededError, KeyboardInterrupt):
        raise
    except Exception as exc:  # a client bug or an unexpected endpoint: the run stays resumable
        raise ModelError(f"{model.name} failed: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}") from exc
    if not isinstance(reply, ModelReply):
        raise ModelError(f"{model.name} returned {type(reply).__name__}, not a ModelReply")
    return reply
