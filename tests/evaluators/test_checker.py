"""``check_task`` itself: a sound task passes; each deliberately broken task fails the right check.

The runner here is canned: it answers from a table and executes nothing, so these tests exercise
the checker's logic alone (the conformance test runs the real sandbox).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest

from reasearch.errors import SandboxError, TaskCheckError
from reasearch.evaluators import RunOutcome, RunRequest, Status, TaskSpec, check_task
from reasearch.evaluators.circle_packing.task import SEED_SCORES, CirclePackingTask
from reasearch.evaluators.result import EvalResult


def _grid_answer(n: int) -> dict[str, Any]:
    m = math.ceil(math.sqrt(n))
    centers = np.array([((k % m + 0.5) / m, (k // m + 0.5) / m) for k in range(n)])
    return {"centers": centers, "radii": np.full(n, 0.5 / m * (1 - 1e-9))}


class CannedRunner:
    """A ``SandboxRunner`` that answers the seed program with fixed data and crashes everything else."""

    mode = "canned"

    def __init__(self, seed_source: str, answer: Any, *, generous: bool = False) -> None:
        self.seed_source = seed_source
        self.answer = answer
        self.generous = generous  # True: every candidate "succeeds" (a broken engine)
        self.requests: list[RunRequest] = []

    def run(self, request: RunRequest) -> RunOutcome:
        self.requests.append(request)
        if request.source == self.seed_source or self.generous:
            return RunOutcome(Status.OK, self.answer, 0.001, 0.001, sandbox_mode=self.mode)
        return RunOutcome(Status.CRASH, None, 0.001, 0.001, error="canned crash", sandbox_mode=self.mode)

    def session(self, request: RunRequest) -> Any:
        raise SandboxError("the canned runner has no sessions")


def _runner(task: CirclePackingTask, **kw: Any) -> CannedRunner:
    return CannedRunner(task.seed_program(), _grid_answer(int(task.n)), **kw)


class WrongSeedScore(CirclePackingTask):
    def _make_spec(self) -> TaskSpec:
        return dataclasses.replace(super()._make_spec(), seed_score=2.0)


class RaisesOnGarbage(CirclePackingTask):
    def score_solution(self, data: Any, *, seed: int | None = None) -> EvalResult:
        return super().score_solution({"centers": data["centers"], "radii": data["radii"]}, seed=seed)


class Drifting(CirclePackingTask):
    """Scores drift by 1e-9 per call: within the seed check's tolerance, caught by the exact rerun."""

    calls = 0

    def _make_spec(self) -> TaskSpec:
        return dataclasses.replace(super()._make_spec(), seed_score_rtol=1e-6)

    def score_solution(self, data: Any, *, seed: int | None = None) -> EvalResult:
        res = super().score_solution(data, seed=seed)
        type(self).calls += 1
        return res.with_(score=res.score + 1e-9 * type(self).calls) if res.ok else res


class Mute(CirclePackingTask):
    def describe(self) -> str:
        return ""


class Unpicklable(CirclePackingTask):
    def __init__(self, n: int = 26) -> None:
        super().__init__(n)
        self.on_result = lambda r: r  # a lambda in a public attribute cannot be pickled


def test_sound_task_passes_every_check() -> None:
    task = CirclePackingTask(n=26)
    runner = _runner(task)
    report = check_task(task, executor=runner)
    assert report.ok and report.failed == {}
    assert report.passed == [
        "spec_roundtrip", "picklable", "describe", "seed_program_reproduces", "deterministic",
        "bad_candidates_get_status", "score_solution_rejects_garbage",
    ]
    assert report.seed_result is not None and report.seed_result.score == SEED_SCORES[26]
    # Two seed runs plus one run per bad candidate, all through the runner it was given.
    assert len(runner.requests) == 2 + 5
    assert all(r.harness == CirclePackingTask.harness for r in runner.requests)


@pytest.mark.parametrize(
    ("task", "failed_check"),
    [
        (WrongSeedScore(n=26), "seed_program_reproduces"),
        (RaisesOnGarbage(n=26), "score_solution_rejects_garbage"),
        (Drifting(n=26), "deterministic"),
        (Mute(n=26), "describe"),
        (Unpicklable(n=26), "picklable"),
    ],
    ids=lambda x: x if isinstance(x, str) else type(x).__name__,
)
def test_broken_task_fails_the_right_check(task: CirclePackingTask, failed_check: str) -> None:
    report = check_task(task, executor=_runner(task), raise_on_failure=False)
    assert list(report.failed) == [failed_check]
    with pytest.raises(TaskCheckError, match=f"(?s)failed 1 conformance check.*{failed_check}"):
        check_task(task, executor=_runner(task))


def test_failures_that_earn_fitness_are_caught() -> None:
    task = CirclePackingTask(n=26)
    report = check_task(task, executor=_runner(task, generous=True), raise_on_failure=False)
    assert list(report.failed) == ["bad_candidates_get_status"]
    assert "scored" in report.failed["bad_candidates_get_status"]


def test_seed_that_does_not_run_is_reported() -> None:
    task = CirclePackingTask(n=26)
    runner = CannedRunner("not the seed", None)
    report = check_task(task, executor=runner, raise_on_failure=False)
    assert "seed_program_reproduces" in report.failed and "CRASH" in report.failed["seed_program_reproduces"]
    assert not report.ok and list(report.failed) == ["seed_program_reproduces"]
