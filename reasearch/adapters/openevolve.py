"""OpenEvolve's evaluator contract for any registered program task.

OpenEvolve (0.4.0) imports a user file and calls ``evaluate(program_path)``, taking a dict of metrics or
an ``EvaluationResult(metrics, artifacts)``; it ranks programs by ``metrics["combined_score"]`` and
scores its own failures (its timeout, an exception) 0.0. Here ``combined_score`` is
:func:`~reasearch.adapters.result_rank` (a valid program > 0.0, every failure == 0.0), the raw score and
the task's numeric metrics sit beside it, and the feedback and status travel as artifacts.

Cascade: OpenEvolve (``cascade_evaluation``, on by default) runs ``evaluate_stage1`` first and the next
stage only when stage 1's ``combined_score`` clears ``cascade_thresholds[0]`` (0.5 by default); a stage
cut off by its own timeout leaves the earlier stage's result as the program's. So a stage-1 pass is
exported only where it can never rank above a valid full result: :func:`stage1_params` names the tasks
with a genuinely cheaper first stage of positive-scored results (EPLB: the first placement, scored on
the second window, instead of ten); a pass is ``combined_score`` 1.0 (every valid full result of those
tasks ranks above 1.0, and 1.0 clears any threshold up to 1), a failure 0.0; stage 2 is the full
evaluation, whose ``combined_score`` replaces stage 1's. Stage 1's own figures are ``stage1_*``.

Trust boundary: the program file is untrusted; it runs only in the task's sandbox, which kills it at the
task's time limit (OpenEvolve's own timeout abandons a thread and never stops it). OpenEvolve is imported
only to build its result type; without it the metrics dict is returned (its backward-compatible form).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reasearch.adapters._program import evaluate_file, numeric_metrics, pin_of, task_for
from reasearch.adapters._rank import result_rank
from reasearch.errors import ConfigError
from reasearch.evaluators.result import EvalResult
from reasearch.evaluators.spec import TaskSpec

__all__ = ["evaluate_program", "evaluate_stage1_program", "evaluator_source", "openevolve_fields", "stage1_fields",
           "stage1_params"]

STAGE1_PASS = 1.0  # a stage-1 pass: >= any cascade threshold up to 1, below every valid full result of a stage-1 task
# task family -> score variants whose valid results are all > 0 (so their rank, 1 + score, is above STAGE1_PASS)
_POSITIVE_SCORES = {"eplb": ("combined", "bal_gpu", "bal_expert")}


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


def stage1_params(spec: TaskSpec) -> dict[str, Any] | None:
    """The task parameters of ``spec``'s cheap first stage, or None when it has none worth a stage.

    Only EPLB has one: ``num_windows=2`` runs the candidate once (its placement for the first window,
    scored on the second) where the full evaluation runs it ten times; the same validity checks apply.
    Not for its ``adrs`` score (a penalty can make a valid result negative, ranking below a stage-1 pass)
    nor where the full run already has at most two windows. Circle packing and Heilbronn candidates
    build one fixed-size answer in one call (validity and the LP are under a millisecond after it), and
    txn_scheduling is minimized (a valid makespan ranks near 0.004, under any threshold a pass must clear).
    """
    family = spec.id.split("/", 1)[0]
    params = dict(spec.params)
    if family not in _POSITIVE_SCORES or spec.direction != "maximize":
        return None
    if params.get("score", "combined") not in _POSITIVE_SCORES[family]:
        return None
    windows = params.get("num_windows")
    if windows is not None and int(windows) <= 2:
        return None
    return {**params, "num_windows": 2}


def stage1_fields(result: EvalResult) -> tuple[dict[str, float], dict[str, str]]:
    """(metrics, artifacts) of a stage-1 result: ``combined_score`` 1.0 for a pass, 0.0 for a failure."""
    status = result.status.value if hasattr(result.status, "value") else str(result.status)
    metrics = {"combined_score": STAGE1_PASS if result.ok else 0.0, "stage1_passed": 1.0 if result.ok else 0.0,
               "stage1_wall_s": float(result.wall_s)}
    if result.ok and result.score is not None:
        metrics["stage1_score"] = float(result.score)
    artifacts = {"stage1_status": status, "stage1_feedback": result.feedback}
    if not result.ok:
        artifacts.update({"status": status, "feedback": result.feedback, "failure_stage": "stage1"})
    return metrics, artifacts


def evaluate_stage1_program(task_id: str, program_path: str | Path, *, params: Mapping[str, Any] | None = None,
                            seed: int | None = 0, pin: Mapping[str, Any] | None = None) -> Any:
    """OpenEvolve's cascade stage 1 for a task with a cheap stage (:func:`stage1_params`): a pass ranks 1.0.

    Raises:
        ConfigError: the task has no cheap first stage (export it without cascade stages).
    """
    stage = stage1_params(task_for(task_id, params, pin).spec)
    if stage is None:
        raise ConfigError(f"{task_id} has no cheap first stage; evaluate it with evaluate_program alone")
    result = evaluate_file(task_for(task_id, stage), program_path, seed=seed)
    return _shaped(*stage1_fields(result))


def _shaped(metrics: dict[str, float], artifacts: dict[str, str]) -> Any:
    try:
        from openevolve.evaluation_result import EvaluationResult
    except ImportError:
        return metrics
    return EvaluationResult(metrics=metrics, artifacts=dict(artifacts))


def evaluate_program(task_id: str, program_path: str | Path, *, params: Mapping[str, Any] | None = None,
                     seed: int | None = 0, pin: Mapping[str, Any] | None = None) -> Any:
    """Evaluates one program for OpenEvolve: an ``EvaluationResult`` when OpenEvolve is importable, else a dict.

    Args:
        task_id: a registered program task, e.g. ``circle_packing/n26-v1``.
        program_path: the file OpenEvolve wrote.
        params: the task's constructor parameters.
        seed: passed to the task (recorded in provenance).
        pin: a task folder's content hash and file hashes (the exported file's ``PIN``): a folder that changed
            since the export is refused, naming the files.
    """
    task = task_for(task_id, params, pin)
    result = evaluate_file(task, program_path, seed=seed)
    return _shaped(*openevolve_fields(result, task.spec))


_TEMPLATE = '''"""OpenEvolve evaluator for {task_id}, written by `reasearch export-evaluator`.

Every program runs in reasearch's sandbox (killed at the task's limit); combined_score ranks a valid
program above every failure (0.0). The raw score is metrics["score"]; feedback is an artifact.
"""

from reasearch.adapters.openevolve import evaluate_program

TASK_ID = {task_id!r}
PARAMS = {params!r}
SEED = {seed!r}
PIN = {pin!r}  # a task folder's content hash and file hashes: a folder changed since the export is refused


def evaluate(program_path):
    return evaluate_program(TASK_ID, program_path, params=PARAMS, seed=SEED, pin=PIN)
'''

_CASCADE = '''

# OpenEvolve's cascade (cascade_evaluation, on by default): stage 1 runs the candidate once (the first placement,
# scored on the second window); a pass is combined_score 1.0, below every valid full result; stage 2 is the full
# evaluation, whose combined_score replaces stage 1's.
from reasearch.adapters.openevolve import evaluate_stage1_program


def evaluate_stage1(program_path):
    return evaluate_stage1_program(TASK_ID, program_path, params=PARAMS, seed=SEED, pin=PIN)


def evaluate_stage2(program_path):
    return evaluate(program_path)
'''


def evaluator_source(task_id: str, params: Mapping[str, Any] | None = None, *, seed: int | None = 0) -> str:
    """The text of an ``evaluator.py`` OpenEvolve loads for ``task_id`` (the task is checked to exist)."""
    task = task_for(task_id, params)
    text = _TEMPLATE.format(task_id=task_id, params=dict(params or {}), seed=seed, pin=pin_of(task))
    return text + _CASCADE if stage1_params(task.spec) is not None else text
