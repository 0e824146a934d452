"""Reports: the per-pair rich table and PNG pictures of grids in ARC's 10-colour palette."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reasearch.errors import ConfigError
from reasearch.evaluators.result import EvalResult

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["ARC_PALETTE", "render_grids_png", "render_pair_png", "render_train_png", "result_table"]

# The colours of the ARC tools: 0 black, 1 blue, 2 red, 3 green, 4 yellow, 5 grey, 6 magenta,
# 7 orange, 8 sky, 9 maroon.
ARC_PALETTE = (
    "#000000", "#0074D9", "#FF4136", "#2ECC40", "#FFDC00",
    "#AAAAAA", "#F012BE", "#FF851B", "#7FDBFF", "#870C25",
)


def _shape(shape: Sequence[int] | None) -> str:
    return f"{shape[0]}x{shape[1]}" if shape else "-"


def _attempt_cell(a: dict[str, Any]) -> str:
    status = a["status"]
    if status == "correct":
        return "[green]correct[/]"
    if status == "wrong_cells":
        return f"{_shape(a['shape'])} {a['accuracy']:.1%}"
    if status == "wrong_shape":
        return f"[yellow]shape {_shape(a['shape'])}[/]"
    return f"[red]{status}[/]"


def result_table(task_id: str, result: EvalResult) -> Table:
    """A rich table: one row per pair (train) or test input (submit) of an ARC result."""
    from rich.table import Table

    metrics = result.metrics
    score = "-" if result.score is None else f"{result.score:.4f}"
    table = Table(title=f"{task_id}: {result.status.value}, score {score}")
    if "pairs" in metrics:
        for col in ("pair", "expected", "attempt 1", "attempt 2", "shape", "cell acc.", "solved"):
            table.add_column(col, justify="right" if col in ("pair", "cell acc.") else "left")
        for p in metrics["pairs"]:
            a1, a2 = p["attempts"]
            table.add_row(
                str(p["index"]), _shape(p["expected_shape"]), _attempt_cell(a1), _attempt_cell(a2),
                "yes" if p["shape_match"] else "no", f"{p['accuracy']:.1%}",
                "[green]yes[/]" if p["solved"] else "[red]no[/]",
            )
    elif "tests" in metrics:
        table.add_column("test input", justify="right")
        table.add_column("solved (pass@2)")
        for t in metrics["tests"]:
            table.add_row(str(t["index"]), "[green]yes[/]" if t["solved"] else "[red]no[/]")
    else:  # a failure before any pair was scored
        table.add_column("feedback")
        table.add_row(result.feedback[:2000])
    return table


def _draw(ax: Any, grid: Sequence[Sequence[int]] | None, title: str) -> None:
    from matplotlib.colors import ListedColormap

    ax.set_title(title, fontsize=8)
    ax.set_xticks([])
    ax.set_yticks([])
    if grid is None:
        ax.text(0.5, 0.5, "no grid", ha="center", va="center", fontsize=8)
        ax.set_facecolor("#f4f4f4")
        return
    rows, cols = len(grid), len(grid[0])
    ax.imshow(grid, cmap=ListedColormap(ARC_PALETTE), vmin=-0.5, vmax=9.5, interpolation="nearest")
    # Thin grid lines between cells, as the ARC viewer draws them.
    ax.set_xticks([c - 0.5 for c in range(1, cols)], minor=True)
    ax.set_yticks([r - 0.5 for r in range(1, rows)], minor=True)
    ax.grid(which="minor", color="#555555", linewidth=0.4)
    ax.tick_params(which="minor", length=0)


def render_grids_png(rows: Sequence[Sequence[tuple[str, Sequence[Sequence[int]] | None]]], path: Path,
                     *, title: str = "") -> Path:
    """Draws rows of titled grids (None draws an empty panel) to a PNG and returns its path."""
    # A bare Figure renders with Agg and never touches pyplot's global state (thread-safe, no GUI).
    from matplotlib.figure import Figure

    if not rows:
        raise ConfigError("nothing to draw: give at least one row of grids")
    n_cols = max(len(r) for r in rows)
    fig = Figure(figsize=(2.3 * n_cols, 2.4 * len(rows)))
    axes = fig.subplots(len(rows), n_cols, squeeze=False)
    for i, row in enumerate(rows):
        for j in range(n_cols):
            if j < len(row):
                _draw(axes[i][j], row[j][1], row[j][0])
            else:
                axes[i][j].axis("off")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, format="png")
    return path


def render_pair_png(input_grid: Sequence[Sequence[int]], expected: Sequence[Sequence[int]] | None,
                    got: Sequence[Sequence[int]] | None, path: str | Path, *, title: str = "") -> Path:
    """Draws one pair as input | expected | got in ARC's palette to a PNG.

    Args:
        input_grid: the input grid.
        expected: the expected output (None: an empty panel).
        got: the candidate's output (None: an empty panel, e.g. for a malformed answer).
        path: where to write the PNG (folders are created).
        title: a line above the picture.

    Returns:
        The path written.
    """
    return render_grids_png([[("input", input_grid), ("expected", expected), ("got", got)]], Path(path), title=title)


Grid = Sequence[Sequence[int]]


def render_train_png(title: str, train: Sequence[tuple[Grid, Grid | None]], result: EvalResult, path: Path, *,
                     pairs: Sequence[int] | None = None) -> Path:
    """Input, expected output and both attempts for the train pairs of an ARC result (plain data in).

    Args:
        title: the picture's heading (the task's id); the score is appended.
        train: the task's train pairs as ``(input, expected output)`` grids.
        result: an OK train result of that task (``result.solution`` holds the attempts).
        path: where to write the PNG.
        pairs: indices of the pairs to draw (default: all).
    """
    solution = result.solution or {}
    if solution.get("phase") != "train" or "attempts" not in solution:
        raise ConfigError("render_png needs an OK train result of this task (result.solution holds the attempts)")
    attempts = solution["attempts"]
    if len(attempts) != len(train):
        raise ConfigError(f"the result has {len(attempts)} pairs; task {title} has {len(train)}")
    chosen = range(len(train)) if pairs is None else pairs
    solved = {p["index"]: p["solved"] for p in result.metrics.get("pairs", [])}
    rows = []
    for i in chosen:
        grid_in, grid_out = train[i]
        mark = "solved" if solved.get(i) else "not solved"
        rows.append([(f"pair {i} input", grid_in), (f"expected ({mark})", grid_out),
                     ("attempt 1", attempts[i][0]), ("attempt 2", attempts[i][1])])
    score = "-" if result.score is None else f"{result.score:.3f}"
    return render_grids_png(rows, path, title=f"{title}  score {score}")
