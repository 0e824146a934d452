"""The fitness other optimizers rank by: one monotone map of a task's score, failures strictly below.

Trusted side only (plain arithmetic on an ``EvalResult``). OpenEvolve ranks by ``combined_score`` and
gives its own failures (its timeout, an exception in the evaluator) 0.0; ShinkaEvolve and GEPA take
"higher is better". A task's raw score may be negative or minimized, so it is never passed through:
``rank_score`` maps every finite score, in the task's direction, into (0, inf), strictly increasing in
"better", and every failure is ``FAILED_RANK`` (0.0), below every valid program whatever its score.
"""

from __future__ import annotations

import math

from reasearch.evaluators.result import EvalResult
from reasearch.evaluators.spec import TaskSpec

__all__ = ["FAILED_RANK", "rank_score", "result_rank"]

FAILED_RANK = 0.0


def rank_score(score: float, direction: str) -> float:
    """A strictly increasing map of "better" into (0, inf): ``1 + s`` for s >= 0, ``1 / (1 - s)`` below.

    ``s`` is the score for a maximized task and its negation for a minimized one. The two branches
    meet at 1.0; the lower one stays above 0.0 for every finite float (1 / (1 + 1.8e308) is ~5.6e-309).
    """
    if not math.isfinite(score):
        raise ValueError(f"a ranked score must be finite, not {score!r}")
    if direction not in ("maximize", "minimize"):
        raise ValueError(f"direction must be 'maximize' or 'minimize', not {direction!r}")
    s = score if direction == "maximize" else -score
    return 1.0 + s if s >= 0.0 else 1.0 / (1.0 - s)


def result_rank(result: EvalResult, spec: TaskSpec) -> float:
    """``rank_score`` of an OK result; ``FAILED_RANK`` for every other status."""
    if not result.ok or result.score is None:
        return FAILED_RANK
    return rank_score(float(result.score), spec.direction)
