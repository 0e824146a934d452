"""Pictures of schedules: one Gantt chart per workload (PNG through matplotlib's Agg canvas)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reasearch.evaluators.result import EvalResult
from reasearch.evaluators.txn_scheduling.workload import load_workloads
from reasearch.native.txn import PyTxnSimulator, compile_workload

__all__ = ["render_schedules"]


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
