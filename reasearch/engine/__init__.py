"""The engine: the warm sandbox pool that runs untrusted candidates, and one-off jailed commands.

The bottom layer: it imports nothing from ``reasearch.evaluators``, ``reasearch.runs`` or
``reasearch.agent`` (an import-linter contract in ``pyproject.toml`` holds it to that).

Quick use::

    from reasearch.engine import RunRequest, default_pool

    out = default_pool().run(RunRequest(source="def run():\\n    return 42\\n"))
    assert out.value == 42

See :mod:`reasearch.engine.sandbox` for how statuses are decided and
:mod:`reasearch.engine.isolation` for what each mode isolates.

The second group of names is what the layers above share with the engine's internals (the sandbox
runtime and its clean-up, the jail's command line, the host's process table, a tree removal that never
follows a link, whether the zygote is built): public here, so that no other package imports a private
engine module.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # as typing's, without importing typing into the worker's image (see _pump.Child)

if TYPE_CHECKING:
    from typing import Any

    from reasearch.engine._cleanup import remove_tree
    from reasearch.engine._forking import zygote_available
    from reasearch.engine._jail import nsjail_argv, nsjail_problem
    from reasearch.engine._procs import descendants_of, process_table
    from reasearch.engine._runtime import SYSTEM_RO, build_runtime
    from reasearch.engine._runtime_clean import clean_runtime
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
    # shared with the layers above (see the module docstring)
    "build_runtime": "_runtime", "SYSTEM_RO": "_runtime", "clean_runtime": "_runtime_clean",
    "nsjail_argv": "_jail", "nsjail_problem": "_jail", "process_table": "_procs", "descendants_of": "_procs",
    "remove_tree": "_cleanup", "zygote_available": "_forking",
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
    "build_runtime", "SYSTEM_RO", "clean_runtime", "nsjail_argv", "nsjail_problem", "process_table",
    "descendants_of", "remove_tree", "zygote_available",
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
