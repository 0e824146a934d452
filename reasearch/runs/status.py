"""A run's status records: :class:`RunStatus` (what ``reasearch show`` prints and the agent's snapshot reads)
and :class:`ScoreSpread` (the spread of a candidate's scores over its fresh evaluations).

Frozen records computed by :class:`reasearch.runs.Run` from what the store holds; nothing here reads
candidate output beyond the recorded, trusted results.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reasearch.evaluators.result import EvalResult, Status
from reasearch.runs.ledger import Unit
from reasearch.runs.store import EvaluationRecord, RunState

__all__ = ["RunStatus", "ScoreSpread", "score_spreads"]


@dataclass(frozen=True, slots=True)
class RunStatus:
    """A summary of a run (what ``reasearch show`` prints and the agent's state snapshot reads).

    Attributes:
        run_id: the run.
        task_id: its task.
        state: running, finished, failed or interrupted.
        used: budget spent per unit (units never debited are 0).
        left: budget left per unit (None: uncapped).
        caps: the run's caps.
        best_score: the best ``OK`` score so far (task direction), or None.
        best_candidate: the candidate id that scored it.
        best_step: the step where it was first reached.
        evaluations: how many evaluations are recorded (cached and refused included).
        by_status: evaluations per status value.
        cached: evaluations served from the cache.
        since_improvement: evaluations recorded after the one that set the best score (all of them
            when nothing scored yet).
        last_step: the highest step written (-1 for a fresh run).
    """

    run_id: str
    task_id: str
    state: RunState
    used: Mapping[Unit, float]
    left: Mapping[Unit, float | None]
    caps: Mapping[Unit, float]
    best_score: float | None
    best_candidate: str | None
    best_step: int | None
    evaluations: int
    by_status: Mapping[str, int]
    cached: int
    since_improvement: int
    last_step: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "task_id": self.task_id, "state": self.state.value,
            "used": {u.value: v for u, v in self.used.items()},
            "left": {u.value: v for u, v in self.left.items()},
            "caps": {u.value: v for u, v in self.caps.items()},
            "best_score": self.best_score, "best_candidate": self.best_candidate, "best_step": self.best_step,
            "evaluations": self.evaluations, "by_status": dict(self.by_status), "cached": self.cached,
            "since_improvement": self.since_improvement, "last_step": self.last_step,
        }


@dataclass(frozen=True, slots=True)
class ScoreSpread:
    """The spread of one candidate's scores over its fresh (not cached) evaluations in a run.

    Attributes:
        candidate_id: the candidate.
        evaluations: fresh evaluations of it, any status.
        ok: how many of them scored (``OK``); min/max/mean/std are over those.
        std: the sample standard deviation (0.0 with a single score).
    """

    candidate_id: str
    evaluations: int
    ok: int
    min: float | None
    max: float | None
    mean: float | None
    std: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"candidate_id": self.candidate_id, "evaluations": self.evaluations, "ok": self.ok,
                "min": self.min, "max": self.max, "mean": self.mean, "std": self.std}


def _spread(candidate_id: str, results: Sequence[EvalResult]) -> ScoreSpread:
    scores = [float(r.score) for r in results if r.status is Status.OK and r.score is not None
              and math.isfinite(float(r.score))]
    if not scores:
        return ScoreSpread(candidate_id, len(results), 0, None, None, None, None)
    std = statistics.stdev(scores) if len(scores) > 1 else 0.0
    return ScoreSpread(candidate_id, len(results), len(scores), min(scores), max(scores),
                       statistics.fmean(scores), std)


def score_spreads(evaluations: Iterable[EvaluationRecord], candidate_id: str | None = None) -> dict[str, ScoreSpread]:
    """:class:`ScoreSpread` of each candidate evaluated afresh (not cached, not refused) more than once
    (only ``candidate_id`` when given)."""
    fresh: dict[str, list[EvalResult]] = {}
    for ev in evaluations:
        if ev.result.cached or ev.result.status is Status.REFUSED:
            continue
        if candidate_id is None or ev.candidate_id == candidate_id:
            fresh.setdefault(ev.candidate_id, []).append(ev.result)
    return {cid: _spread(cid, results) for cid, results in fresh.items() if len(results) > 1}
