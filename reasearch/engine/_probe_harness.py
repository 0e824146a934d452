"""A tiny trusted harness used by the engine's self-check, tests and benchmarks.

It shows that a harness module is imported, and its ``warmup()`` run, once in the WORKER before any
child is forked: children report the pid that ran ``warmup`` (the worker's) beside their own.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["call", "echo", "rehearse", "warmup"]

_WARM: dict[str, Any] = {"pid": None, "count": 0, "rehearsed_pid": None}


def warmup() -> None:
    """Runs once per worker, before forking (where numba kernels would be compiled)."""
    _WARM["pid"] = os.getpid()
    _WARM["count"] += 1


def rehearse() -> Any:
    """Runs in a pre-forked child before its request, when the worker's last request used this
    harness (``_child._rehearse``)."""
    _WARM["rehearsed_pid"] = os.getpid()
    return {"x": [1.5, None]}


def call(entry: Callable[..., Any], payload: Mapping[str, Any]) -> dict[str, Any]:
    """Calls the candidate with ``**payload`` and reports where the warm-up and the rehearsal ran."""
    return {"value": entry(**payload), "warm_pid": _WARM["pid"], "warm_count": _WARM["count"],
            "child_pid": os.getpid(), "rehearsed_here": _WARM["rehearsed_pid"] == os.getpid(),
            "uid": os.getuid()}


def echo(entry: Callable[..., Any], payload: Mapping[str, Any]) -> Any:
    """Calls the candidate with the payload as one argument (for session round trips)."""
    return entry(payload)
