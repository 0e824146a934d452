# reasearch: jail (imported inside the sandbox: see reasearch/engine/_runtime.py)
"""Runs inside the sandbox: calls the candidate and hands back its centers and radii as plain arrays.

Nothing here is trusted with the score: the parent validates shapes and constraints and recomputes the
sum of radii from these arrays.
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
    {"n": ("n", "num_circles", "n_circles")},
    forms=("()", "(n)", "(num_circles)", "(seed=...)", "(n, seed=...)"),
)
"""Published packers take nothing, the number of circles (``n`` or ``num_circles``) and/or a seed."""


def run_candidate(entry: Callable[..., Any], payload: Mapping[str, Any]) -> dict[str, Any]:
    """Seeds the generators, calls the entry point; accepts ``(centers, radii, ...)`` or a dict of both.

    The entry point gets what its signature asks for by name: ``n``/``num_circles`` and ``seed``.
    """
    seed = seed_everything(payload.get("seed"))
    n = payload.get("n")
    out = call_entry(entry, {"n": None if n is None else int(n), "seed": seed}, ENTRY_ARGS)
    if isinstance(out, Mapping) and "centers" in out and "radii" in out:
        centers, radii = out["centers"], out["radii"]
    elif isinstance(out, (tuple, list)) and len(out) >= 2:
        centers, radii = out[0], out[1]
    else:
        raise TypeError(
            f"{getattr(entry, '__name__', 'the entry point')}() must return (centers, radii) "
            f"(a tuple whose first two items are an (n, 2) and an (n,) array), got {type(out).__name__}"
        )
    return {"centers": as_float_array(centers, "centers"), "radii": as_float_array(radii, "radii")}


def warmup() -> None:
    """Loads HiGHS and the numba kernels once per worker, so candidates calling them pay nothing.

    Only in a worker whose warm image holds ``reasearch.native`` (see ``native_in_image``)."""
    if not native_in_image():
        return
    import numpy as np

    from reasearch.native.geometry import warmup as geometry_warmup
    from reasearch.native.lp import optimal_radii

    geometry_warmup("packing")
    optimal_radii(np.array([[0.25, 0.25], [0.75, 0.75], [0.25, 0.75]]))


def _rehearsal_packer(n: int = 3, seed: int | None = None) -> tuple[Any, Any]:
    import numpy as np

    return np.full((n, 2), 0.5), np.full(n, 0.25)


def rehearse() -> dict[str, Any]:
    """One evaluation's path on a built-in packer, for the sandbox child to walk while it waits
    for its request (its result is dropped; every evaluation seeds again)."""
    return run_candidate(_rehearsal_packer, {"seed": 0, "n": 3})
