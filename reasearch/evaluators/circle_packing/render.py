"""Pictures of packings: the PNG (matplotlib's Agg canvas, no pyplot global state) and the report's inline SVG
(:func:`draw_svg`, declared where the ids are registered), both from a stored answer's numbers only."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from reasearch.evaluators.result import EvalResult
from reasearch.evaluators.svg import DrawingContext, esc, solution_of, unit_square

__all__ = ["render_packing", "draw_svg", "tightest_constraints"]

_TIGHT = 10  # constraints marked on a packing


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


def tightest_constraints(centers: np.ndarray, radii: np.ndarray, k: int = _TIGHT) -> list[tuple[float, str, int, int]]:
    """The ``k`` constraints of a packing with the least slack: ``(slack, kind, i, j)``; kind is
    ``pair`` (circles i and j) or a wall (``left``, ``right``, ``bottom``, ``top``; j = -1)."""
    n = len(radii)
    out: list[tuple[float, str, int, int]] = []
    if n >= 2:
        d = np.sqrt(((centers[:, None, :] - centers[None, :, :]) ** 2).sum(-1)) - radii[:, None] - radii[None, :]
        iu = np.triu_indices(n, 1)
        out += [(float(s), "pair", int(i), int(j)) for s, i, j in zip(d[iu], *iu, strict=True)]
    x, y = centers[:, 0], centers[:, 1]
    for kind, slack in (("left", x - radii), ("right", 1 - x - radii), ("bottom", y - radii), ("top", 1 - y - radii)):
        out += [(float(s), kind, i, -1) for i, s in enumerate(slack)]
    out.sort(key=lambda t: t[0])
    return out[:k]


def draw_svg(ctx: DrawingContext) -> str:
    """Circles in the unit square; the tightest constraints (touching pairs, touching walls) in red."""
    sol = solution_of(ctx)
    centers = np.asarray(sol["centers"], dtype=np.float64).reshape(-1, 2)
    radii = np.asarray(sol["radii"], dtype=np.float64).reshape(-1)
    if len(centers) != len(radii) or not (np.isfinite(centers).all() and np.isfinite(radii).all()):
        raise ValueError("centers and radii do not match or are not finite")
    parts = []
    for i, ((x, y), r) in enumerate(zip(centers, radii, strict=True)):
        parts.append(
            f'<circle class="c" cx="{x:.6f}" cy="{y:.6f}" r="{max(r, 0):.6f}" fill="#97bbf5" fill-opacity="0.6" '
            f'stroke="#1f3f8f" stroke-width="0.002"><title>circle {i}: ({x:.6f}, {y:.6f}) r={r:.6f}</title></circle>'
        )
    tight = tightest_constraints(centers, radii)
    walls = {"left": lambda x, y: (0.0, y), "right": lambda x, y: (1.0, y),
             "bottom": lambda x, y: (x, 0.0), "top": lambda x, y: (x, 1.0)}
    rows = []
    for slack, kind, i, j in tight:
        x1, y1 = centers[i]
        x2, y2 = centers[j] if kind == "pair" else walls[kind](x1, y1)
        what = f"circles {i} and {j}" if kind == "pair" else f"circle {i} and the {kind} wall"
        parts.append(f'<line class="tight" x1="{x1:.6f}" y1="{y1:.6f}" x2="{x2:.6f}" y2="{y2:.6f}" stroke="#d62728" '
                     f'stroke-width="0.005"><title>{what}: slack {slack:.3e}</title></line>')
        rows.append(f"<tr><td>{esc(what)}</td><td>{slack:.3e}</td></tr>")
    for i, (x, y) in enumerate(centers):
        parts.append(f'<text x="{x:.5f}" y="{-y:.5f}" transform="scale(1 -1)" font-size="0.025" text-anchor="middle" '
                     f'dominant-baseline="middle">{i}</text>')
    caption = (f"n={len(radii)}, sum of radii {float(radii.sum()):.9f}; red: the {len(tight)} tightest constraints "
               "(slack = gap between circles, or between a circle and a wall)")
    table = f'<table class="kv small"><tr><th>tightest constraint</th><th>slack</th></tr>{"".join(rows)}</table>'
    return f'<div class="row">{unit_square("".join(parts), esc(caption), "packing")}{table}</div>'
