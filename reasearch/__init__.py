"""reasearch: an optimizer that is a single tool-using LLM agent, on a fast sandboxed evaluator engine."""

from __future__ import annotations

from reasearch.errors import ReasearchError
from reasearch.evaluators import (
    EvalResult,
    Provenance,
    Status,
    Task,
    TaskSpec,
    check_task,
    list_tasks,
    make,
    register,
)

__version__ = "0.1.0"

__all__ = [
    "ReasearchError", "EvalResult", "Provenance", "Status", "Task", "TaskSpec",
    "check_task", "list_tasks", "make", "register", "__version__",
]
