"""OpenEvolve's evaluator contract for any registered program task.

OpenEvolve (0.4.0) imports a user file and calls ``evaluate(program_path)``, taking a dict of metrics or
an ``EvaluationResult(metrics, artifacts)``; it ranks programs by ``metrics["combined_score"]`` and
scores its own failures (its timeout, an exception) 0.0. Here ``combined_score`` is
:func:`~reasearch.adapters.result_rank` (a valid program > 0.0, every failure == 0.0), the raw score and
the task's numeric metrics sit beside it, and the feedback and status travel as artifacts.

Trust boundary: the program file is untrusted; it runs only in the task's sandbox, which kills it at the
task's time limit (OpenEvolve's own timeout abandons a thread and never stops it). OpenEvolve is imported
only to build its result type; without it the metrics dict is returned (its backward-compatible form).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reasearch.adapters._program import evaluate_file, numeric_metrics, task_for
from reasearch.adapters._rank import result_rank
from reasearch.evaluators.result import EvalResult
from reasearch.evaluators.spec import TaskSpec

__all__ = ["evaluate_program", "evaluator_source", "openevolve_fields"]


def openevolve_fields(result: EvalResult, spec: TaskSpec) -> tuple[dict[str, float], dict[str, str]]:
    """(metrics, artifacts) of one result in OpenEvolve's shape."""
    metrics = {"combined_score": result_rank(result, spec), **numeric_metrics(result)}
    if result.ok and result.score is not None:
        metrics["score"] = float(result.score)
        if result.normalized_score is not None:
            metrics["normalized_score"] = float(result.normalized_score)
    metrics["wall_s"] = float(result.wall_s)
    artifacts = {"status": result.status.value if hasattr(result.status, "value") else str(result.status),
                 "feedback": result.feedback}
    if not result.ok:
        artifacts["failure_stage"] = "evaluation"
    return metrics, artifacts


def evaluate_program(task_id: str, program_path: str | Path, *, params: Mapping[str, Any] | None = None,
                     seed: int | None = 0) -> Any:
    """Evaluates one program for OpenEvolve: an ``EvaluationResult`` when OpenEvolve is importable, else a dict.

    Args:
        task_id: a registered program task, e.g. ``circle_packing/n26-v1``.
        program_path: the file OpenEvolve wrote.
        params: the task's constructor parameters.
        seed: passed to the task (recorded in provenance).
    """
    task = task_for(task_id, params)
    result = evaluate_file(task, program_path, seed=seed)
    metrics, artifacts = openevolve_fields(result, task.spec)
    try:
        from openevolve.evaluation_result import EvaluationResult
    except ImportError:
        return metrics
    return EvaluationResult(metrics=metrics, artifacts=dict(artifacts))


_TEMPLATE = '''"""OpenEvolve evaluator for {task_id}, written by `reasearch export-evaluator`.

Every program runs in reasearch's sandbox (killed at the task's limit); combined_score ranks a valid
program above every failure (0.0). The raw score is metrics["score"]; feedback is an artifact.
"""

from reasearch.adapters.openevolve import evaluate_program

TASK_ID = {task_id!r}
PARAMS = {params!r}
SEED = {seed!r}


def evaluate(program_path):
    return evaluate_program(TASK_ID, program_path, params=PARAMS, seed=SEED)
'''


def evaluator_source(task_id: str, params: Mapping[str, Any] | None = None, *, seed: int | None = 0) -> str:
    """The text of an ``evaluator.py`` OpenEvolve loads for ``task_id`` (the task is checked to exist)."""
    task_for(task_id, params)
    return _TEMPLATE.format(task_id=task_id, params=dict(params or {}), seed=seed)
