"""Grids: validation of task data, checking of candidate outputs, and cell-level comparison.

A grid is stored as a tuple of tuples of ints 0-9 (immutable, so a loaded task can be shared by
threads). Task data that breaks the rules is a :class:`~reasearch.errors.TaskDefinitionError`;
a candidate output that breaks them is a failed attempt with a reason, never an exception.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_SIDE",
    "AttemptScore",
    "AttemptStatus",
    "Grid",
    "check_output",
    "compare",
    "grid_to_text",
    "validate_grid",
]

Grid = tuple[tuple[int, ...], ...]
MAX_SIDE = 30  # ARC grids are 1x1 to 30x30
_WRONG_CELLS_KEPT = 24  # wrong cells listed per attempt; the count of the rest is kept


def _shape_of(value: Any) -> str:
    """A short description of a value that is not a grid (for messages)."""
    if isinstance(value, (list, tuple)):
        rows = len(value)
        cols = {len(r) for r in value if isinstance(r, (list, tuple))}
        if len(cols) == 1:
            return f"{rows}x{cols.pop()}"
        return f"{rows} rows"
    return type(value).__name__


def _grid_problem(value: Any) -> str | None:
    """Why ``value`` is not a valid grid, or None when it is one."""
    if hasattr(value, "tolist") and not isinstance(value, (list, tuple)):
        value = value.tolist()  # a NumPy array; its dtype is judged cell by cell below
    if not isinstance(value, (list, tuple)):
        return f"expected a list of rows, got {type(value).__name__}"
    n_rows = len(value)
    if n_rows == 0:
        return "empty grid (0 rows)"
    if not isinstance(value[0], (list, tuple)):
        return f"row 0 is {type(value[0]).__name__}, not a list of cells"
    n_cols = len(value[0])
    if n_rows > MAX_SIDE or n_cols > MAX_SIDE:
        return f"{n_rows}x{n_cols} grid exceeds {MAX_SIDE}x{MAX_SIDE}"
    if n_cols == 0:
        return "empty rows (0 columns)"
    for r, row in enumerate(value):
        if not isinstance(row, (list, tuple)):
            return f"row {r} is {type(row).__name__}, not a list of cells"
        if len(row) != n_cols:
            return f"ragged rows: row {r} has {len(row)} cells, row 0 has {n_cols}"
        for c, v in enumerate(row):
            if isinstance(v, bool) or not isinstance(v, int):  # bool and float are refused: colours are ints
                return f"non-integer value {v!r:.40} ({type(v).__name__}) at row {r}, col {c}"
            if not 0 <= v <= 9:
                return f"value {v} at row {r}, col {c} is outside 0-9"
    return None


def _freeze(value: Any) -> Grid:
    if hasattr(value, "tolist") and not isinstance(value, (list, tuple)):
        value = value.tolist()
    return tuple(tuple(int(v) for v in row) for row in value)


def validate_grid(value: Any, where: str) -> Grid:
    """Checks task data and returns it as an immutable grid.

    Args:
        value: the decoded JSON value.
        where: what to name in the error, e.g. ``"/data/x.json: train pair 2 output"``.

    Raises:
        TaskDefinitionError: the value is not a rectangular 1x1..30x30 grid of ints 0-9.
    """
    problem = _grid_problem(value)
    if problem is not None:
        from reasearch.errors import TaskDefinitionError

        raise TaskDefinitionError(f"{where}: {problem} (ARC grids are rectangular, 1x1 to 30x30, ints 0-9)")
    return _freeze(value)


def check_output(value: Any) -> tuple[Grid | None, str]:
    """Validates a candidate's output: ``(grid, "")`` or ``(None, reason)``."""
    problem = _grid_problem(value)
    if problem is not None:
        return None, problem
    return _freeze(value), ""


class AttemptStatus(str, enum.Enum):
    """How one attempt on one input ended."""

    CORRECT = "correct"
    WRONG_SHAPE = "wrong_shape"
    WRONG_CELLS = "wrong_cells"
    MALFORMED = "malformed"  # returned something that is not a valid grid
    ERROR = "error"  # raised an exception
    MISSING = "missing"  # the attempt function is not defined

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class AttemptScore:
    """One attempt compared with the expected output.

    Attributes:
        status: how it ended.
        shape: ``(rows, cols)`` of the output, or None when there is no valid grid.
        cells_right: cells equal to the expected ones (0 unless the shape matches).
        cells_total: cells of the expected output.
        wrong: the first wrong cells as ``(row, col, expected, got)``.
        n_wrong: how many cells are wrong in all (shape match only).
        reason: for MALFORMED, ERROR and MISSING: what happened.
    """

    status: AttemptStatus
    shape: tuple[int, int] | None
    cells_right: int
    cells_total: int
    wrong: tuple[tuple[int, int, int, int], ...] = ()
    n_wrong: int = 0
    reason: str = ""

    @property
    def correct(self) -> bool:
        return self.status is AttemptStatus.CORRECT

    @property
    def produced_grid(self) -> bool:
        return self.shape is not None

    @property
    def accuracy(self) -> float:
        """Fraction of expected cells reproduced (0 for a wrong shape or no grid)."""
        return self.cells_right / self.cells_total if self.cells_total else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "shape": list(self.shape) if self.shape else None,
            "cells_right": self.cells_right,
            "cells_total": self.cells_total,
            "accuracy": self.accuracy,
            "n_wrong": self.n_wrong,
            "wrong": [list(w) for w in self.wrong],
            "reason": self.reason,
        }


def _shape(grid: Grid) -> tuple[int, int]:
    return len(grid), len(grid[0])


def compare(expected: Grid, got: Grid) -> AttemptScore:
    """Cell-level comparison of a valid output with the expected grid."""
    total = len(expected) * len(expected[0])
    if _shape(got) != _shape(expected):
        return AttemptScore(AttemptStatus.WRONG_SHAPE, _shape(got), 0, total)
    if got == expected:
        return AttemptScore(AttemptStatus.CORRECT, _shape(got), total, total)
    wrong: list[tuple[int, int, int, int]] = []
    n_wrong = 0
    for r, (erow, grow) in enumerate(zip(expected, got, strict=True)):
        if erow == grow:
            continue
        for c, (e, g) in enumerate(zip(erow, grow, strict=False)):
            if e != g:
                n_wrong += 1
                if len(wrong) < _WRONG_CELLS_KEPT:
                    wrong.append((r, c, e, g))
    return AttemptScore(AttemptStatus.WRONG_CELLS, _shape(got), total - n_wrong, total, tuple(wrong), n_wrong)


def grid_to_text(grid: Sequence[Sequence[int]]) -> str:
    """Rows of digits, one line each (the way the agent reads grids)."""
    return "\n".join("".join(str(v) for v in row) for row in grid)
