"""Atari from pixels (``atari/{game}-v1``, default ``qbert``; ale-py ships the ROMs); see :mod:`.task`.

Registering the family imports neither ale-py nor Gymnasium (the task class loads on first use).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["AtariTask", "register_all"]

# Kept in step with task.GAMES (which the task validates); listed here so registering imports nothing heavy.
_GAMES = ("qbert", "pong", "breakout", "space_invaders", "ms_pacman", "seaquest", "beam_rider", "enduro")


def register_all() -> None:
    """Registers the ``atari/{game}-v1`` family (lazy entry point)."""
    from reasearch.evaluators.registry import register

    register("atari/{game}-v1", "reasearch.evaluators.atari.task:AtariTask",
             enumerate=lambda: ({"game": g} for g in _GAMES),
             summary="train an Atari policy from pixels within a time budget; maximize the mean return on episodes "
                     "seeded from the evaluator secret (sticky actions, frame cap)",
             drawing="reasearch.evaluators.training_render:draw_svg")


def __getattr__(name: str) -> Any:
    if name == "AtariTask":
        return importlib.import_module("reasearch.evaluators.atari.task").AtariTask
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
