"""Reports and a live dashboard over the run store: every run as pictures a person reads at a glance.

Sits between the command line and the agent: ``cli -> reports -> agent -> runs -> evaluators ->
engine``. It only reads the store.

Quick use::

    from reasearch.runs import open_store
    from reasearch.reports import write_report, write_compare

    with open_store("runs") as store:
        write_report(store, "20261201-101500-3f9a", "report.html")   # one self-contained HTML file
        write_compare(store, ["run-a", "run-b"], "compare.html")     # curves overlaid, results table

Charts are Plotly (plotly.js from the pinned ``plotly`` package, inlined once per file: the file
opens offline); the best solution of each task family is inline SVG drawn by a registry
(:mod:`reasearch.reports.drawings`). ``reasearch serve`` (:mod:`reasearch.reports.serve`, the ``web``
extra) shows every run live.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from reasearch.reports._model import RunView, load_run
from reasearch.reports._page import compare_html, report_html, report_payload
from reasearch.reports.drawings import DrawContext, draw_solution, drawing_for, generic_drawing, register_drawing
from reasearch.runs.store import Store

__all__ = [
    "RunView", "load_run", "build_report", "write_report", "build_compare", "write_compare", "report_payload",
    "DrawContext", "register_drawing", "drawing_for", "draw_solution", "generic_drawing",
]


def build_report(store: Store, run_id: str) -> str:
    """The self-contained HTML report of one run (its id or a unique prefix).

    Raises:
        StoreError: no such run (or an ambiguous prefix).
    """
    return report_html(load_run(store, run_id))


def write_report(store: Store, run_id: str, path: str | Path) -> Path:
    """Writes :func:`build_report` to ``path`` (UTF-8) and returns the path."""
    out = Path(path)
    out.write_text(build_report(store, run_id), encoding="utf-8")
    return out


def build_compare(store: Store, run_ids: Sequence[str]) -> str:
    """One self-contained HTML page comparing runs: best-so-far curves overlaid, a results table."""
    return compare_html([load_run(store, r) for r in run_ids])


def write_compare(store: Store, run_ids: Sequence[str], path: str | Path) -> Path:
    """Writes :func:`build_compare` to ``path`` and returns the path."""
    out = Path(path)
    out.write_text(build_compare(store, run_ids), encoding="utf-8")
    return out
