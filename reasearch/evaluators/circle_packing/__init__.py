"""Circle packing in the unit square (``circle_packing/n23-v1`` .. ``circle_packing/n32-v1``).

Heavy names (the task class, the LP, the renderer) load on first access, so registering the ids costs
nothing.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["BEST_KNOWN", "CirclePackingTask", "optimal_radii", "register_all", "render_packing"]

_LAZY = {
    "CirclePackingTask": "reasearch.evaluators.circle_packing.task",
    "BEST_KNOWN": "reasearch.evaluators.circle_packing.task",
    "optimal_radii": "reasearch.native.lp",
    "render_packing": "reasearch.evaluators.circle_packing.render",
}

_SIZES = range(23, 33)


def register_all() -> None:
    """Registers ``circle_packing/n{N}-v1`` for N = 23..32 (lazy entry points)."""
    from reasearch.evaluators.circle_packing._records import BEST_KNOWN, BEST_KNOWN_SOURCE, SEED_SCORES
    from reasearch.evaluators.registry import register

    for n in _SIZES:
        register(
            f"circle_packing/n{n}-v1",
            "reasearch.evaluators.circle_packing.task:CirclePackingTask",
            kwargs={"n": n},
            summary=f"{n} circles in the unit square, maximize the sum of radii (strict validity)",
            listing={"direction": "maximize", "best_known": BEST_KNOWN.get(n), "seed_score": SEED_SCORES.get(n),
                     "best_known_source": BEST_KNOWN_SOURCE if n in BEST_KNOWN else ""},
            drawing="reasearch.evaluators.circle_packing.render:draw_svg",
        )


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
