"""Registrations of the built-in tasks. Each task module owns a ``register_all()``; listed here once."""

from __future__ import annotations

import importlib

# One line per task module; each defines register_all() which calls registry.register(...).
_TASK_MODULES = (
    "reasearch.evaluators.arc_agi_2",
    "reasearch.evaluators.atari",
    "reasearch.evaluators.circle_packing",
    "reasearch.evaluators.eplb",
    "reasearch.evaluators.heilbronn",
    "reasearch.evaluators.img",
    "reasearch.evaluators.nanogpt",
    "reasearch.evaluators.rl",
    "reasearch.evaluators.tabular",
    "reasearch.evaluators.prompt",
    "reasearch.evaluators.txn_scheduling",
)

for _name in _TASK_MODULES:
    importlib.import_module(_name).register_all()
