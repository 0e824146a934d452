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
from reasearch.engine.sandbox import (
    DEFAULT_PRELOAD,
    PoolSession,
    SandboxConfig,
    SandboxMode,
    SandboxPool,
    close_default_pool,
    default_pool,
)

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
    "Status", "Limits", "RunRequest", "RunOutcome", "CallOutcome", "SandboxRunner", "SandboxSession",
]
