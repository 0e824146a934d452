"""Pictures of packings (PNG through matplotlib's Agg canvas; no pyplot global state)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from reasearch.evaluators.result import EvalResult

__all__ = ["render_packing"]


def _solution(result_or_data: EvalResult | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(result_or_data, EvalResult):
        if result_or_data.solution is None:
            raise ValueError(f"this {result_or_data.status} result has no solution to draw (only OK results carry one)")
        return result_or_data.solution
    return result_or_data


def render_packing(
    result_or_data: EvalResult | Mapping[str, Any], path: str | os.PathLike[str], *, title: str | None = None
) -> Path:
    """Draws the circles of a packing in the unit square and writes a PNG.

    Args:
        result_or_data: an OK :class:`EvalResult` of a circle-packing task, or ``{"centers", "radii"}``.
        path: where to write the PNG.
        title: the figure title (default: n and the sum of radii).

    Returns:
        The path written.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Circle, Rectangle

    data = _solution(result_or_data)
    centers = np.asarray(data["centers"], dtype=np.float64).reshape(-1, 2)
    radii = np.asarray(data["radii"], dtype=np.float64).reshape(-1)
    fig = Figure(figsize=(5, 5), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.add_patch(Rectangle((0, 0), 1, 1, fill=False, lw=1.2, color="black"))
    for k, ((x, y), r) in enumerate(zip(centers, radii, strict=True)):
        ax.add_patch(Circle((x, y), r, alpha=0.55, ec="navy", fc="cornflowerblue", lw=0.8))
        ax.text(x, y, str(k), ha="center", va="center", fontsize=7)
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title or f"n={len(radii)}, sum of radii {float(np.sum(radii)):.9f}")
    out = Path(path)
    fig.savefig(out, format="png", bbox_inches="tight")
    return out
