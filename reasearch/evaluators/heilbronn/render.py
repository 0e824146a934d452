"""Pictures of Heilbronn point sets: the PNG (matplotlib's Agg canvas, no pyplot global state) and the report's
inline SVG (:func:`draw_svg`, declared where the ids are registered), both from a stored answer's numbers only."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from reasearch.evaluators.result import EvalResult
from reasearch.evaluators.svg import DrawingContext, esc, solution_of, unit_square
from reasearch.native.geometry import smallest_triangles

__all__ = ["render_points", "draw_svg"]


def render_points(
    result_or_data: EvalResult | Mapping[str, Any],
    path: str | os.PathLike[str],
    *,
    title: str | None = None,
    highlight: int = 3,
) -> Path:
    """Draws the points in the unit square, filling the ``highlight`` smallest triangles, and writes a PNG.

    Args:
        result_or_data: an OK :class:`EvalResult` of a Heilbronn task, or ``{"points": ...}``.
        path: where to write the PNG.
        title: the figure title (default: n and the smallest area).
        highlight: how many of the smallest triangles to shade.

    Returns:
        The path written.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Polygon, Rectangle

    if isinstance(result_or_data, EvalResult):
        if result_or_data.solution is None:
            raise ValueError(f"this {result_or_data.status} result has no solution to draw (only OK results carry one)")
        data: Mapping[str, Any] = result_or_data.solution
    else:
        data = result_or_data
    points = np.asarray(data["points"], dtype=np.float64).reshape(-1, 2)
    tris = smallest_triangles(points, highlight)
    fig = Figure(figsize=(5, 5), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.add_patch(Rectangle((0, 0), 1, 1, fill=False, lw=1.2, color="black"))
    for rank, (_, idx) in enumerate(tris):
        ax.add_patch(Polygon(points[list(idx)], closed=True, alpha=0.35 / (rank + 1), fc="crimson", ec="crimson"))
    ax.scatter(points[:, 0], points[:, 1], s=18, color="black", zorder=3)
    for k, (x, y) in enumerate(points):
        ax.annotate(str(k), (x, y), textcoords="offset points", xytext=(3, 3), fontsize=7)
    ax.set_xlim(-0.03, 1.03)
    ax.set_ylim(-0.03, 1.03)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    area = tris[0][0] if tris else float("nan")
    ax.set_title(title or f"n={len(points)}, smallest triangle area {area:.9g}")
    out = Path(path)
    fig.savefig(out, format="png", bbox_inches="tight")
    return out


def draw_svg(ctx: DrawingContext) -> str:
    """Heilbronn points; the smallest triangle filled red, the next ones lighter."""
    sol = solution_of(ctx)
    points = np.asarray(sol["points"], dtype=np.float64).reshape(-1, 2)
    if not np.isfinite(points).all():
        raise ValueError("points are not finite")
    tris = smallest_triangles(points, 3)
    parts = []
    for rank, (area, idx) in reversed(list(enumerate(tris))):
        pts = " ".join(f"{points[i, 0]:.6f},{points[i, 1]:.6f}" for i in idx)
        parts.append(f'<polygon class="{"smallest" if rank == 0 else "small"}" points="{pts}" fill="#d62728" '
                     f'fill-opacity="{0.55 / (rank + 1):.3f}" stroke="#d62728" stroke-width="0.003">'
                     f'<title>triangle {idx}: area {area:.6g}</title></polygon>')
    for i, (x, y) in enumerate(points):
        parts.append(f'<circle class="pt" cx="{x:.6f}" cy="{y:.6f}" r="0.011" fill="#222"><title>point {i}: '
                     f'({x:.6f}, {y:.6f})</title></circle>')
        parts.append(
            f'<text x="{x + 0.015:.5f}" y="{-y - 0.012:.5f}" transform="scale(1 -1)" font-size="0.03">{i}</text>'
        )
    area = tris[0][0] if tris else float("nan")
    caption = (f"n={len(points)}, smallest triangle area {area:.9g} (points {tris[0][1] if tris else '-'}); "
               "the next two smallest shaded lighter")
    return unit_square("".join(parts), esc(caption), "heilbronn")
