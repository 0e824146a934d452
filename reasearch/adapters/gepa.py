"""GEPA's contracts for the registered prompt tasks (``gsm8k/v1``, ``prompt/jsonl-v1``).

GEPA (0.1.4) takes either an ``optimize_anything`` evaluator ``(candidate, example) -> (score, side_info)``
or a ``GEPAAdapter`` with ``evaluate(batch, candidate, capture_traces) -> EvaluationBatch`` and
``make_reflective_dataset``. Both here draw examples only from the task's train split (per-example
scores, the reference answer and the student's output as side information) and its validation split
(per-example scores only: no input, answer or output leaves it; ``validation_result`` gives the task's
aggregate). The test split is sealed: nothing here reads it.

Trust boundary: the prompt GEPA proposes is untrusted text; it reaches only the student through the
``caller`` (pass a run's metered caller so the calls are charged to its ledger and stop at its budget).
A failed student call is a failure of that example (score 0.0 and the error), never a right answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reasearch.errors import ConfigError
from reasearch.evaluators.kinds import PromptOptions
from reasearch.evaluators.prompt import DirectCaller, Example, PromptTask, StudentCaller
from reasearch.evaluators.result import EvalResult, Status

__all__ = ["COMPONENT", "PromptEvaluator", "PromptGEPAAdapter", "ValidationItem", "gepa_datasets"]

COMPONENT = "system_prompt"


@dataclass(frozen=True, slots=True)
class ValidationItem:
    """A validation example as GEPA sees it: an opaque index (its text stays on the trusted side)."""

    index: int


def gepa_datasets(task: PromptTask) -> tuple[list[Example], list[ValidationItem]]:
    """(trainset, valset) for GEPA: the train examples, and opaque handles to the validation ones."""
    return list(task.examples("train")), [ValidationItem(i) for i in range(len(task.examples("validation")))]


def _prompt_of(candidate: str | Mapping[str, str]) -> str:
    if isinstance(candidate, str):
        return candidate
    if isinstance(candidate, Mapping) and isinstance(candidate.get(COMPONENT), str):
        return candidate[COMPONENT]
    raise ConfigError(f"a GEPA candidate for a prompt task is a string or {{{COMPONENT!r}: text}}")


class PromptEvaluator:
    """Scores one prompt on examples of a prompt task, for GEPA (both contracts use it)."""

    def __init__(self, task: PromptTask, caller: StudentCaller | None = None) -> None:
        if not isinstance(task, PromptTask):
            raise ConfigError(
                f"{getattr(task, 'spec', task)!r} is not a prompt task; GEPA's adapter is for prompt tasks"
            )
        self.task = task
        self.caller = caller if caller is not None else DirectCaller(task.student_client())

    def _resolve(self, item: Any) -> tuple[Example, bool]:
        if isinstance(item, ValidationItem):
            examples = self.task.examples("validation")
            if not 0 <= item.index < len(examples):
                raise ConfigError(f"validation item {item.index} is out of range (0..{len(examples) - 1})")
            return examples[item.index], False
        if isinstance(item, Example) and item in self.task.examples("train"):
            return item, True
        raise ConfigError("GEPA's examples must come from gepa_datasets(task): train examples or validation items")

    def score_batch(self, prompt: str, items: Sequence[Any]) -> list[tuple[float, dict[str, Any], str]]:
        """(score, side information, output) per item; validation items carry no side information."""
        resolved = [self._resolve(item) for item in items]
        problem = self.task.prompt_problem(prompt)
        if problem is not None:
            return [(0.0, {"error": f"invalid prompt: {problem}"} if train else {}, "") for _, train in resolved]
        examples = [ex for ex, _ in resolved]
        replies = self.caller.call_batch(self.task.requests(prompt, examples))
        out: list[tuple[float, dict[str, Any], str]] = []
        for (ex, train), judgment, reply in zip(resolved, self.task.judge(examples, replies), replies, strict=True):
            score = float(judgment.value) if judgment.status is Status.OK else 0.0
            if not train:
                out.append((score, {}, ""))
                continue
            info: dict[str, Any] = {"Input": ex.input, "Expected": ex.answer, "Outcome": judgment.kind}
            if reply.ok:
                info["Output"] = reply.text
                info["Parsed answer"] = judgment.prediction
            else:
                info["error"] = f"{reply.status.value}: {reply.error}"
            out.append((score, info, reply.text if reply.ok else ""))
        return out

    def __call__(
        self, candidate: str | Mapping[str, str], example: Any = None, **_: Any
    ) -> tuple[float, dict[str, Any]]:
        """``optimize_anything``'s evaluator: one example's score and side information."""
        if example is None:
            raise ConfigError(
                "pass dataset=trainset (and valset) from gepa_datasets(task): prompts are scored per example"
            )
        row = self.score_batch(_prompt_of(candidate), [example])[0]
        return row[0], row[1]

    def validation_result(self, candidate: str | Mapping[str, str]) -> EvalResult:
        """The task's aggregate validation result of a prompt (what ``reasearch eval`` reports)."""
        return self.task.evaluate(_prompt_of(candidate), options=PromptOptions("validation", self.caller))


class PromptGEPAAdapter:
    """A ``GEPAAdapter`` (evaluate + make_reflective_dataset) over one prompt task's component."""

    propose_new_texts = None

    def __init__(self, task: PromptTask, caller: StudentCaller | None = None) -> None:
        self.evaluator = PromptEvaluator(task, caller)

    def evaluate(self, batch: Sequence[Any], candidate: Mapping[str, str], capture_traces: bool = False) -> Any:
        from gepa.core.adapter import EvaluationBatch

        rows = self.evaluator.score_batch(_prompt_of(candidate), batch)
        return EvaluationBatch(outputs=[r[2] for r in rows], scores=[r[0] for r in rows],
                               trajectories=[r[1] for r in rows] if capture_traces else None)

    def make_reflective_dataset(self, candidate: Mapping[str, str], eval_batch: Any,
                                components_to_update: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        records = [{**info, "Score": score}
                   for info, score in zip(eval_batch.trajectories or [], eval_batch.scores, strict=False) if info]
        return {name: records for name in components_to_update}
