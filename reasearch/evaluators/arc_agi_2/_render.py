"""Pictures of ARC results in ARC's 10-colour palette: the per-pair rich table, PNG pictures of grids, and the
report's inline SVG (:func:`draw_svg`, declared where the ids are registered). Drawn from plain grids and
results, never from the task object's module; every string written into the page is escaped."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reasearch.errors import ConfigError
from reasearch.evaluators.result import EvalResult
from reasearch.evaluators.svg import DrawingContext, esc, solution_of

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["ARC_PALETTE", "render_grids_png", "render_pair_png", "render_train_png", "result_table", "draw_svg"]

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


def _grid_svg(grid: Any, label: str, expected: Any = None) -> str:
    """One ARC grid; with ``expected``, wrong cells are outlined (a shape mismatch outlines the grid)."""
    if not (isinstance(grid, list) and grid and all(isinstance(r, list) and r for r in grid)):
        return f'<div class="grid"><div class="muted">{esc(label)}: no grid</div></div>'
    rows, cols = len(grid), max(len(r) for r in grid)
    cell = max(4, min(16, 240 // max(rows, cols)))
    shape_ok = (
        expected is not None
        and len(expected) == rows
        and all(len(a) == len(b) for a, b in zip(expected, grid, strict=True))
    )
    rects, wrong = [], 0
    for r, row in enumerate(grid):
        for c, v in enumerate(row):
            color = ARC_PALETTE[v] if isinstance(v, int) and 0 <= v <= 9 else "#ffffff"
            rects.append(f'<rect x="{c * cell}" y="{r * cell}" width="{cell}" height="{cell}" fill="{color}" '
                         f'stroke="#555" stroke-width="0.4"/>')
    if shape_ok:
        for r, row in enumerate(grid):
            for c, v in enumerate(row):
                if expected[r][c] != v:
                    wrong += 1
                    x0, y0, x1, y1 = c * cell + 2, r * cell + 2, (c + 1) * cell - 2, (r + 1) * cell - 2
                    rects.append(
                        f'<g class="wrong"><title>row {r}, col {c}: expected {expected[r][c]}, got {esc(v)}</title>'
                        f'<path d="M{x0} {y0}L{x1} {y1}M{x1} {y0}L{x0} {y1}" stroke="#000" stroke-width="3.2"/>'
                        f'<path d="M{x0} {y0}L{x1} {y1}M{x1} {y0}L{x0} {y1}" stroke="#fff" stroke-width="1.6"/></g>'
                    )
    note = ""
    if expected is not None:
        note = (" correct" if shape_ok and not wrong else f" {wrong} wrong cells" if shape_ok else " wrong shape")
    frame = (
        ' stroke="#000" stroke-width="3" stroke-dasharray="6 3"'
        if expected is not None and not shape_ok
        else ' stroke="none"'
    )
    return (
        f'<div class="grid"><svg class="arc" width="{cols * cell + 4}" height="{rows * cell + 4}" role="img">'
        f'<g transform="translate(2 2)">{"".join(rects)}</g><rect x="1" y="1" width="{cols * cell + 2}" '
        f'height="{rows * cell + 2}" fill="none"{frame}/></svg><div class="small">{esc(label)}{esc(note)}</div></div>'
    )


def draw_svg(ctx: DrawingContext) -> str:
    """Each train pair: input, expected output, both attempts with their wrong cells outlined."""
    res = ctx.result
    assert res is not None
    tasks = res.metrics.get("tasks")
    if isinstance(tasks, Mapping):  # a whole split: one square per task, coloured by its score
        cells = []
        for k, (tid, t) in enumerate(sorted(tasks.items())):
            score = t.get("score") if isinstance(t, Mapping) else None
            s = float(score) if isinstance(score, (int, float)) else 0.0
            color = f"hsl({120 * s:.0f},70%,{45 if s else 85}%)"
            cells.append(f'<rect class="arc-task" x="{(k % 30) * 14}" y="{(k // 30) * 14}" width="12" height="12" '
                         f'fill="{color}"><title>{esc(tid)}: {esc(t.get("status") if isinstance(t, Mapping) else "")} '
                         f'{s:.2f}</title></rect>')
        rows = (len(cells) + 29) // 30
        return (f'<svg class="arc-set" width="{30 * 14}" height="{rows * 14}" role="img">{"".join(cells)}</svg>'
                f"<figcaption>{len(cells)} tasks, one square each (green: solved train pairs)</figcaption>")
    from reasearch.evaluators import make

    task = make(ctx.task_id, **dict(ctx.task_params))
    pairs = task.problem.train  # type: ignore[attr-defined]
    attempts = solution_of(ctx).get("attempts") or []
    out = []
    for i, pair in enumerate(pairs):
        got = attempts[i] if i < len(attempts) and isinstance(attempts[i], list) else []
        a1 = got[0] if len(got) > 0 else None
        a2 = got[1] if len(got) > 1 else None
        exp = [list(r) for r in pair.output] if pair.output is not None else None
        out.append(f'<div class="pair"><div class="small">train pair {i}</div>'
                   + _grid_svg([list(r) for r in pair.input], "input") + _grid_svg(exp, "expected")
                   + _grid_svg(a1, "attempt 1", exp) + _grid_svg(a2, "attempt 2", exp) + "</div>")
    return ("".join(out) + f"<figcaption>{res.metrics.get('n_solved', '?')} of {len(pairs)} train pairs solved; "
            "wrong cells crossed out, a wrong shape framed by a dashed line</figcaption>")
