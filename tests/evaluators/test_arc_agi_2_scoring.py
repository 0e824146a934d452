"""ARC scoring on the trusted side: output checks, cell comparison, verdicts, feedback, harness."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasearch.evaluators.arc_agi_2 import AttemptStatus, check_output, compare
from reasearch.evaluators.arc_agi_2._harness import run_attempts
from reasearch.evaluators.arc_agi_2._scoring import (
    score_attempts,
    submit_feedback,
    train_feedback,
    verdict,
)

EXP = ((1, 2, 3), (4, 5, 6))


def test_compare_hand_cases() -> None:
    right = compare(EXP, EXP)
    assert right.status is AttemptStatus.CORRECT and right.accuracy == 1.0 and right.n_wrong == 0
    two_wrong = compare(EXP, ((1, 0, 3), (4, 5, 9)))
    assert two_wrong.status is AttemptStatus.WRONG_CELLS
    assert (two_wrong.cells_right, two_wrong.cells_total, two_wrong.n_wrong) == (4, 6, 2)
    assert two_wrong.wrong == ((0, 1, 2, 0), (1, 2, 6, 9))
    transposed = compare(EXP, ((1, 4), (2, 5), (3, 6)))
    assert transposed.status is AttemptStatus.WRONG_SHAPE and transposed.shape == (3, 2) and transposed.accuracy == 0.0


def test_compare_keeps_24_wrong_cells_and_counts_all() -> None:
    exp = tuple(tuple(0 for _ in range(30)) for _ in range(30))
    got = tuple(tuple(1 for _ in range(30)) for _ in range(30))
    s = compare(exp, got)
    assert s.n_wrong == 900 and len(s.wrong) == 24 and s.cells_right == 0


grids = st.integers(1, 6).flatmap(
    lambda r: st.integers(1, 6).flatmap(
        lambda c: st.tuples(
            st.lists(st.lists(st.integers(0, 9), min_size=c, max_size=c), min_size=r, max_size=r),
            st.lists(st.lists(st.integers(0, 9), min_size=c, max_size=c), min_size=r, max_size=r),
        )
    )
)


@settings(max_examples=200, deadline=None)
@given(grids)
def test_compare_matches_numpy_twin(pair: tuple[list[list[int]], list[list[int]]]) -> None:
    exp_l, got_l = pair
    exp, got = check_output(exp_l)[0], check_output(got_l)[0]
    assert exp is not None and got is not None
    s = compare(exp, got)
    e, g = np.array(exp_l), np.array(got_l)
    wrong = np.argwhere(e != g)
    assert s.n_wrong == len(wrong)
    assert s.cells_right == int((e == g).sum())
    assert [(r, c) for r, c, _, _ in s.wrong] == [tuple(map(int, w)) for w in wrong[:24]]
    assert all(e[r, c] == ev and g[r, c] == gv for r, c, ev, gv in s.wrong)
    assert s.correct == bool((e == g).all())


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "expected a list of rows, got NoneType"),
        ({"a": 1}, "got dict"),
        ([[1, 2], [3]], "ragged rows"),
        ([[1, 12]], "value 12 at row 0, col 1 is outside 0-9"),
        ([[1.5]], "non-integer value 1.5"),
        ([[None]], "non-integer value None"),
        ([[0] * 1000] * 1000, "1000x1000 grid exceeds 30x30"),
        ([1, 2, 3], "row 0 is int"),
        (np.zeros((2, 2)), "non-integer value 0.0"),
    ],
)
def test_check_output_reasons(value: object, reason: str) -> None:
    grid, why = check_output(value)
    assert grid is None and reason in why


def test_check_output_accepts_numpy_ints_and_tuples() -> None:
    assert check_output(np.array([[1, 2]], dtype=np.int8)) == (((1, 2),), "")
    assert check_output(((3,), (4,))) == (((3,), (4,)), "")


def test_score_attempts_structure_errors() -> None:
    for bad in (None, {}, "x", 3.5, [[float("nan")]], {"attempts": "no"}, {"attempts": [[[[1]]]]}):
        pairs, why = score_attempts(bad, [((1,),)])
        assert pairs is None and why


def test_verdicts() -> None:
    exp = [((1,),), ((2,),)]
    err = {"kind": "error", "error": "ValueError: boom", "traceback": "Traceback...\nValueError: boom"}
    missing = {"kind": "missing", "error": "no function named transform_grid_attempt_2"}
    pairs, _ = score_attempts({"attempts": [[err, missing], [err, missing]]}, exp)
    assert pairs is not None
    status, why = verdict(pairs)
    assert status == "CRASH" and "ValueError: boom" in why
    pairs, _ = score_attempts({"attempts": [[None, missing], [err, missing]]}, exp)
    assert pairs is not None and verdict(pairs)[0] == "INVALID"
    pairs, _ = score_attempts({"attempts": [[missing, missing], [missing, missing]]}, exp)
    assert pairs is not None and verdict(pairs) == ("INVALID", "no attempt function produced any output")
    # One valid (wrong) grid is enough for an OK evaluation with score 0; failed attempts are reasons.
    pairs, _ = score_attempts({"attempts": [[[[5]], missing], [err, [[1, 1]]]]}, exp)
    assert pairs is not None and verdict(pairs) == ("OK", "")
    assert [p.solved for p in pairs] == [False, False]


def test_train_feedback_lists_wrong_cells_and_diff_map() -> None:
    exp = [EXP, ((7,),)]
    raw = {"attempts": [[[[1, 0, 3], [4, 5, 9]], [[1, 2]]], [[[7]], {"kind": "malformed", "error": "ragged rows"}]]}
    pairs, _ = score_attempts(raw, exp)
    assert pairs is not None
    text = train_feedback(pairs, exp)
    assert "train pairs solved: 1/2 (score 0.5000)" in text
    assert "pair 0 (expected 2x3): not solved" in text
    assert "4/6 cells right (66.7%)" in text and "(0,1) 2->0, (1,2) 6->9" in text
    assert "attempt 2: wrong shape 1x2" in text
    assert "    .2.\n    ..6" in text  # diff map: '.' right, expected colour where wrong
    assert "pair 1 (expected 1x1): SOLVED" in text and "attempt 2: malformed: ragged rows" in text


def test_test_feedback_reveals_no_cells() -> None:
    exp = [EXP]
    pairs, _ = score_attempts({"attempts": [[[[1, 0, 3], [4, 5, 9]], [[1, 2]]]]}, exp)
    assert pairs is not None
    text = submit_feedback(pairs)
    assert "0/1" in text and "2x3 grid" in text
    assert "->" not in text and "cells right" not in text and "6" not in text.split("2x3")[0][-5:]


def test_harness_runs_both_attempts_on_copies() -> None:
    ns: dict[str, object] = {}
    exec(
        "import numpy as np\n"
        "def transform_grid_attempt_1(g):\n    g[0][0] = 9\n    return g\n"
        "def transform_grid_attempt_2(g):\n    if len(g) > 1: raise KeyError('two')\n    return np.array(g)\n",
        ns,
    )
    inputs = [[[1, 2]], [[3], [4]]]
    out = run_attempts(ns["transform_grid_attempt_1"], {"inputs": inputs})  # type: ignore[arg-type]
    assert inputs == [[[1, 2]], [[3], [4]]]  # the payload itself is never mutated
    rows = out["attempts"]
    assert rows[0] == [[[9, 2]], [[1, 2]]]  # attempt 2 got a fresh copy, not attempt 1's mutated one
    assert rows[1][0] == [[9], [4]]
    assert rows[1][1]["kind"] == "error" and "KeyError: 'two'" in rows[1][1]["error"]


def test_harness_missing_second_attempt_and_huge_outputs() -> None:
    ns: dict[str, object] = {}
    exec("import numpy as np\ndef transform_grid_attempt_1(g):\n    return np.zeros((1000, 1000), int)\n", ns)
    out = run_attempts(ns["transform_grid_attempt_1"], {"inputs": [[[1]]]})  # type: ignore[arg-type]
    (a1, a2), = out["attempts"]
    assert a1 == {"kind": "malformed", "error": "1000x1000 array exceeds 30x30"}
    assert a2["kind"] == "missing"


def test_harness_bounds_hostile_outputs() -> None:
    ns: dict[str, object] = {}
    exec(
        "import numpy as np\n"
        "def transform_grid_attempt_1(g):\n"
        "    return [[10 ** 5000, float('nan')], [[1, [2]], object()]]\n"
        "def transform_grid_attempt_2(g):\n"
        "    return [np.zeros(10 ** 6, dtype=np.int8)]\n",
        ns,
    )
    (a1, a2), = run_attempts(ns["transform_grid_attempt_1"], {"inputs": [[[1]]]})["attempts"]  # type: ignore[arg-type]
    assert a1[0][0] == "an int of 16610 bits" and a1[0][1] != a1[0][1]  # NaN stays a float
    assert a1[1][0] == "[1, [2]]" and a1[1][1].startswith("<object object")
    assert a2 == {"kind": "malformed", "error": "1x1000000 grid exceeds 30x30"}
    pairs, _ = score_attempts({"attempts": [[a1, a2]]}, [((1, 1), (1, 1))])
    assert pairs is not None and pairs[0].attempts[0].reason.startswith("non-integer value 'an int of 16610 bits'")
    assert pairs[0].attempts[1].reason == "1x1000000 grid exceeds 30x30"
