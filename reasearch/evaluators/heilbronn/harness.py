# reasearch: jail (imported inside the sandbox: see reasearch/engine/_runtime.py)
"""Runs inside the sandbox: calls the candidate and hands back its points as a plain float64 array.

The parent checks the shape and the square, and recomputes the minimum triangle area itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from reasearch.evaluators._entry_call import as_float_array, call_entry

__all__ = ["run_candidate", "warmup"]


def run_candidate(entry: Callable[..., Any], payload: Mapping[str, Any]) -> dict[str, Any]:
    """Calls the entry point; accepts the points themselves, ``{"points": ...}`` or ``(points, ...)``."""
    out = call_entry(entry, payload)
    if isinstance(out, Mapping):
        if "points" not in out:
            raise TypeError(f"the returned dict has no 'points' key (keys: {sorted(map(str, out))[:10]})")
        out = out["points"]
    elif isinstance(out, tuple) and out and not isinstance(out[0], (int, float)):
        out = out[0]
    if out is None:
        name = getattr(entry, "__name__", "the entry point")
        raise TypeError(f"{name}() returned None; return an (n, 2) array of points")
    return {"points": as_float_array(out, "points")}


def warmup() -> None:
    """Compiles the numba kernels once per worker (candidates may call them)."""
    from reasearch.native.geometry import warmup as geometry_warmup

    geometry_warmup("triangles")
