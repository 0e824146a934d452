"""Reinforcement learning on MuJoCo locomotion (``rl/{env}-v2``, default ``HalfCheetah-v5``); see :mod:`.task`.

Registering the family imports neither Gymnasium nor MuJoCo (the task class loads on first use).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["RLTask", "register_all"]

# Kept in step with task.ENVS (which the task validates); listed here so registering imports nothing heavy.
_ENVS = ("HalfCheetah-v5", "InvertedPendulum-v5", "Hopper-v5", "Walker2d-v5", "Ant-v5", "Swimmer-v5",
         "Reacher-v5", "InvertedDoublePendulum-v5")


def register_all() -> None:
    """Registers the ``rl/{env}-v2`` family (lazy entry point)."""
    from reasearch.evaluators.registry import register

    register("rl/{env}-v2", "reasearch.evaluators.rl.task:RLTask",
             enumerate=lambda: ({"env": e} for e in _ENVS),
             summary="train a MuJoCo policy within a time budget; maximize the mean return on held-out seeds")


def __getattr__(name: str) -> Any:
    if name == "RLTask":
        return importlib.import_module("reasearch.evaluators.rl.task").RLTask
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
