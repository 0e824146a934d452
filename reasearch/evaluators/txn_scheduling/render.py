"""Pictures of schedules: one Gantt chart per workload, as a PNG (matplotlib's Agg canvas) and as the report's
inline SVG (:func:`draw_svg`, declared where the ids are registered), both replayed on the trusted simulator."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reasearch.evaluators.result import EvalResult
from reasearch.evaluators.svg import DrawingContext, esc, num, solution_of
from reasearch.evaluators.txn_scheduling.workload import load_workloads
from reasearch.native.txn import PyTxnSimulator, compile_workload

__all__ = ["render_schedules", "draw_svg"]


def render_schedules(result_or_data: EvalResult | Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """Draws each workload's schedule as a Gantt chart (one bar per transaction, in schedule order).

    Args:
        result_or_data: an OK :class:`EvalResult` of ``txn_scheduling/v1``, or ``{"schedules": [...]}``
            (valid schedules, one per shipped workload).
        path: where to write the PNG.

    Returns:
        The path written.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if isinstance(result_or_data, EvalResult):
        if result_or_data.solution is None:
            raise ValueError(f"this {result_or_data.status} result has no solution to draw (only OK results carry one)")
        data = result_or_data.solution
    else:
        data = result_or_data
    workloads = load_workloads()
    schedules = data["schedules"]
    fig = Figure(figsize=(5 * len(workloads), 6), dpi=110)
    FigureCanvasAgg(fig)
    total = 0
    for i, (w, seq) in enumerate(zip(workloads, schedules, strict=False)):
        spans = PyTxnSimulator(compile_workload(w.txns)).placements(seq)
        makespan = max((end for _, end in spans), default=0)
        total += makespan
        ax = fig.add_subplot(1, len(workloads), i + 1)
        # a transaction occupies slots start..end: the bar covers [start - 1, end] on a 0-based time axis
        ax.barh(range(len(spans)), [end - start + 1 for start, end in spans], left=[start - 1 for start, _ in spans],
                height=0.8, color="cornflowerblue", edgecolor="navy", linewidth=0.3)
        ax.axvline(makespan, color="crimson", lw=1)
        ax.invert_yaxis()
        ax.set_xlabel("time slot")
        ax.set_ylabel("position in schedule")
        ax.set_title(f"{w.name}: makespan {makespan}")
    fig.suptitle(f"txn_scheduling/v1: total makespan {total}")
    out = Path(path)
    fig.savefig(out, format="png", bbox_inches="tight")
    return out


def draw_svg(ctx: DrawingContext) -> str:
    """A Gantt chart per workload: each transaction a bar from its start to its end slot."""
    sol = solution_of(ctx)
    workloads = load_workloads()
    schedules = sol["schedules"]
    panels, total = [], 0
    for w, seq in zip(workloads, schedules, strict=False):
        spans = PyTxnSimulator(compile_workload(w.txns)).placements([int(x) for x in seq])
        makespan = max((end for _, end in spans), default=0)
        total += makespan
        width, height, left, top = 360, 420, 30, 20
        sx = (width - left - 10) / max(makespan, 1)
        sy = (height - top - 20) / max(len(spans), 1)
        bars = [
            f'<rect class="txn" x="{num(left + (s - 1) * sx)}" y="{num(top + k * sy)}" width="{num((e - s + 1) * sx)}" '
            f'height="{num(max(sy * 0.8, 0.5))}" fill="#4269d0"><title>#{k}: txn {int(seq[k])}, slots '
            f'{s}..{e}</title></rect>'
            for k, (s, e) in enumerate(spans)
        ]
        x_end = left + makespan * sx
        panels.append(
            f'<svg class="gantt" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img">'
            f'<text x="{width / 2}" y="13" text-anchor="middle" class="t">{esc(w.name)}: makespan {makespan}</text>'
            f'{"".join(bars)}<line x1="{num(x_end)}" x2="{num(x_end)}" y1="{top}" y2="{height - 20}" stroke="#d62728"/>'
            f'<text x="{left}" y="{height - 6}" class="a">time slot 0</text>'
            f'<text x="{num(x_end)}" y="{height - 6}" text-anchor="end" class="a">{makespan}</text></svg>')
    caption = f"total makespan {total}; one row per position in the schedule, bars span start..end slot"
    return f'<div class="row">{"".join(panels)}</div><figcaption>{esc(caption)}</figcaption>'
