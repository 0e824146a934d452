"""Student-model calls of a run: stored, debited and capped one by one (prompt tasks).

:class:`StudentLedger` is the caller a prompt task uses inside a run. For each call, in order: a call
this run already paid (the same endpoint, model, prompt, input, sampling parameters and sample index) is
served from the store at no cost; a call that does not fit under the run's ``student_calls`` cap is
``REFUSED`` and not made; otherwise it is made, and its reply is stored together with its debits (one
``student_calls`` unit, its tokens, and its dollars when the student is priced) in one transaction.
Reservations live in the store while calls are in flight, so concurrent calls (threads, or several
drivers of the run) cannot overspend the cap. A ``kill -9`` in the middle of a batch loses only calls in flight: every
answered call is already stored, and the resumed batch gets it for free. A call stored by another
run of the store is served without asking the student, but this run pays it once (as the run API
does for evaluations: equal budgets per run, whatever other runs did before).

A call that fails after its retries is recorded with its status and error, is not debited (no answer
was delivered) and is not served again: repeating it tries again.

:class:`PromptSession` is the trusted side of the agent's prompt tools: train examples with outputs
and correctness, validation aggregates only (recorded as the run's evaluations), and the sealed test
split, which only :func:`score_test` reaches.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reasearch.errors import ConfigError
from reasearch.evaluators.base import candidate_sha256
from reasearch.evaluators.prompt import Example, PromptTask, StudentClient, StudentReply, StudentRequest
from reasearch.evaluators.prompt._students import map_concurrently
from reasearch.evaluators.result import EvalResult, Status
from reasearch.runs.events import EventKind
from reasearch.runs.ledger import LedgerEntry, Unit, refusal_message
from reasearch.runs.run import Run
from reasearch.runs.store import CandidateRecord, EvaluationRecord

__all__ = ["StudentLedger", "PromptSession", "TrainOutcome", "score_test", "prompt_task_of", "TEST_EVENT"]

TEST_EVENT = EventKind.TEST_RESULT
# One call reserves one student call; a spent dollar or token cap (debited after the call) also stops it.
_ONE_CALL: dict[Unit | str, float] = {Unit.STUDENT_CALLS: 1.0, Unit.DOLLARS: 0.0, Unit.TOKENS: 0.0}
_NOTE_PREFIXES = ("student", "test", "shared")  # ledger notes of a run's student-call debits: PREFIX:KEY


def prompt_task_of(run: Run) -> PromptTask:
    task = run.task
    if not isinstance(task, PromptTask):
        raise ConfigError(f"run {run.id} is on {run.task_id}, not a prompt task")
    return task


class StudentLedger:
    """The stored, debited and capped student caller of one step of a run.

    Args:
        run: the run (its store holds the calls; its budget caps them).
        step: the step the calls belong to (ledger rows are keyed by it).
        client: the student's client (default: the run's task's).
        note: the ledger note prefix (``student``; the trusted test pass uses ``test``).
        enforce_cap: False for the trusted side's test pass (it is debited, not capped).
    """

    def __init__(self, run: Run, *, step: int, client: StudentClient | None = None, note: str = "student",
                 enforce_cap: bool = True) -> None:
        self.run = run
        self.step = int(step)
        self.client = client if client is not None else prompt_task_of(run).student_client()
        self.note = note
        self.enforce_cap = enforce_cap

    def call_batch(self, requests: Sequence[StudentRequest]) -> list[StudentReply]:
        """Replies in request order; the same call twice in a batch is made (and paid) once."""
        endpoint = self.client.spec.endpoint  # the same model name on another server is another call
        keys = [r.key(endpoint) for r in requests]
        unique = dict(zip(keys, requests, strict=True))
        replies = dict(
            zip(unique, map_concurrently(self._one, list(unique.items()), self.client.spec.concurrency), strict=True)
        )
        out, seen = [], set()
        for key in keys:
            reply = replies[key]
            out.append(reply.with_(cached=True) if key in seen and reply.ok else reply)
            seen.add(key)
        return out

    def _one(self, item: tuple[str, StudentRequest]) -> StudentReply:
        key, request = item
        store, run = self.run.store, self.run
        hit = store.student_call_get(key)
        if hit is not None:
            stored = StudentReply.from_dict(hit)
            if store.student_call_paid(run.id, [f"{p}:{key[:40]}" for p in _NOTE_PREFIXES]):
                return stored.with_(cached=True)  # a repeat within this run: free
        token, refused = run.reserve(_ONE_CALL, wait=True) if self.enforce_cap else (None, None)
        if refused is not None:
            unit, used, cap = refused
            return StudentReply(Status.REFUSED, error=refusal_message(unit, used, cap), attempts=0)
        try:
            if hit is not None:
                # This run's first use of a call another run paid: no request reaches the student, but
                # the run pays it as if it had made it (equal budgets per run, whatever other runs did).
                stored = stored.with_(cached=False, wall_s=0.0)
                store.debit_student_call(self._debits("shared", key, stored), release=token)
                return stored
            reply = self.client.complete(request)
            debits = self._debits(self.note, key, reply) if reply.ok else []
            recorded, fresh = store.record_student_call(run.id, self.step, key, request.model, reply.to_dict(), debits,
                                                        release=token)
            if fresh:
                return reply
            # another writer stored this call first (and did not charge this run): pay like a shared hit
            shared = StudentReply.from_dict(recorded).with_(cached=False, wall_s=reply.wall_s)
            store.debit_student_call(self._debits("shared", key, shared))
            return shared
        finally:
            if token is not None:
                run.release(token)

    def _debits(self, prefix: str, key: str, reply: StudentReply) -> list[LedgerEntry]:
        now, note = time.time(), f"{prefix}:{key[:40]}"
        out = [LedgerEntry(self.run.id, self.step, Unit.STUDENT_CALLS, 1.0, note, now)]
        if reply.input_tokens + reply.output_tokens:
            out.append(LedgerEntry(self.run.id, self.step, Unit.TOKENS, float(reply.input_tokens + reply.output_tokens),
                                   note, now))
        if reply.cost_usd:
            out.append(LedgerEntry(self.run.id, self.step, Unit.DOLLARS, float(reply.cost_usd), note, now))
        return out


@dataclass(frozen=True, slots=True)
class TrainOutcome:
    """One train example as the agent may see it: input, reference, the student's output and verdict."""

    id: str
    input: str
    reference: str
    output: str
    prediction: str
    kind: str
    correct: bool
    status: str
    cached: bool

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "input": self.input, "reference": self.reference, "output": self.output,
                "prediction": self.prediction, "kind": self.kind, "correct": self.correct, "status": self.status,
                "cached": self.cached}


class PromptSession:
    """The trusted side of a prompt run: what the agent's tools may ask of the splits.

    Train: examples, outputs and correctness. Validation: aggregates only. Test: not here (see
    :func:`score_test`).
    """

    def __init__(self, run: Run, *, client: StudentClient | None = None) -> None:
        self.run = run
        self.task = prompt_task_of(run)
        self._client = client

    @property
    def client(self) -> StudentClient:
        if self._client is None:
            self._client = self.task.student_client()
        return self._client

    def info(self) -> dict[str, Any]:
        """Split sizes, metric, student and failure kinds (no example of validation or test)."""
        t = self.task
        return {"task": t.spec.id, "student": t.student_spec().name, "metric": t.metric_name(),
                "train": len(t.examples("train")), "validation": len(t.examples("validation")),
                "test": "sealed", "temperature": t.temperature, "max_tokens": t.max_tokens,
                "concurrency": t.concurrency, "max_prompt_chars": 20_000}

    def train(self) -> tuple[Example, ...]:
        return self.task.examples("train")

    def train_examples(self, ids: Sequence[str]) -> list[Example]:
        """The train examples with these ids; any other id (validation, test, unknown) is an error."""
        by_id = {ex.id: ex for ex in self.train()}
        wrong = [i for i in ids if i not in by_id]
        if wrong:
            raise ConfigError(f"not train example ids: {wrong[:5]} (ids look like 'train-0' .. "
                              f"'train-{len(by_id) - 1}'; validation and test examples are not available)")
        return [by_id[i] for i in ids]

    def minibatch(self, index: int, size: int) -> list[Example]:
        """The ``index``-th minibatch of a fixed shuffle of train (epochs repeat the order)."""
        train = list(self.train())
        order = list(range(len(train)))
        random.Random(f"minibatch:{self.task.split_seed}").shuffle(order)
        size = max(1, min(int(size), len(train)))
        start = (int(index) * size) % len(train)
        picked = [order[(start + k) % len(train)] for k in range(size)]
        return [train[j] for j in picked]

    def run_train(self, prompt: str, ids: Sequence[str], *, step: int) -> list[TrainOutcome]:
        """Student outputs and correctness on train examples (each call stored and debited)."""
        problem = self.task.prompt_problem(prompt)
        if problem is not None:
            raise ConfigError(problem)
        examples = self.train_examples(ids)
        ledger = StudentLedger(self.run, step=step, client=self.client)
        replies = ledger.call_batch(self.task.requests(prompt, examples))
        judgments = self.task.judge(examples, replies)
        return [
            TrainOutcome(
                ex.id,
                ex.input,
                ex.reference or ex.answer,
                rep.text if rep.ok else f"[{rep.status.value}: {rep.error[:200]}]",
                j.prediction,
                j.kind,
                j.kind == "correct",
                rep.status.value,
                rep.cached,
            )
            for ex, rep, j in zip(examples, replies, judgments, strict=False)
        ]

    def validate(self, prompt: str, *, step: int, parent: str | None = None, note: str = "") -> tuple[str, EvalResult]:
        """Scores ``prompt`` on validation and records it as the run's evaluation at ``step``.

        Returns ``(candidate id, aggregate result)``; replaying a recorded step returns it unchanged.
        """
        cid = candidate_sha256(prompt) if isinstance(prompt, str) else ""
        existing = self.run.store.get_evaluation(self.run.id, int(step))
        if existing is not None:
            if existing.candidate_id != cid:
                raise ConfigError(f"step {step} of run {self.run.id} already evaluated another prompt")
            return cid, existing.result
        ledger = StudentLedger(self.run, step=step, client=self.client)
        result = self.task.evaluate(prompt, seed=self.run.seed, split="validation", caller=ledger)
        if result.status is Status.INVALID and not isinstance(prompt, str):
            return cid, result
        candidate = CandidateRecord(self.run.id, cid, prompt, parent, note, time.time())
        record = EvaluationRecord(self.run.id, int(step), cid, self.run.seed, result, time.time())
        stored, _ = self.run.store.record_evaluation(record, candidate, debit=(), cache_key=None)
        return cid, stored.result


def score_test(run: Run, *, prompt: str | None = None, client: StudentClient | None = None) -> tuple[str, EvalResult]:
    """The trusted side's score of the run's final prompt on the sealed test split.

    The prompt is ``prompt``, else the run's final candidate, else its best validated one. Calls are
    stored and debited like any (a repeat is free) but not capped: the cap governs the optimizer.
    The result is logged as a ``test_result`` event (never shown to the agent).

    Returns:
        ``(candidate id, result)``.
    """
    task = prompt_task_of(run)
    if prompt is None:
        record = run.store.get_run(run.id)
        cid = record.final_candidate
        if cid is None:
            best = run.best()
            if best is None:
                raise ConfigError(f"run {run.id} has no final or validated prompt to test")
            cid = best[0]
        prompt = run.candidate_source(cid)
    cid = candidate_sha256(prompt)
    step = run.last_step() + 1
    ledger = StudentLedger(run, step=step, client=client, note="test", enforce_cap=False)
    result = task.evaluate(prompt, seed=run.seed, split="test", caller=ledger)
    run.log_event(step, TEST_EVENT, {"candidate": cid, "result": result.to_dict()})
    return cid, result
