"""ARC's seal watched end to end: what a test submission hands back (feedback, metrics, solution) is a
function of "solved or not" per test input and of the candidate's own outputs, never of a hidden test
output's cells or shape. Submitted through the real ``ArcTask.submit`` and ``ArcSetTask.submit`` in both
sandbox modes, a partly wrong candidate is scored against three hidden outputs that it fails alike;
everything that comes back must be identical for the three. A submission that used the train pairs'
feedback (which names wrong cells and their expected colours, the expected shape and the cell accuracy)
fails here."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

from reasearch.engine import SandboxPool
from reasearch.evaluators import Status
from reasearch.evaluators.arc_agi_2 import ArcSetTask, ArcTask

TASK_ID = "5ea15e00"  # a made-up id: the task below is synthetic (rule: mirror each row)

# Attempt 1 mirrors each row, but spoils three cells of a grid whose first cell is 0 (test input 1);
# attempt 2 returns the grid transposed (wrong on every non-symmetric grid). The candidate therefore
# solves test input 0 and answers input 1 with a grid of the right shape and a few wrong cells.
CANDIDATE = """
def transform_grid_attempt_1(grid):
    out = [list(row[::-1]) for row in grid]
    if grid[0][0] == 0:
        for r, c in ((0, 0), (2, 3), (4, 1)):
            out[r][c] = (out[r][c] + 1) % 10
    return out

def transform_grid_attempt_2(grid):
    return [list(col) for col in zip(*grid)]
"""
SPOILED = ((0, 0), (2, 3), (4, 1))


def _grid(rng: random.Random, rows: int, cols: int, first: int) -> list[list[int]]:
    g = [[rng.randrange(1, 10) for _ in range(cols)] for _ in range(rows)]
    g[0][0] = first
    return g


def _mirror(g: list[list[int]]) -> list[list[int]]:
    return [row[::-1] for row in g]


def _task_json(hidden_1: list[list[int]]) -> tuple[dict[str, Any], list[list[int]]]:
    """The synthetic task (train pairs, test input 0 solvable, test input 1 whose output is ``hidden_1``)."""
    rng = random.Random(36)
    train = [_grid(rng, 5, 5, 3) for _ in range(3)]
    test_0, test_1 = _grid(rng, 5, 5, 4), _grid(rng, 5, 5, 0)
    doc = {
        "train": [{"input": g, "output": _mirror(g)} for g in train],
        "test": [{"input": test_0, "output": _mirror(test_0)}, {"input": test_1, "output": hidden_1}],
    }
    return doc, test_1


def _hidden_variants() -> dict[str, list[list[int]]]:
    """Three hidden outputs for test input 1 that the candidate fails alike (none equals either attempt)."""
    _, test_1 = _task_json([[0]])
    true = _mirror(test_1)
    # Other expected colours at the spoiled cells, and one more cell the candidate has right made wrong.
    recoloured = [row[:] for row in true]
    for r, c in SPOILED:
        recoloured[r][c] = (true[r][c] + 5) % 10
    recoloured[3][3] = (true[3][3] + 2) % 10
    reshaped = [[(7 * r + c) % 10 for c in range(4)] for r in range(6)]  # another shape altogether
    return {"true": true, "recoloured": recoloured, "reshaped": reshaped}


def _data_dir(root: Path, hidden_1: list[list[int]]) -> str:
    doc, _ = _task_json(hidden_1)
    for split in ("training", "evaluation"):
        folder = root / split
        folder.mkdir(parents=True)
        (folder / f"{TASK_ID}.json").write_text(json.dumps(doc))
    return str(root)


def _crossing(res: Any) -> str:
    """Everything of a submission's result that reaches a user or an agent, less times and provenance."""
    d = res.to_dict()
    for key in ("wall_s", "cpu_s", "provenance", "cached"):
        d.pop(key, None)
    metrics = dict(d.get("metrics") or {})
    for info in (metrics.get("tasks") or {}).values():
        info.pop("wall_s", None)
    d["metrics"] = metrics
    return json.dumps(d, sort_keys=True, default=str)


def test_a_partly_wrong_submission_tells_nothing_of_the_hidden_outputs(pool: SandboxPool, tmp_path: Path) -> None:
    """Attacker: submit a candidate right on one test input and nearly right on the other, then read
    the feedback for the expected colours of the wrong cells, the hidden shape, or the cell accuracy."""
    shown: dict[str, tuple[str, str]] = {}
    for name, hidden in _hidden_variants().items():
        data_dir = _data_dir(tmp_path / name, hidden)
        task = ArcTask(TASK_ID, split="evaluation", data_dir=data_dir)
        assert task.problem.test[1].output == tuple(tuple(r) for r in hidden)  # the variant is what is scored
        res = task.submit(CANDIDATE, executor=pool)
        assert res.status is Status.OK, res.feedback
        assert res.provenance is not None and res.provenance.sandbox_mode == pool.mode
        assert res.score == 0.5 and res.metrics["tests"] == [{"index": 0, "solved": True},
                                                           {"index": 1, "solved": False}]
        whole = ArcSetTask("evaluation", data_dir=data_dir, progress=False).submit(CANDIDATE, executor=pool)
        assert whole.status is Status.OK and whole.score == 0.5 and whole.metrics["phase"] == "test"
        shown[name] = (_crossing(res), _crossing(whole))
        # Direct needles: no wrong-cell list, no diff map, no cell accuracy, no hidden row or shape.
        text = shown[name][0] + shown[name][1]
        assert not re.search(r"\(\d+,\d+\) \d->\d", text) and "cells right" not in text and "accuracy" not in text
        assert "expected" not in res.feedback and "diff" not in res.feedback
        for row in hidden:  # (the solution holds the candidate's own grids, so rows are looked for in the text)
            assert "".join(map(str, row)) not in res.feedback + whole.feedback
        if name == "reshaped":
            assert "6x4" not in text
    # The decisive check: three different hidden outputs, failed alike, give byte-identical results.
    assert shown["true"] == shown["recoloured"] == shown["reshaped"], "a submission's result depends on hidden cells"
