# reasearch: jail (imported inside the sandbox: see reasearch/engine/_runtime.py)
"""Calling a candidate's entry point inside the sandbox (shared by the geometry harnesses)."""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

__all__ = ["call_entry", "as_float_array"]

_MAX_DEPTH = 4  # points and centers are 2-D; deeper nesting is not an answer worth passing on


def call_entry(entry: Callable[..., Any], payload: Mapping[str, Any]) -> Any:
    """Calls ``entry()``, passing ``seed=`` when the function takes a ``seed`` (or ``**kwargs``) parameter.

    Published programs define ``run_packing()`` with no arguments; programs that want the
    evaluation seed declare it, which keeps both kinds running unchanged.
    """
    seed = payload.get("seed")
    try:
        params = inspect.signature(entry).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: call them plainly
        return entry()
    takes_seed = any(p.name == "seed" or p.kind is p.VAR_KEYWORD for p in params)
    return entry(seed=0 if seed is None else int(seed)) if takes_seed else entry()


def as_float_array(value: Any, what: str) -> np.ndarray | list[Any]:
    """A plain float64 ndarray of ``value``; shapes are left for the trusted scorer to judge.

    Ragged nested sequences of numbers cannot form an array: they are handed over as plain lists of
    floats, so the scorer rejects them as ``INVALID`` (a wrong answer), not as a crash.

    Raises:
        TypeError: ``value`` holds something other than numbers (strings, objects, booleans).
    """
    try:
        arr = np.asarray(value)
    except ValueError:
        return _plain_lists(value, what, 0)
    if arr.dtype.kind == "O":
        return _plain_lists(value, what, 0)
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{what} must be numbers, got an array of dtype {arr.dtype}")
    return np.array(arr, dtype=np.float64, copy=True, order="C")


def _plain_lists(value: Any, what: str, depth: int) -> Any:
    """Nested lists of floats (for ragged answers); anything that is not a number is refused."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    if depth < _MAX_DEPTH and isinstance(value, (list, tuple, np.ndarray)):
        return [_plain_lists(v, what, depth + 1) for v in value]
    raise TypeError(f"{what} must be numbers (nested at most {_MAX_DEPTH} deep), found {type(value).__name__}")
