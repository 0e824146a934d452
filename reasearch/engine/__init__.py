"""The engine: the warm sandbox pool that runs untrusted candidates, and one-off jailed commands.

Quick use::

    from reasearch.engine import default_pool
    from reasearch.evaluators.protocol import RunRequest

    out = default_pool().run(RunRequest(source="def run():\\n    return 42\\n"))
    assert out.value == 42

See :mod:`reasearch.engine.sandbox` for how statuses are decided and
:mod:`reasearch.engine.isolation` for what each mode isolates.
"""

from __future__ import annotations

from reasearch.engine.exec import ExecOutcome, exec_in_sandbox
from reasearch.engine.executor import EvalRequest, Executor, LocalExecutor, RayExecutor
from reasearch.engine.isolation import IsolationReport, detect_isolation
from reasearch.engine.ledger import Budget, Unit
from reasearch.engine.run import Event, Run, RunStatus
from reasearch.engine.sandbox import (
    DEFAULT_PRELOAD,
    PoolSession,
    SandboxConfig,
    SandboxMode,
    SandboxPool,
    close_default_pool,
    default_pool,
)
from reasearch.engine.store import RunState, Store, open_store

__all__ = [
    "SandboxPool",
    "SandboxConfig",
    "SandboxMode",
    "PoolSession",
    "DEFAULT_PRELOAD",
    "default_pool",
    "close_default_pool",
    "detect_isolation",
    "IsolationReport",
    "exec_in_sandbox",
    "ExecOutcome",
    "Run", "RunStatus", "RunState", "Event", "Budget", "Unit", "Store", "open_store",
    "EvalRequest", "Executor", "LocalExecutor", "RayExecutor",
]
