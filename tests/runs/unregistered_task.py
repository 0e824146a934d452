"""A task that lives outside the package and is registered nowhere: only a spec's ``task_class``
(``tests.runs.unregistered_task:OffsetToyTask``) finds it, on this process or on a Ray worker."""

from __future__ import annotations

from typing import Any

from reasearch.evaluators.result import EvalResult
from reasearch.evaluators.spec import TaskSpec
from reasearch.evaluators.testing import ToyTask


class OffsetToyTask(ToyTask):
    """:class:`ToyTask` whose score is shifted by ``offset`` (so a result shows which class scored it)."""

    def __init__(self, dim: int = 4, offset: float = 0.0) -> None:
        super().__init__(dim=dim)
        self.offset = offset

    def _make_spec(self) -> TaskSpec:
        spec = ToyTask._make_spec(self)
        return TaskSpec(**{**spec.to_dict(), "id": f"test/offset-d{int(self.dim)}-v1", "params": self.get_params()})

    def score_solution(self, data: Any, *, seed: int | None = None) -> EvalResult:
        result = super().score_solution(data, seed=seed)
        if result.score is None:
            return result
        return self.result(result.score + float(self.offset), metrics=result.metrics, feedback=result.feedback)
