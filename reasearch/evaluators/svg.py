"""What a task family's report drawing is given and the inline-SVG pieces it is drawn with.

A family declares its drawing where it registers its ids (``register(..., drawing="module:draw_svg")``,
see :mod:`reasearch.evaluators.registry`); the module beside its PNG code defines ``draw_svg(ctx) -> str``,
an HTML fragment (usually an inline ``<svg>``). ``ctx`` is any object with the attributes of
:class:`DrawingContext` (the reports pass their ``DrawContext``), so a family's drawing never imports the
reports, which sit layers above the evaluators.

Trust boundary: everything in ``ctx.result`` came from a stored run and, through the candidate's answer,
from untrusted code: a drawing reads only numbers and text from it, runs nothing, and escapes every string
it writes into the page (:func:`esc`). A drawing that raises is caught by the report, which shows the
generic drawing instead.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from reasearch.evaluators.result import EvalResult

__all__ = ["DrawingContext", "PALETTE", "esc", "num", "line_chart", "bar_chart", "unit_square", "solution_of"]


class DrawingContext(Protocol):
    """What a family's ``draw_svg`` is given (duck-typed; the reports' ``DrawContext`` is one).

    Attributes:
        task_id: the registry id (``circle_packing/n26-v1``).
        task_params: the task's constructor parameters as stored with the run.
        result: the result to draw (usually the best ``OK`` one; ``result.solution`` holds the answer).
        source: the candidate's source.
    """

    @property
    def task_id(self) -> str: ...

    @property
    def task_params(self) -> Mapping[str, Any]: ...

    @property
    def result(self) -> EvalResult | None: ...

    @property
    def source(self) -> str: ...


PALETTE = ("#4269d0", "#efb118", "#ff725c", "#6cc5b0", "#3ca951", "#ff8ab7", "#a463f2", "#97bbf5", "#9c6b4e", "#9498a0")


def esc(text: object) -> str:
    """HTML-escaped text (quotes too: safe in attributes)."""
    return html.escape(str(text), quote=True)


def num(x: float) -> str:
    """A coordinate, short."""
    return f"{x:.4g}" if abs(x) < 1e4 else f"{x:.0f}"


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def _finite(values: Sequence[object]) -> list[float]:
    out = []
    for v in values:
        try:
            f = float(v)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
        if math.isfinite(f):
            out.append(f)
    return out


def line_chart(series: Mapping[str, Sequence[float]], *, title: str, xlabel: str = "", ylabel: str = "",
               width: int = 460, height: int = 240, cls: str = "chart") -> str:
    """Lines through each series' points (x = index), with min/max labels on the y axis."""
    clean = {k: _finite(v) for k, v in series.items()}
    clean = {k: v for k, v in clean.items() if v}
    left, right, top, bottom = 56, 10, 24, 30
    pw, ph = width - left - right, height - top - bottom
    parts = [f'<svg class="{esc(cls)}" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img">',
             f'<text x="{width / 2}" y="15" text-anchor="middle" class="t">{esc(title)}</text>']
    if not clean:
        parts.append(f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle">no data</text></svg>')
        return "".join(parts)
    lo = min(min(v) for v in clean.values())
    hi = max(max(v) for v in clean.values())
    if hi == lo:
        hi, lo = hi + 0.5 * (abs(hi) or 1), lo - 0.5 * (abs(lo) or 1)
    n = max(len(v) for v in clean.values())
    parts.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
    parts.append(f'<text x="{left - 4}" y="{top + 10}" text-anchor="end" class="a">{_fmt(hi)}</text>')
    parts.append(f'<text x="{left - 4}" y="{top + ph}" text-anchor="end" class="a">{_fmt(lo)}</text>')
    parts.append(f'<text x="{left + pw / 2}" y="{height - 4}" text-anchor="middle" class="a">{esc(xlabel)}</text>')
    if ylabel:
        parts.append(f'<text x="12" y="{top + ph / 2}" text-anchor="middle" class="a" '
                     f'transform="rotate(-90 12 {top + ph / 2})">{esc(ylabel)}</text>')
    for k, (name, values) in enumerate(clean.items()):
        color = PALETTE[k % len(PALETTE)]
        pts = " ".join(f"{num(left + (i / max(n - 1, 1)) * pw)},{num(top + ph - (v - lo) / (hi - lo) * ph)}"
                       for i, v in enumerate(values))
        parts.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="1.6" '
            f'points="{pts}"><title>{esc(name)}</title></polyline>'
        )
        parts.append(f'<text x="{left + pw - 4}" y="{top + 14 + 13 * k}" text-anchor="end" fill="{color}" class="a">'
                     f'{esc(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def bar_chart(groups: Mapping[str, Sequence[float]], *, labels: Sequence[str] | None = None, title: str,
              ylabel: str = "", width: int = 640, height: int = 260, cls: str = "chart",
              reference: float | None = None) -> str:
    """Grouped bars: one bar per group at each position (``labels`` name the positions)."""
    clean = {k: [float(x) if math.isfinite(float(x)) else 0.0 for x in v] for k, v in groups.items()}
    n = max((len(v) for v in clean.values()), default=0)
    left, right, top, bottom = 56, 10, 24, 34
    pw, ph = width - left - right, height - top - bottom
    hi = max([max(v, default=0.0) for v in clean.values()] + [reference or 0.0, 1e-12])
    parts = [f'<svg class="{esc(cls)}" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img">',
             f'<text x="{width / 2}" y="15" text-anchor="middle" class="t">{esc(title)}</text>',
             f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>',
             f'<text x="{left - 4}" y="{top + 10}" text-anchor="end" class="a">{_fmt(hi)}</text>',
             f'<text x="{left - 4}" y="{top + ph}" text-anchor="end" class="a">0</text>']
    if ylabel:
        parts.append(f'<text x="12" y="{top + ph / 2}" text-anchor="middle" class="a" '
                     f'transform="rotate(-90 12 {top + ph / 2})">{esc(ylabel)}</text>')
    g = max(len(clean), 1)
    slot = pw / max(n, 1)
    bw = slot * 0.85 / g
    for k, (name, values) in enumerate(clean.items()):
        color = PALETTE[k % len(PALETTE)]
        for i, v in enumerate(values):
            h = v / hi * ph
            x = left + i * slot + slot * 0.075 + k * bw
            label = labels[i] if labels and i < len(labels) else str(i)
            parts.append(f'<rect class="bar" x="{num(x)}" y="{num(top + ph - h)}" width="{num(bw)}" height="{num(h)}" '
                         f'fill="{color}"><title>{esc(name)} {esc(label)}: {_fmt(v)}</title></rect>')
        parts.append(f'<text x="{left + pw - 4}" y="{top + 14 + 13 * k}" text-anchor="end" fill="{color}" class="a">'
                     f'{esc(name)}</text>')
    if reference is not None and hi > 0:
        y = top + ph - reference / hi * ph
        parts.append(
            f'<line x1="{left}" x2="{left + pw}" y1="{num(y)}" y2="{num(y)}" stroke="#333" stroke-dasharray="4 3">'
            f"<title>mean {_fmt(reference)}</title></line>"
        )
    if labels and n <= 64:
        step = max(1, n // 16)
        for i in range(0, n, step):
            parts.append(f'<text x="{num(left + (i + 0.5) * slot)}" y="{top + ph + 12}" text-anchor="middle" class="a">'
                         f'{esc(labels[i])}</text>')
    parts.append("</svg>")
    return "".join(parts)


def solution_of(ctx: DrawingContext) -> Mapping[str, Any]:
    """The answer a result carries (``result.solution``); a ``ValueError`` when it holds none to draw."""
    if ctx.result is None or not isinstance(ctx.result.solution, Mapping):
        raise ValueError("the result carries no solution")
    return ctx.result.solution


UNIT_SQUARE_PX = 420  # pixels of a unit-square drawing


def unit_square(body: str, caption: str, cls: str) -> str:
    """An SVG of the unit square, y up (the model's coordinates), with ``body`` drawn in unit coordinates."""
    pad = 0.03
    return (
        f'<div><svg class="{cls}" viewBox="{-pad} {-pad} {1 + 2 * pad} {1 + 2 * pad}" width="{UNIT_SQUARE_PX}" '
        f'height="{UNIT_SQUARE_PX}" role="img"><g transform="matrix(1 0 0 -1 0 1)">'
        f'<rect x="0" y="0" width="1" height="1" fill="none" stroke="#222" stroke-width="0.004"/>{body}</g></svg>'
        f"<figcaption>{caption}</figcaption></div>"
    )
