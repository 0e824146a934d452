"""The ARC renderer draws from plain data: no task object, and no import of the task module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from reasearch.errors import ConfigError
from reasearch.evaluators.arc_agi_2._render import render_train_png
from reasearch.evaluators.result import EvalResult, Status


def _result(attempts: list[list[list[list[int]] | None]], phase: str = "train") -> EvalResult:
    return EvalResult(Status.OK, 0.5, None, {"pairs": [{"index": 0, "solved": True}, {"index": 1, "solved": False}]},
                      "", 0.1, 0.1, solution={"phase": phase, "attempts": attempts})


def test_render_train_png_from_plain_grids(tmp_path: Path) -> None:
    from matplotlib.image import imread

    train = [([[1, 2]], [[2, 1]]), ([[3]], [[4]])]
    res = _result([[[[2, 1]], None], [[[4]], [[3]]]])
    img = imread(render_train_png("arc_agi_2/x-v1", train, res, tmp_path / "t.png"))
    assert img.shape[0] > 200 and img.shape[1] > img.shape[0]  # two rows of four panels
    one = imread(render_train_png("arc_agi_2/x-v1", train, res, tmp_path / "one.png", pairs=[1]))
    assert one.shape[0] < img.shape[0]
    with pytest.raises(ConfigError, match="has 2"):
        render_train_png("arc_agi_2/x-v1", train, _result([[[[2, 1]], None]]), tmp_path / "bad.png")
    with pytest.raises(ConfigError, match="OK train result"):
        render_train_png("arc_agi_2/x-v1", train, _result([], phase="test"), tmp_path / "bad.png")


def test_render_module_does_not_import_the_task() -> None:
    """Not even under TYPE_CHECKING: the renderer knows grids and results, not ArcTask."""
    import reasearch.evaluators.arc_agi_2._render as render

    tree = ast.parse(Path(render.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    assert not {m for m in imported if m and m.startswith("reasearch.evaluators.arc_agi_2")}, imported
