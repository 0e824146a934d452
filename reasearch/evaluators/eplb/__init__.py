"""Expert-parallel load balancing (``eplb/v1``): DeepSeek-V3-shaped MoE placement, balance and speed.

Heavy names load on first access, so registering the id costs nothing.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "EplbTask",
    "SyntheticWorkload",
    "load_workload_windows",
    "parse_placement",
    "register_all",
    "window_balance",
    "write_workload_json",
]

_LAZY = {
    "EplbTask": "reasearch.evaluators.eplb.task",
    "SyntheticWorkload": "reasearch.evaluators.eplb.workload",
    "load_workload_windows": "reasearch.evaluators.eplb.workload",
    "write_workload_json": "reasearch.evaluators.eplb.workload",
    "parse_placement": "reasearch.evaluators.eplb.scoring",
    "window_balance": "reasearch.evaluators.eplb.scoring",
}


def register_all() -> None:
    """Registers ``eplb/v1`` (lazy entry point)."""
    from reasearch.evaluators.registry import register

    register(
        "eplb/v1",
        "reasearch.evaluators.eplb.task:EplbTask",
        summary="place 256 MoE experts on 288 GPU slots per layer: next-window balance and speed (timed)",
        listing={"direction": "maximize", "best_known": None, "best_known_source": "", "seed_score": None},
        drawing="reasearch.evaluators.eplb.render:draw_svg",
    )


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
