"""The engine: the warm sandbox pool that runs untrusted candidates, and one-off jailed commands.

The bottom layer: it imports nothing from ``reasearch.evaluators``, ``reasearch.runs`` or
``reasearch.agent`` (an import-linter contract in ``pyproject.toml`` holds it to that).

Quick use::

    from reasearch.engine import RunRequest, default_pool

    out = default_pool().run(RunRequest(source="def run():\\n    return 42\\n"))
    assert out.value == 42

See :mod:`reasearch.engine.sandbox` for how statuses are decided and
:mod:`reasearch.engine.isolation` for what each mode isolates.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # as typing's, without importing typing into the worker's image (see _pump.Child)

if TYPE_CHECKING:
    from typing import Any

    from reasearch.engine.config import DEFAULT_PRELOAD, SandboxConfig, SandboxMode
    from reasearch.engine.exec import ExecOutcome, exec_in_sandbox
    from reasearch.engine.isolation import IsolationReport, detect_isolation
    from reasearch.engine.protocol import (
        CallOutcome,
        Limits,
        RunOutcome,
        RunRequest,
        SandboxRunner,
        SandboxSession,
        Status,
    )
    from reasearch.engine.sandbox import PoolSession, SandboxPool, close_default_pool, default_pool, fit_profile

# Public name -> the module that defines it. Resolved lazily (PEP 562): the in-jail worker imports
# ``reasearch.engine._worker``, which must load only the worker's own modules, not the pool.
_WHERE = {
    "SandboxPool": "sandbox", "PoolSession": "sandbox", "default_pool": "sandbox", "close_default_pool": "sandbox",
    "fit_profile": "sandbox",
    "SandboxConfig": "config", "SandboxMode": "config", "DEFAULT_PRELOAD": "config",
    "detect_isolation": "isolation", "IsolationReport": "isolation",
    "exec_in_sandbox": "exec", "ExecOutcome": "exec",
    "Status": "protocol", "Limits": "protocol", "RunRequest": "protocol", "RunOutcome": "protocol",
    "CallOutcome": "protocol", "SandboxRunner": "protocol", "SandboxSession": "protocol",
}

__all__ = [
    "SandboxPool",
    "SandboxConfig",
    "SandboxMode",
    "PoolSession",
    "DEFAULT_PRELOAD",
    "default_pool",
    "close_default_pool",
    "fit_profile",
    "detect_isolation",
    "IsolationReport",
    "exec_in_sandbox",
    "ExecOutcome",
    "Status", "Limits", "RunRequest", "RunOutcome", "CallOutcome", "SandboxRunner", "SandboxSession",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'reasearch.engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"reasearch.engine.{module}"), name)
    globals()[name] = value  # once resolved, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(__all__) | set(globals()))
