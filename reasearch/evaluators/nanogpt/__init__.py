"""Byte-level GPT training under a time budget (``nanogpt/v2``); see :mod:`.task`.

The task class loads on first access, so registering the id costs nothing (and imports no torch: torch
is imported only inside the training and evaluation jails).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["NanoGPTTask", "register_all"]


def register_all() -> None:
    """Registers ``nanogpt/v2`` (lazy entry point; v1 scored public tiny Shakespeare by default)."""
    from reasearch.evaluators.registry import register

    register("nanogpt/v2", "reasearch.evaluators.nanogpt.task:NanoGPTTask",
             summary="train a byte-level GPT within a time budget; minimize validation bits per byte",
             listing={"direction": "minimize", "best_known": None, "seed_score": None,
                      "best_known_source": "none recorded for the generated corpus; on corpus=shakespeare (public), "
                                           "TASKS.md: nanoGPT's CPU config reaches ~2.72 bpb in ~3 min"})


def __getattr__(name: str) -> Any:
    if name == "NanoGPTTask":
        return importlib.import_module("reasearch.evaluators.nanogpt.task").NanoGPTTask
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
