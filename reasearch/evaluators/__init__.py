"""Tasks behind one registry: ``make``, ``spec``, ``list_tasks``, ``register``, ``check_task``.

The names load on first access (PEP 562): the jailed worker imports a harness below this package, and
the sandbox's code copy holds only the modules marked for the jail (see ``reasearch/engine/_runtime.py``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# ``spec`` names both a submodule (TaskSpec's, stdlib-only, in the jail's copy) and the registry's function.
# Loading the submodule first binds the name once; the function below then holds it (a submodule's
# attribute is set only when it is first loaded).
from reasearch.evaluators import spec as _spec_module  # noqa: F401
from reasearch.evaluators.spec import TaskSpec

if TYPE_CHECKING:
    from reasearch.engine.protocol import CallOutcome, Limits, RunOutcome, RunRequest, SandboxRunner
    from reasearch.evaluators.base import Task
    from reasearch.evaluators.certificate import Certificate, certify
    from reasearch.evaluators.checker import CheckReport, check_task
    from reasearch.evaluators.registry import list_tasks, make, register
    from reasearch.evaluators.result import EvalResult, Provenance, Status

__all__ = [
    "Task", "TaskSpec", "EvalResult", "Provenance", "Status", "check_task", "CheckReport",
    "make", "spec", "list_tasks", "register", "certify", "Certificate",
    "Limits", "RunRequest", "RunOutcome", "CallOutcome", "SandboxRunner",
]

_LAZY = {
    "Task": "reasearch.evaluators.base",
    "CheckReport": "reasearch.evaluators.checker",
    "Certificate": "reasearch.evaluators.certificate",
    "certify": "reasearch.evaluators.certificate",
    "check_task": "reasearch.evaluators.checker",
    "CallOutcome": "reasearch.engine.protocol",
    "Limits": "reasearch.engine.protocol",
    "RunOutcome": "reasearch.engine.protocol",
    "RunRequest": "reasearch.engine.protocol",
    "SandboxRunner": "reasearch.engine.protocol",
    "list_tasks": "reasearch.evaluators.registry",
    "make": "reasearch.evaluators.registry",
    "register": "reasearch.evaluators.registry",
    "EvalResult": "reasearch.evaluators.result",
    "Provenance": "reasearch.evaluators.result",
    "Status": "reasearch.evaluators.result",
}


def spec(task_id: str, /, **params: Any) -> TaskSpec:
    """The :class:`TaskSpec` of a registered id (see :func:`reasearch.evaluators.registry.spec`)."""
    from reasearch.evaluators.registry import spec as registry_spec

    return registry_spec(task_id, **params)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
