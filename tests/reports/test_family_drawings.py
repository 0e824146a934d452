"""Each task family keeps its report drawing in its own package and declares it where it registers its ids;
the reports find it through the task registry and name no family themselves (issue 31, one home per rule)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from reasearch.errors import ConfigError
from reasearch.evaluators.registry import family_entries, list_tasks, register, unregister
from reasearch.evaluators.result import EvalResult, Status
from reasearch.evaluators.svg import DrawingContext, esc
from reasearch.reports import DrawContext, draw_solution, drawing_for, generic_drawing, register_drawing

ROOT = Path(__file__).resolve().parents[2] / "reasearch"
FAMILY_PACKAGES = {p.name for p in (ROOT / "evaluators").iterdir() if p.is_dir() and (p / "__init__.py").exists()}


def _ok(solution: object = None, metrics: dict[str, object] | None = None) -> EvalResult:
    return EvalResult(status=Status.OK, score=1.0, normalized_score=None, metrics=metrics or {}, feedback="",
                      wall_s=0.0, cpu_s=0.0, solution=solution)


def draw_plugged(ctx: DrawingContext) -> str:
    """A family drawing as a plug-in writes it: only the duck-typed context, nothing of the reports."""
    return f'<svg class="plugged">{esc(ctx.task_id)} {esc(ctx.result.score if ctx.result else None)}</svg>'


def test_the_reports_import_no_task_family() -> None:
    """No module of reasearch.reports imports a family package (``reasearch.evaluators.<family>``)."""
    found = []
    for path in sorted((ROOT / "reports").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if isinstance(node, ast.ImportFrom) and node.module == "reasearch.evaluators":
                names += [f"reasearch.evaluators.{a.name}" for a in node.names]
            found += [f"{path.name}: {n}" for n in names if n.startswith("reasearch.evaluators.")
                      and n.split(".")[2] in FAMILY_PACKAGES]
    assert not found, found


def test_every_declared_drawing_lives_in_its_family_and_loads() -> None:
    declared: dict[str, str] = {}
    for task_id in list_tasks(include_families=True, expand=False):
        family = task_id.split("/", 1)[0]
        for entry in family_entries(family):
            if entry.drawing:
                declared[family] = entry.drawing
    # the families that had a report drawing before it moved out of the reports keep one
    assert set(declared) == {"circle_packing", "heilbronn", "txn_scheduling", "eplb", "arc_agi_2", "tabular",
                             "img", "atari"}
    for family, where in declared.items():
        module, _, name = where.partition(":")
        assert module.startswith("reasearch.evaluators."), where
        assert callable(getattr(importlib.import_module(module), name)), where
        assert drawing_for(f"{family}/x-v1") is getattr(importlib.import_module(module), name)


def test_a_family_registered_with_a_drawing_is_drawn_without_touching_the_reports() -> None:
    register("plugfam/one-v1", "reasearch.evaluators.circle_packing.task:CirclePackingTask", kwargs={"n": 26},
             drawing=f"{__name__}:draw_plugged")
    try:
        html = draw_solution(DrawContext("plugfam/other-v2", {}, _ok(metrics={"m": 1})))
        assert 'data-family="plugfam"' in html and '<svg class="plugged">plugfam/other-v2 1.0</svg>' in html
        with pytest.raises(ConfigError, match="already has a drawing"):
            register_drawing("plugfam", generic_drawing)
    finally:
        unregister("plugfam/one-v1")
    assert drawing_for("plugfam/other-v2") is generic_drawing


def test_a_drawing_registered_in_the_reports_replaces_the_declared_one() -> None:
    from reasearch.reports.drawings import _DRAWINGS

    with pytest.raises(ConfigError, match="already has a drawing"):
        register_drawing("heilbronn", generic_drawing)
    register_drawing("heilbronn", draw_plugged, replace=True)
    try:
        assert 'class="plugged"' in draw_solution(DrawContext("heilbronn/n11-v1", {}, _ok({"points": []})))
    finally:
        _DRAWINGS.pop("heilbronn", None)
    assert 'data-family="heilbronn"' in draw_solution(
        DrawContext("heilbronn/n11-v1", {}, _ok({"points": [[0.1, 0.2], [0.5, 0.9], [0.8, 0.3]]})))


@pytest.mark.parametrize("bad", ["no_colon_here", "a.b:", ":draw", "a b:c", "pkg.mod:draw svg"])
def test_a_malformed_drawing_name_is_refused_at_registration(bad: str) -> None:
    with pytest.raises(ConfigError, match="package.module:function"):
        register("plugfam/bad-v1", "reasearch.evaluators.circle_packing.task:CirclePackingTask", drawing=bad)
    with pytest.raises(Exception, match="unknown task id"):
        from reasearch.evaluators.registry import registered_entry

        registered_entry("plugfam/bad-v1")


def test_a_declared_drawing_that_does_not_load_leaves_the_report_generic() -> None:
    register("plugfam/one-v1", "reasearch.evaluators.circle_packing.task:CirclePackingTask", kwargs={"n": 26},
             drawing="reasearch.no_such_module:draw_svg")
    try:
        html = draw_solution(DrawContext("plugfam/one-v1", {}, _ok(metrics={"m": 1.5})))
    finally:
        unregister("plugfam/one-v1")
    assert 'data-family="generic"' in html and "the plugfam drawing failed: ModuleNotFoundError" in html
    assert "<th>m</th><td>1.5</td>" in html
