"""The ranking other optimizers see: monotone in "better", every failure strictly below every valid score."""

from __future__ import annotations

import itertools
import sys

import pytest

from reasearch.adapters import FAILED_RANK, rank_score

SCORES = [-sys.float_info.max, -1e300, -1e16, -3.5, -1e-300, 0.0, 1e-300, 0.25, 2.635, 1e16, sys.float_info.max]


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_failure_ranks_below_every_valid_score(direction: str) -> None:
    ranks = [rank_score(s, direction) for s in SCORES]
    assert all(r > FAILED_RANK for r in ranks)  # negative, tiny and huge scores alike


def test_rank_follows_the_direction() -> None:
    up = [rank_score(s, "maximize") for s in SCORES]
    down = [rank_score(s, "minimize") for s in SCORES]
    assert all(a <= b for a, b in itertools.pairwise(up))  # never inverted (scores 1e-300 apart may round to one rank)
    assert all(a >= b for a, b in itertools.pairwise(down))
    apart = [-1e16, -3.5, 0.0, 0.25, 2.635, 1e16]
    assert all(rank_score(a, "maximize") < rank_score(b, "maximize") for a, b in itertools.pairwise(apart))
    assert rank_score(-3.5, "minimize") > rank_score(3.5, "minimize")


def test_non_finite_or_bad_direction_is_an_error() -> None:
    with pytest.raises(ValueError, match="finite"):
        rank_score(float("nan"), "maximize")
    with pytest.raises(ValueError, match="direction"):
        rank_score(1.0, "up")
