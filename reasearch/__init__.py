"""reasearch: an optimizer that is a single tool-using LLM agent, on a fast sandboxed evaluator engine.

The top-level names are resolved lazily (PEP 562), so that importing a subpackage (the jailed worker
imports ``reasearch.engine._worker``) does not import the evaluators, the run store or the agent.
"""

from __future__ import annotations

import importlib

from reasearch.errors import ReasearchError

TYPE_CHECKING = False  # as typing's, without importing typing into the worker's image (see _pump.Child)

if TYPE_CHECKING:
    from typing import Any

    from reasearch.evaluators import (
        Certificate,
        EvalResult,
        Provenance,
        Status,
        Task,
        TaskSpec,
        certify,
        check_task,
        list_tasks,
        make,
        register,
        spec,
    )

__version__ = "0.1.0"

__all__ = [
    "ReasearchError", "EvalResult", "Provenance", "Status", "Task", "TaskSpec",
    "check_task", "list_tasks", "make", "register", "spec", "certify", "Certificate", "__version__",
]

_FROM_EVALUATORS = frozenset(__all__) - {"ReasearchError", "__version__"}


def __getattr__(name: str) -> Any:
    if name in _FROM_EVALUATORS:
        # Lazy on purpose (not a layer detour): the package root is above every layer.
        return getattr(importlib.import_module("reasearch.evaluators"), name)
    raise AttributeError(f"module 'reasearch' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
