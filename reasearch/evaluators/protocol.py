"""Request and outcome types of the sandbox, re-exported for task authors.

They are defined in :mod:`reasearch.engine.protocol` (the engine is the bottom layer); this module keeps
``from reasearch.evaluators.protocol import RunRequest`` working for tasks written against it.
"""

from __future__ import annotations

from reasearch.engine.protocol import (
    CallOutcome,
    Limits,
    RunOutcome,
    RunRequest,
    SandboxRunner,
    SandboxSession,
    Status,
)

__all__ = ["Limits", "RunRequest", "RunOutcome", "CallOutcome", "SandboxRunner", "SandboxSession", "Status"]
