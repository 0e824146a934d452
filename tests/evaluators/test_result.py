from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

from reasearch.evaluators.result import EvalResult, Provenance, Status
from reasearch.evaluators.spec import TaskSpec


def _prov() -> Provenance:
    return Provenance("t/x-v1", 1, "abc", "0" * 64, 3, "nsjail", {"python": "3.11"}, {"n": 26})


def test_failure_cannot_carry_a_score() -> None:
    with pytest.raises(ValueError, match="cannot carry a score"):
        EvalResult(Status.TIMEOUT, 1.0, None, {}, "", 0.0, 0.0)
    with pytest.raises(ValueError, match="needs a score"):
        EvalResult(Status.OK, None, None, {}, "", 0.0, 0.0)
    with pytest.raises(ValueError, match="finite"):
        EvalResult(Status.OK, math.inf, None, {}, "", 0.0, 0.0)
    with pytest.raises(ValueError):
        EvalResult.failure(Status.OK, "no")


def test_json_round_trip_with_numpy_and_non_finite_values() -> None:
    res = EvalResult(
        Status.OK, 2.5, 0.9, {"lp_sum": np.float64(2.6), "bad": float("nan"), "v": np.arange(3)},
        "fine", 0.01, 0.02, _prov(), {"centers": np.zeros((2, 2))},
    )
    again = EvalResult.from_json(res.to_json())
    assert again.score == 2.5 and again.status is Status.OK
    assert again.metrics == {"lp_sum": 2.6, "bad": None, "v": [0, 1, 2]}
    assert again.solution == {"centers": [[0.0, 0.0], [0.0, 0.0]]}
    assert again.provenance == _prov()
    assert again.to_dict() == res.to_dict()


def test_frozen_and_picklable() -> None:
    res = EvalResult.failure(Status.CRASH, "boom", provenance=_prov())
    with pytest.raises(AttributeError):
        res.score = 1.0  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(res)) == res
    assert res.with_(cached=True).cached and not res.cached
    assert Status("OOM") is Status.OOM and str(Status.OOM) == "OOM"


def test_spec_round_trip_normalize_and_unknown_keys() -> None:
    spec = TaskSpec("a/b-v2", 2, "minimize", 60.0, 512, best_known=50.0, entry_aliases=["x"], params={"k": 1})
    assert TaskSpec.from_json(spec.to_json()) == spec
    assert spec.normalize(100.0) == 0.5 and spec.normalize(0.0) is None
    assert spec.is_better(40.0, 50.0) and not spec.is_better(60.0, 50.0) and spec.is_better(1.0, None)
    up = TaskSpec("a/c-v1", 1, "maximize", 1.0, 1, best_known=2.0)
    assert up.normalize(1.0) == 0.5 and up.entries == ("run",)
    with pytest.raises(ValueError, match="unknown TaskSpec keys"):
        TaskSpec.from_dict({**spec.to_dict(), "bogus": 1})
    with pytest.raises(ValueError, match="-v3"):
        TaskSpec("a/b-v2", 3, "maximize", 1.0, 1)
    with pytest.raises(ValueError, match="direction"):
        TaskSpec("a/b-v1", 1, "up", 1.0, 1)  # type: ignore[arg-type]
