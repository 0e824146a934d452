"""Best known and seed scores of ``circle_packing/n{N}-v1``: plain data, read by the task and by its
registration (``reasearch tasks`` lists them without importing the task module)."""

from __future__ import annotations

__all__ = ["BEST_KNOWN", "BEST_KNOWN_SOURCE", "SEED_SCORES"]

BEST_KNOWN_SOURCE = "Packomania csqv snapshot 2026-08-09"

# Packomania csqv snapshot of 2026-08-09 (TASKS.md); AlphaEvolve reported 2.6358627564 (n=26) and
# 2.9379445262 (n=32).
BEST_KNOWN: dict[int, float] = {
    23: 2.478013611963,
    24: 2.530311586971,
    25: 2.587275055266,
    26: 2.635983084918,
    27: 2.685978684198,
    28: 2.737739985536,
    29: 2.790344154631,
    30: 2.842668747462,
    31: 2.889969851933,
    32: 2.939572771205,
}

# Scores of seed.py.txt (equal radii on a ceil(sqrt(n))-wide grid), checked by check_task.
SEED_SCORES: dict[int, float] = {
    23: 2.2999999977,
    24: 2.3999999976,
    25: 2.4999999975000002,
    26: 2.1666666645,
    27: 2.2499999977500003,
    28: 2.333333331,
    29: 2.41666666425,
    30: 2.4999999975000002,
    31: 2.58333333075,
    32: 2.666666664,
}
