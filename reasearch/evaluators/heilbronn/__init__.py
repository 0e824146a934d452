"""Heilbronn triangles in the unit square (``heilbronn/n11-v1`` .. ``heilbronn/n15-v1``).

Heavy names load on first access, so registering the ids costs nothing.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["BEST_KNOWN", "HeilbronnTask", "register_all", "render_points"]

_LAZY = {
    "HeilbronnTask": "reasearch.evaluators.heilbronn.task",
    "BEST_KNOWN": "reasearch.evaluators.heilbronn.task",
    "render_points": "reasearch.evaluators.heilbronn.render",
}

_SIZES = range(11, 16)


def register_all() -> None:
    """Registers ``heilbronn/n{N}-v1`` for N = 11..15 (lazy entry points)."""
    from reasearch.evaluators.heilbronn._records import BEST_KNOWN, BEST_KNOWN_SOURCES, SEED_SCORES
    from reasearch.evaluators.registry import register

    for n in _SIZES:
        register(
            f"heilbronn/n{n}-v1",
            "reasearch.evaluators.heilbronn.task:HeilbronnTask",
            kwargs={"n": n},
            summary=f"{n} points in the unit square, maximize the smallest triangle area",
            listing={"direction": "maximize", "best_known": BEST_KNOWN.get(n), "seed_score": SEED_SCORES.get(n),
                     "best_known_source": BEST_KNOWN_SOURCES.get(n, "")},
            drawing="reasearch.evaluators.heilbronn.render:draw_svg",
        )


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
