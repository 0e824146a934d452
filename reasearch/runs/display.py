"""How a run's budget and activity read in tables (``reasearch runs``, the dashboard)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["age_text", "budget_text", "duration_text"]


def budget_text(used: Mapping[Any, float], caps: Mapping[Any, float]) -> str:
    """``evaluations 3/50, tokens 1200``: capped units as used/cap, then uncapped units that were used."""
    name = lambda u: getattr(u, "value", str(u))  # noqa: E731  (Unit or its string)
    used_by = {name(u): v for u, v in used.items()}
    caps_by = {name(u): c for u, c in caps.items()}
    parts = [f"{u} {used_by.get(u, 0.0):g}/{cap:g}" for u, cap in caps_by.items()]
    parts += [f"{u} {v:g}" for u, v in used_by.items() if u not in caps_by and v]
    return ", ".join(parts) or "-"


def age_text(seconds: float) -> str:
    """``42 s``, ``7 min``, ``3.5 h``, ``2.0 d``: how long ago a run last wrote (a dead driver stops writing)."""
    seconds = max(seconds, 0.0)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def duration_text(seconds: float) -> str:
    """``42.0 s``, ``2 min 05 s``, ``1 h 03 min``: a run's active wall time, the same in the summary and the report."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f} s"
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s:02d} s" if m < 60 else f"{m // 60} h {m % 60:02d} min"
