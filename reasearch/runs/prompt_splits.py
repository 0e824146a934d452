"""The trusted side of a prompt run: what an optimizer of a system prompt may ask of the task's splits.

:class:`PromptSplits` serves the agent's prompt tools (``agent/tools/prompt.py``) and the baseline
methods (``methods/_driver.py``): train examples with the student's outputs and correctness, validation
aggregates only (recorded as the run's evaluations), and never the sealed test split, which only
:func:`score_test` reaches (logged as a :data:`TEST_EVENT`, never shown to an optimizer).
:func:`prompt_task_of` is the run's task as a prompt task (GEPA's run glue uses it too).

Why here: these pieces need a :class:`~reasearch.runs.run.Run` (its store, ledger and events) and the
run's :class:`~reasearch.runs.students.StudentLedger`, and their users are the agent, the methods and
the peer adapters (``adapters/gepa_run.py``), all above ``runs/``. ``adapters/`` is glue for other
optimizers' loops, which this is not; ``runs/`` is where the run side of a task kind lives (the student
ledger beside it), so a prompt run's splits are served here.

Trust boundary: prompts come from an optimizer (a model) and are untrusted text; they reach the student
only through the run's :class:`~reasearch.runs.students.StudentLedger` (stored, debited, capped). Train
ids are checked against the train split so no validation or test example is ever handed out.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reasearch.errors import ConfigError
from reasearch.evaluators.base import candidate_sha256
from reasearch.evaluators.kinds import PromptKind, PromptOptions, task_kind
from reasearch.evaluators.prompt import Example, PromptTask, StudentClient
from reasearch.evaluators.result import EvalResult, Status
from reasearch.runs.events import EventKind
from reasearch.runs.run import Run
from reasearch.runs.store import CandidateRecord, EvaluationRecord
from reasearch.runs.students import StudentLedger

__all__ = ["PromptSplits", "TrainOutcome", "score_test", "prompt_task_of", "TEST_EVENT"]

TEST_EVENT = EventKind.TEST_RESULT


def prompt_task_of(run: Run) -> PromptTask:
    """The run's task, which must be a prompt task (else a one-line :class:`ConfigError`)."""
    match task_kind(run.task):
        case PromptKind(task=task):
            return task
        case kind:
            raise ConfigError(f"run {run.id} is on {run.task_id}, a {kind.name} task, not a prompt task")


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


class PromptSplits:
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
                "test": "sealed", "temperature": t.params.temperature, "max_tokens": t.params.max_tokens,
                "concurrency": t.params.concurrency, "max_prompt_chars": 20_000}

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
        random.Random(f"minibatch:{self.task.params.split_seed}").shuffle(order)
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
        result = self.task.evaluate(prompt, seed=self.run.seed, options=PromptOptions("validation", ledger))
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
    result = task.evaluate(prompt, seed=run.seed, options=PromptOptions("test", ledger))
    run.log_event(step, TEST_EVENT, {"candidate": cid, "result": result.to_dict()})
    return cid, result
