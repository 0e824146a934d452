# reasearch: jail (imported inside the sandbox: see reasearch/engine/_runtime.py)
"""Runs inside the sandbox: calls the candidate and hands back its points as a plain float64 array.

The parent checks the shape and the square, and recomputes the minimum triangle area itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from reasearch.evaluators._entry_call import (
    as_float_array,
    call_entry,
    native_in_image,
    seed_args,
    seed_everything,
)

__all__ = ["ENTRY_ARGS", "rehearse", "run_candidate", "warmup"]

ENTRY_ARGS = seed_args(
    {"n": ("n", "num_points", "n_points")},
    forms=("()", "(n)", "(num_points)", "(seed=...)", "(n, seed=...)"),
)
"""Published programs take nothing, the number of points (``n`` or ``num_points``) and/or a seed."""


def run_candidate(entry: Callable[..., Any], payload: Mapping[str, Any]) -> dict[str, Any]:
    """Seeds the generators, calls the entry point; accepts the points, ``{"points": ...}`` or ``(points, ...)``.

    The entry point gets what its signature asks for by name: ``n``/``num_points`` and ``seed``.
    """
    seed = seed_everything(payload.get("seed"))
    n = payload.get("n")
    out = call_entry(entry, {"n": None if n is None else int(n), "seed": seed}, ENTRY_ARGS)
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
    """Compiles the numba kernels once per worker (candidates may call them).

    Only in a worker whose warm image holds ``reasearch.native`` (see ``native_in_image``)."""
    if not native_in_image():
        return
    from reasearch.native.geometry import warmup as geometry_warmup

    geometry_warmup("triangles")


def _rehearsal_points(n: int = 3, seed: int | None = None) -> Any:
    import numpy as np

    return np.full((n, 2), 0.5)


def rehearse() -> dict[str, Any]:
    """One evaluation's path on a built-in program, for the sandbox child to walk while it waits
    for its request (its result is dropped; every evaluation seeds again)."""
    return run_candidate(_rehearsal_points, {"seed": 0, "n": 3})
