"""One score formatter (issue 42 item 5): scores are written for people by ``evaluators.scores.fmt_score``;
a function elsewhere named for formatting scores calls it (a report's fixed digits), never has a rule of its own."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "reasearch"
HOME = ROOT / "evaluators" / "scores.py"


def _calls_fmt_score(fn: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and (getattr(n.func, "id", None) == "fmt_score"
                                            or getattr(n.func, "attr", None) == "fmt_score") for n in ast.walk(fn))


def score_formatters(root: Path) -> list[str]:
    """``module:function`` for every function whose name says it formats a score (``fmt_score``,
    ``format_score``, ``_format_scores``...) and that does not hand the work to a ``fmt_score``."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = node.name.lower().lstrip("_")
                if name.startswith(("fmt_score", "format_score")) and not _calls_fmt_score(node):
                    out.append(f"{path.relative_to(root.parent)}:{node.name}")
    return out


def test_the_finder_sees_a_second_formatter(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "fleet.py").write_text("def format_score(x):\n    return f'{x:.6g}'\n")
    (tmp_path / "pkg" / "other.py").write_text("def fmt(x):\n    return str(x)\n")
    (tmp_path / "pkg" / "report.py").write_text("def fmt_score(x):\n    return scores.fmt_score(x, digits=10)\n")
    assert score_formatters(tmp_path / "pkg") == ["pkg/fleet.py:format_score"]


def test_fmt_score_is_the_one_score_formatter() -> None:
    assert score_formatters(ROOT) == [f"{HOME.relative_to(ROOT.parent)}:fmt_score"]
