"""``check_task``: the conformance checker every task passes (shipped in the library, like Gymnasium's)."""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field

from reasearch.engine.protocol import SandboxRunner
from reasearch.errors import TaskCheckError
from reasearch.evaluators.base import Task
from reasearch.evaluators.result import EvalResult, Status
from reasearch.evaluators.spec import TaskSpec

__all__ = ["check_task", "CheckReport", "BAD_CANDIDATES"]

# Candidates that must end in a non-OK status (never an exception, never a score).
BAD_CANDIDATES: dict[str, str] = {
    "syntax_error": "def run(:\n    pass\n",
    "no_entry_point": "def something_else():\n    return 1\n",
    "raises": "def {entry}(*a, **k):\n    raise RuntimeError('candidate failed on purpose')\n",
    "returns_none": "def {entry}(*a, **k):\n    return None\n",
    "returns_garbage": "def {entry}(*a, **k):\n    return {{'not': 'what the task wants'}}\n",
}


@dataclass
class CheckReport:
    task_id: str
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    seed_result: EvalResult | None = None

    @property
    def ok(self) -> bool:
        return not self.failed


def _same_score(a: float | None, b: float | None, rtol: float) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=rtol, abs_tol=0.0 if rtol == 0 else 1e-12)


def check_task(
    task: Task, *, executor: SandboxRunner | None = None, seed: int = 0, raise_on_failure: bool = True
) -> CheckReport:
    """Runs every conformance check on ``task``.

    Checks: spec JSON round trip; task picklable (and equal params after unpickling); a non-empty
    ``describe()``; the seed program evaluates ``OK`` and reproduces ``spec.seed_score``; the same
    seed gives the same score (deterministic tasks); bad candidates give a status, not an exception;
    ``score_solution`` rejects garbage with ``INVALID``; ``EvalResult`` JSON round trip.

    Raises:
        TaskCheckError: listing every failed check (unless ``raise_on_failure`` is False).
    """
    report = CheckReport(task_id=task.spec.id)
    spec = task.spec

    def run(name: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as exc:  # a check failure, recorded and reported together
            report.failed[name] = f"{type(exc).__name__}: {exc}"
        else:
            report.passed.append(name)

    def spec_roundtrip() -> None:
        again = TaskSpec.from_json(spec.to_json())
        assert again == spec, f"spec changed in a JSON round trip: {again} != {spec}"

    def picklable() -> None:
        clone = pickle.loads(pickle.dumps(task))
        assert type(clone) is type(task), "unpickled to another type"
        assert clone.spec == spec, "unpickled task has another spec"

    def describes() -> None:
        text = task.describe()
        assert isinstance(text, str) and len(text.strip()) > 40, "describe() must explain the problem"
        assert spec.entry_point in text, f"describe() must name the entry point {spec.entry_point!r}"

    def seed_reproduces() -> None:
        res = task.evaluate(task.seed_program(), seed=seed, executor=executor)
        report.seed_result = res
        assert res.status is Status.OK, f"seed program ended {res.status}: {res.feedback[:500]}"
        assert res.provenance is not None and res.provenance.task_id == spec.id, "result lacks provenance"
        if spec.seed_score is not None:
            assert _same_score(res.score, spec.seed_score, spec.seed_score_rtol), (
                f"seed program scored {res.score!r}, recorded {spec.seed_score!r}"
            )
        again = EvalResult.from_json(res.to_json())
        assert again.to_dict() == res.to_dict(), "EvalResult changed in a JSON round trip"

    def deterministic() -> None:
        if not spec.deterministic:
            return
        first = report.seed_result
        assert first is not None, "seed program did not run"
        second = task.evaluate(task.seed_program(), seed=seed, executor=executor)
        assert _same_score(first.score, second.score, 0.0), (
            f"same seed, different scores: {first.score} vs {second.score}"
        )

    def bad_candidates() -> None:
        own = getattr(task, "bad_candidates", None)  # tasks whose candidates are not programs (prompts) list their own
        sources = own() if callable(own) else {n: t.format(entry=spec.entry_point) for n, t in BAD_CANDIDATES.items()}
        for name, source in sources.items():
            res = task.evaluate(source, seed=seed, executor=executor)
            assert res.status is not Status.OK, f"bad candidate {name!r} scored {res.score}"
            assert res.score is None, f"bad candidate {name!r} carries a score"

    def rejects_garbage() -> None:
        garbages: tuple[object, ...] = (None, {}, "x", 3.5, [[float("nan")]])
        for garbage in garbages:
            res = task.score_solution(garbage, seed=seed)
            assert res.status is Status.INVALID, f"score_solution({garbage!r}) gave {res.status}"

    for name, fn in [
        ("spec_roundtrip", spec_roundtrip),
        ("picklable", picklable),
        ("describe", describes),
        ("seed_program_reproduces", seed_reproduces),
        ("deterministic", deterministic),
        ("bad_candidates_get_status", bad_candidates),
        ("score_solution_rejects_garbage", rejects_garbage),
    ]:
        run(name, fn)

    if report.failed and raise_on_failure:
        lines = "\n".join(f"  - {k}: {v}" for k, v in report.failed.items())
        raise TaskCheckError(f"{spec.id} failed {len(report.failed)} conformance check(s):\n{lines}")
    return report
