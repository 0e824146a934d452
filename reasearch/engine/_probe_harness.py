"""A tiny trusted harness used by the engine's self-check, tests and benchmarks.

It shows that a harness module is imported, and its ``warmup()`` run, once in the WORKER before any
child is forked: children report the pid that ran ``warmup`` (the worker's) beside their own.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["call", "echo", "warmup"]

_WARM: dict[str, Any] = {"pid": None, "count": 0}


def warmup() -> None:
    """Runs once per worker, before forking (where numba kernels would be compiled)."""
    _WARM["pid"] = os.getpid()
    _WARM["count"] += 1


def call(entry: Callable[..., Any], payload: Mapping[str, Any]) -> dict[str, Any]:
    """Calls the candidate with ``**payload`` and reports where the warm-up ran."""
    return {"value": entry(**payload), "warm_pid": _WARM["pid"], "warm_count": _WARM["count"],
            "child_pid": os.getpid()}


def echo(entry: Callable[..., Any], payload: Mapping[str, Any]) -> Any:
    """Calls the candidate with the payload as one argument (for session round trips)."""
    return entry(payload)
