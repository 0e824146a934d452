"""Best known and seed scores of ``heilbronn/n{N}-v1``: plain data, read by the task and by its
registration (``reasearch tasks`` lists them without importing the task module)."""

from __future__ import annotations

__all__ = ["BEST_KNOWN", "BEST_KNOWN_SOURCES", "SEED_SCORES"]

# Unit square; sources in BEST_KNOWN_SOURCES (TASKS.md).
BEST_KNOWN: dict[int, float] = {
    11: 1.0 / 27.0,
    12: 0.0325988586918197,
    13: 0.0270192722391139,
    14: 0.0243039796209925,
    15: 0.0212105410054906,
}
BEST_KNOWN_SOURCES: dict[int, str] = {
    11: "Goldberg 1972",
    12: "Comellas & Yebra 2002",
    13: "Karpov 2011",
    14: "Beyleveld 2006",
    15: "Sudermann-Merx 2026",
}

# Scores of seed.py.txt under seed 0, checked by check_task.
SEED_SCORES: dict[int, float] = {
    11: 0.023761212510450942,
    12: 0.0195186550498606,
    13: 0.01279067083649077,
    14: 0.009659266557147956,
    15: 0.010366806331789446,
}
