"""``reasearch mcp --evaluators``: the sealed evaluators for any MCP client, without a run.

Three tools (``list_tasks``, ``describe_task``, ``evaluate``), typed with ``@tool`` like the agent's.
Nothing is stored: each evaluation runs in the sandbox and answers what an agent would see of it
(status, score, scalar metrics, feedback), never more. An optional cap bounds the evaluations one
server process runs; past it the answer is ``REFUSED``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from reasearch.agent.mcp._service import ToolsetService
from reasearch.agent.snapshot import fmt_score
from reasearch.agent.tools.schema import ToolError, ToolOutput, tool
from reasearch.errors import ConfigError, ReasearchError
from reasearch.evaluators import list_tasks, make
from reasearch.evaluators.base import Task
from reasearch.evaluators.result import EvalResult

__all__ = ["EvaluatorTools", "EvaluatorsService", "result_text"]

_MAX_SOURCE = 2 * 1024 * 1024


def _scalars(metrics: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in dict(metrics).items() if isinstance(v, (int, float, str, bool)) or v is None}


def result_text(task_id: str, result: EvalResult) -> tuple[str, dict[str, Any]]:
    """What a client sees of one evaluation: the text, and the same facts as plain data."""
    lines = [f"task: {task_id}", f"status: {result.status.value}"]
    if result.score is not None:
        norm = f" (normalized {result.normalized_score:.6f})" if result.normalized_score is not None else ""
        lines.append(f"score: {fmt_score(result.score)}{norm}")
    metrics = _scalars(result.metrics)
    if metrics:
        lines.append("metrics: " + ", ".join(f"{k}={v}" for k, v in list(metrics.items())[:20]))
    if result.feedback:
        lines.append("feedback:\n" + result.feedback[-6000:])
    data = {"task_id": task_id, "status": result.status.value, "score": result.score,
            "normalized_score": result.normalized_score, "metrics": metrics}
    return "\n".join(lines), data


class EvaluatorTools:
    """The evaluators as tools.

    Args:
        max_evaluations: evaluations this process may run (None: no cap).
        evaluate_fn: runs one evaluation ``(task, source, seed) -> EvalResult`` (default: the task's own,
            in the process-wide sandbox pool).
    """

    def __init__(self, *, max_evaluations: int | None = None,
                 evaluate_fn: Callable[[Task, str, int], EvalResult] | None = None) -> None:
        if max_evaluations is not None and max_evaluations < 0:
            raise ConfigError(f"max_evaluations must be >= 0, not {max_evaluations}")
        self.max_evaluations = max_evaluations
        self.used = 0
        self._lock = threading.Lock()
        self._evaluate = evaluate_fn or (lambda task, source, seed: task.evaluate(source, seed=seed))

    @staticmethod
    def _task(task_id: str) -> Task:
        try:
            return make(task_id)
        except ReasearchError as exc:
            raise ToolError(f"{exc} (list_tasks shows the ids)") from None

    @tool
    def list_tasks(self, filter: str = "", limit: int = 100) -> ToolOutput:
        """Lists the task ids (optionally those containing a text), with direction and best known score.

        Args:
            filter: show only ids containing this text, e.g. 'circle_packing' or 'heilbronn'.
            limit: how many ids to show at most.
        """
        ids = [t for t in list_tasks() if filter in t and "{" not in t]
        shown = ids[:max(limit, 1)]
        rows = []
        for task_id in shown:
            spec = make(task_id).spec
            rows.append(f"{task_id}  ({spec.direction}; best known {fmt_score(spec.best_known)})")
        more = f"\n[{len(ids) - len(shown)} more; narrow the filter]" if len(ids) > len(shown) else ""
        return ToolOutput("\n".join(rows) + more if rows else f"no task id contains {filter!r}",
                          {"tasks": shown, "total": len(ids)})

    @tool
    def describe_task(self, task_id: str) -> str:
        """Returns a task's statement (what to write, how it is scored, limits) and its seed program.

        Args:
            task_id: a task id, e.g. 'circle_packing/n26-v1'.
        """
        task = self._task(task_id)
        return f"{task.describe()}\n\n## Seed program\n```python\n{task.seed_program()}```"

    @tool
    def evaluate(self, task_id: str, code: str, seed: int = 0) -> ToolOutput:
        """Scores a program on a task's sealed evaluator, in the sandbox (nothing is stored).

        Args:
            task_id: a task id, e.g. 'circle_packing/n26-v1'.
            code: the program (a Python module, as the task statement asks).
            seed: the evaluation seed.
        """
        task = self._task(task_id)
        if len(code.encode()) > _MAX_SOURCE:
            raise ToolError(f"refused: the program is over {_MAX_SOURCE // 1024} KiB")
        with self._lock:
            if self.max_evaluations is not None and self.used >= self.max_evaluations:
                text = (f"status: REFUSED\nevaluation budget spent: {self.used}/{self.max_evaluations} used, "
                        "0 left; this request was not run (restart the server with a larger --budget)")
                return ToolOutput(text, {"task_id": task_id, "status": "REFUSED", "score": None,
                                         "left": 0, "cap": self.max_evaluations})
            self.used += 1
        text, data = result_text(task_id, self._evaluate(task, code, seed))
        return ToolOutput(text, data)


class EvaluatorsService(ToolsetService[EvaluatorTools]):
    """The stateless server's provider: the evaluator tools, no resources."""

    def __init__(self, tools: EvaluatorTools | None = None) -> None:
        super().__init__(tools or EvaluatorTools())

    def instructions(self) -> str:
        cap = "" if self.toolset.max_evaluations is None else f" (at most {self.toolset.max_evaluations} evaluations)"
        return ("The reasearch evaluators: list_tasks, describe_task and evaluate score programs on sealed, "
                f"sandboxed evaluators{cap}. Nothing is stored.")
