"""Two example tasks registered through the ``reasearch.tasks`` entry-point group (see pyproject.toml).

- ``reasearch_example_tasks/sines-v1``: a Task subclass. The candidate's ``solve(n)`` returns n angles; the score,
  computed here on the trusted side, is the sum of their sines (best: n, every angle pi/2).
- ``reasearch_example_tasks/spread-v1``: a factory returning the task folder shipped inside this package.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from reasearch.evaluators import EvalResult, Task, TaskSpec
from reasearch.evaluators.folder import FolderTask
from reasearch.evaluators.plugins import CALL_HARNESS

__all__ = ["SinesTask", "spread_task"]


class SinesTask(Task):
    """Choose n angles whose sines sum to as much as possible.

    Args:
        n: how many angles solve() returns.
    """

    harness = CALL_HARNESS  # the jail imports only reasearch's own harnesses: the candidate is called by ours

    def __init__(self, n: int = 4) -> None:
        self.n = n

    def _make_spec(self) -> TaskSpec:
        if not isinstance(self.n, int) or isinstance(self.n, bool) or not 1 <= self.n <= 1000:
            raise ValueError(f"n must be an integer in [1, 1000], not {self.n!r}")
        default = self.n == 4
        return TaskSpec(id="reasearch_example_tasks/sines-v1", version=1, direction="maximize", time_limit_s=5,
                        memory_mb=512, best_known=4.0 if default else None,
                        best_known_source="every angle pi/2" if default else "",
                        seed_score=4 * math.sin(0.5) if default else None, entry_point="solve")

    def describe(self) -> str:
        return (f"Define solve(n) returning a list of n = {self.n} angles (radians). The score is the sum of "
                "their sines (maximize).\n")

    def seed_program(self) -> str:
        return "def solve(n):\n    return [0.5] * n\n"

    def payload(self, seed: int | None) -> dict[str, Any]:
        return {"seed": seed, "params": {"n": self.n}}

    def score_solution(self, data: Any, *, seed: int | None = None) -> EvalResult:
        if not isinstance(data, list) or len(data) != self.n:
            return self.invalid(f"solve() must return a list of {self.n} numbers")
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in data):
            return self.invalid("every angle must be a finite number")
        return self.result(float(sum(math.sin(x) for x in data)), feedback=f"{len(data)} angles")


def spread_task(**params: Any) -> Task:
    """The task folder ``spread/`` shipped in this package (its task.toml declares the parameters)."""
    return FolderTask(str(Path(__file__).parent / "spread"), params)
