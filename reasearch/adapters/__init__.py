"""Glue that puts this project's evaluators inside other optimizers (OpenEvolve, GEPA, ShinkaEvolve).

Trust boundary: the peer package is trusted code the user installed; the programs and prompts it
proposes are not. Every candidate is evaluated by a registered task (programs in the sandbox, prompts
through the metered student), and only its ``EvalResult`` crosses back, ranked so that a failure is
below every valid candidate. The peer packages are imported lazily and only where their types are needed.
"""

from __future__ import annotations

from reasearch.adapters._program import read_program
from reasearch.adapters._rank import FAILED_RANK, rank_score, result_rank

__all__ = ["FAILED_RANK", "rank_score", "read_program", "result_rank"]
