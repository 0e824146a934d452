# reasearch: jail (imported inside the sandbox: see reasearch/engine/_runtime.py)
"""The harness of :class:`reasearch.evaluators.testing.ToyTask` (stdlib only; runs inside the sandbox)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["toy_harness"]


def toy_harness(entry: Callable[..., Any], payload: Mapping[str, Any]) -> Any:
    """Runs inside the sandbox: calls ``run()``, or ``run(seed=...)`` when it takes a seed."""
    params = inspect.signature(entry).parameters
    if "seed" in params:
        return entry(seed=payload.get("seed"))
    return entry()
