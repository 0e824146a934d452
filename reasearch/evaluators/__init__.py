"""Tasks behind one registry: ``make``, ``list_tasks``, ``register``, ``check_task``."""

from __future__ import annotations

from reasearch.evaluators.base import Task
from reasearch.evaluators.checker import CheckReport, check_task
from reasearch.engine.protocol import CallOutcome, Limits, RunOutcome, RunRequest, SandboxRunner
from reasearch.evaluators.registry import list_tasks, make, register, spec
from reasearch.evaluators.result import EvalResult, Provenance, Status
from reasearch.evaluators.spec import TaskSpec

__all__ = [
    "Task", "TaskSpec", "EvalResult", "Provenance", "Status", "check_task", "CheckReport",
    "make", "spec", "list_tasks", "register", "Limits", "RunRequest", "RunOutcome", "CallOutcome", "SandboxRunner",
]
