"""Tabular / time-series forecasting with a private split (``tabular/csv-v2``); see :mod:`.task`.

Registering the family imports nothing of the task (the class loads on first use).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["BEST_KNOWN_SOURCE", "TabularTask", "register_all"]

BEST_KNOWN_SOURCE = ("none: the default series' signal is public and the same on every machine; the held-out "
                     "noise is drawn from the evaluator secret (docs/training.md states the expected scores)")


def register_all() -> None:
    """Registers ``tabular/csv-v2`` (lazy entry point)."""
    from reasearch.evaluators.registry import register

    register("tabular/csv-v2", "reasearch.evaluators.tabular.task:TabularTask",
             summary="forecast a column of a time-ordered CSV (-p data=PATH target=COL metric=rmse|mae|pearson|"
                     "accuracy); validation feedback, private test via submit",
             listing={"direction": "minimize", "best_known": None, "seed_score": None,  # the default metric, rmse
                      "best_known_source": BEST_KNOWN_SOURCE},
             drawing="reasearch.evaluators.training_render:draw_svg")


def __getattr__(name: str) -> Any:
    if name == "TabularTask":
        return importlib.import_module("reasearch.evaluators.tabular.task").TabularTask
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
