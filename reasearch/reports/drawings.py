"""The best solution of a run, drawn per task family.

A drawing is a function of a :class:`DrawContext` returning an HTML fragment (usually an inline
``<svg>``); every string in it that comes from the store must be escaped (:func:`esc`). A task family
keeps its drawing in its own package, beside its PNG code, and declares it where it registers its ids
(``register(..., drawing="package.module:draw_svg")``); this module finds it through the task registry
(:func:`~reasearch.evaluators.registry.family_entries`) and names no family itself. A drawing registered
here with :func:`register_drawing` takes precedence (a family outside the package, or a replacement).
Families without a drawing get :func:`generic_drawing`: the metrics as a table, every list of numbers in
the metrics or the solution as a line chart (a loss curve, per-window balance) and every mapping of names
to numbers as a bar chart (accuracy per split).

Example (a training task family)::

    from reasearch.reports.drawings import DrawContext, line_chart, register_drawing

    def draw_nanogpt(ctx: DrawContext) -> str:
        return line_chart({"train": ctx.result.metrics["train_loss"]}, title="loss", xlabel="step")

    register_drawing("nanogpt", draw_nanogpt)
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, cast

from reasearch.ast_lock import format_exc as format_exc_locked
from reasearch.errors import ConfigError
from reasearch.evaluators.registry import family_entries
from reasearch.evaluators.svg import bar_chart, esc, line_chart
from reasearch.reports._draw_context import DrawContext, Drawing

__all__ = ["DrawContext", "Drawing", "register_drawing", "drawing_for", "draw_solution", "generic_drawing",
           "line_chart", "bar_chart", "esc"]


_DRAWINGS: dict[str, Drawing] = {}  # registered here (register_drawing); a family's declared one otherwise


def register_drawing(family: str, drawing: Drawing, *, replace: bool = False) -> None:
    """Registers the drawing of a task family (the part of the task id before ``/``).

    Raises:
        ConfigError: the family already has a drawing and ``replace`` is False.
    """
    if not family or "/" in family:
        raise ConfigError(f"a task family is the part of a task id before '/', not {family!r}")
    if (family in _DRAWINGS or _declared_drawing(family) is not None) and not replace:
        raise ConfigError(f"task family {family!r} already has a drawing; pass replace=True to change it")
    _DRAWINGS[family] = drawing


def _declared_drawing(family: str) -> Drawing | None:
    """The drawing a task family declares where it registers its ids (its first registration naming one)."""
    for entry in family_entries(family):
        if entry.drawing:
            module, _, name = entry.drawing.partition(":")
            return cast(Drawing, getattr(importlib.import_module(module), name))
    return None


def drawing_for(task_id: str) -> Drawing:
    """The drawing of the task's family (registered here, else declared by the family), or :func:`generic_drawing`."""
    family = task_id.split("/", 1)[0]
    return _DRAWINGS.get(family) or _declared_drawing(family) or generic_drawing


def draw_solution(ctx: DrawContext) -> str:
    """The drawing of ``ctx`` wrapped in ``<figure class="solution" data-family=...>``.

    A drawing that fails (data it did not expect, or a declared module that does not load) never breaks
    the report: the generic drawing is shown with the error.
    """
    try:
        drawing = drawing_for(ctx.task_id)
        kind = ctx.family if drawing is not generic_drawing else "generic"
        body = drawing(ctx)
    except Exception as exc:  # a report must open whatever a result holds
        tail = format_exc_locked(limit=3)
        body = (f'<p class="warn">the {esc(ctx.family)} drawing failed: {esc(type(exc).__name__)}: {esc(exc)}</p>'
                f"<details><summary>traceback</summary><pre>{esc(tail)}</pre></details>" + generic_drawing(ctx))
        kind = "generic"
    return f'<figure class="solution" data-family="{esc(kind)}">{body}</figure>'


def _numbers(value: Any) -> list[float] | None:
    if isinstance(value, (list, tuple)) and len(value) >= 2 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return [float(v) for v in value]
    return None


def _named_numbers(value: Any) -> dict[str, float] | None:
    if isinstance(value, Mapping) and 1 <= len(value) <= 64 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value.values()):
        return {str(k): float(v) for k, v in value.items()}
    return None


def generic_drawing(ctx: DrawContext) -> str:
    """Any result: scalar metrics as a table, number lists as line charts, name->number maps as bars."""
    res = ctx.result
    if res is None:
        return '<p class="muted">no evaluation scored OK: nothing to draw</p>'
    charts: list[str] = []
    rows: list[str] = []
    sources: list[tuple[str, Mapping[str, Any]]] = [("metrics", res.metrics)]
    if isinstance(res.solution, Mapping):
        sources.append(("solution", res.solution))
    for origin, data in sources:
        for key, value in data.items():
            if len(charts) >= 12:
                break
            if (series := _numbers(value)) is not None:
                charts.append(line_chart({str(key): series[:5000]}, title=f"{origin}.{key}", xlabel="index"))
            elif (named := _named_numbers(value)) is not None:
                charts.append(bar_chart({str(key): list(named.values())}, labels=list(named), title=f"{origin}.{key}"))
            elif isinstance(value, Mapping) and all(_numbers(v) is not None for v in value.values()) and value:
                charts.append(line_chart({str(k): (_numbers(v) or [])[:5000] for k, v in list(value.items())[:8]},
                                         title=f"{origin}.{key}", xlabel="index"))
            elif origin == "metrics" and (value is None or isinstance(value, (int, float, str, bool))):
                rows.append(f"<tr><th>{esc(key)}</th><td>{esc(html_value(value))}</td></tr>")
    table = f'<table class="kv">{"".join(rows[:200])}</table>' if rows else ""
    return f'<div class="generic">{"".join(charts)}{table}</div>' if charts or table else \
        '<p class="muted">this result carries no metrics to draw</p>'


def html_value(value: Any) -> str:
    """A short text for a metric value."""
    if isinstance(value, float):
        return f"{value:.6g}"
    text = str(value)
    return text if len(text) <= 300 else text[:300] + "..."

