"""Certified records: exact re-scoring of circle packings and Heilbronn layouts, through the sandbox too."""

from __future__ import annotations

import decimal
import itertools
import json
import random
from fractions import Fraction

import numpy as np
import pytest

import reasearch
from reasearch.engine import SandboxPool
from reasearch.errors import ConfigError
from reasearch.evaluators import Status
from reasearch.evaluators.base import candidate_sha256
from reasearch.evaluators.certificate import (
    DEFAULT_TOLERANCE,
    Certificate,
    certify,
    check_packing,
    check_points,
)
from reasearch.evaluators.circle_packing.task import SEED_SCORES, CirclePackingTask
from reasearch.evaluators.heilbronn.task import HeilbronnTask
from reasearch.native.geometry import min_triangle_area

# Two circles touching along a diagonal: float64's check accepts them (r0 + r1 <= hypot), exact arithmetic
# does not ((r0 + r1)^2 > dx^2 + dy^2 by ~2.5e-18). Found by a search over such pairs; the test recomputes
# every claim about it below.
FLOAT_ONLY_PAIR = ([[0.3, 0.3], [0.4268728488224802, 0.5694867473874465]], [0.1, 0.1978587362925542])


def _brute_min_area(points: list[list[float]]) -> Fraction:
    """Smallest triangle area, straight from the definition in rationals (independent of the checker)."""
    p = [(Fraction(x), Fraction(y)) for x, y in points]
    return min(abs((b[0] - a[0]) * (c[1] - a[1]) - (c[0] - a[0]) * (b[1] - a[1])) / 2
               for a, b, c in itertools.combinations(p, 3))


# ------------------------------------------------------------------------------------ packings, exact


def test_a_clean_packing_is_strict_with_its_exact_sum() -> None:
    centers = [[0.25, 0.25], [0.75, 0.25], [0.25, 0.75], [0.75, 0.75]]
    check = check_packing(centers, [0.25] * 4)
    assert check.kind == "strict" and check.violations == 0 and check.max_violation is None
    assert check.score == 1  # touching everywhere, exactly


def test_an_overlap_of_two_to_the_minus_30_is_tolerant_and_reported_exactly() -> None:
    # Circle 1 sits 2**-30 too close to circle 0; every wall holds; all values are exact floats.
    centers = [[0.25, 0.5], [0.75 - 2**-20 - 2**-30, 0.5]]
    radii = [0.25, 0.25 - 2**-20]
    check = check_packing(centers, radii)
    assert check.kind == "tolerant" and check.violations == 1
    assert check.max_violation is not None and check.max_violation.exact
    assert check.max_violation.amount == Fraction(1, 2**30)
    assert check.max_violation.where == "circles 0 and 1 overlap"
    assert check.score == Fraction(1, 2) - Fraction(1, 2**20)
    # The task's strict float64 check rejects it; only the 1e-6 slack some peers use lets it pass.
    assert CirclePackingTask(n=2).score_solution({"centers": centers, "radii": radii}).status is Status.INVALID
    assert check_packing(centers, radii, Fraction(1, 2**31)).kind == "invalid"
    assert check_packing(centers, radii, Fraction(1, 2**30)).kind == "tolerant"  # the bound is inclusive


def test_a_pair_that_passes_the_float_check_but_overlaps_exactly_is_tolerant() -> None:
    centers, radii = FLOAT_ONLY_PAIR
    assert CirclePackingTask(n=2).score_solution({"centers": centers, "radii": radii}).status is Status.OK
    s = Fraction(radii[0]) + Fraction(radii[1])
    dx, dy = (Fraction(centers[1][k]) - Fraction(centers[0][k]) for k in (0, 1))
    d2 = dx * dx + dy * dy
    assert s * s > d2  # it really overlaps
    check = check_packing(centers, radii)
    assert check.kind == "tolerant" and check.max_violation is not None
    assert not check.max_violation.exact  # sqrt(d2) is irrational: the amount is an upper bound
    with decimal.localcontext() as ctx:
        ctx.prec = 120
        overlap = Fraction(decimal.Decimal(s.numerator) / decimal.Decimal(s.denominator)
                           - (decimal.Decimal(d2.numerator) / decimal.Decimal(d2.denominator)).sqrt())
    assert overlap > 0
    assert check.max_violation.amount >= overlap - Fraction(1, 10**100)
    assert check.max_violation.amount - overlap < Fraction(1, 10**70)


def test_a_clear_overlap_is_invalid() -> None:
    centers = [[0.25, 0.25], [0.74, 0.25]]  # 0.01 closer than touching
    check = check_packing(centers, [0.25, 0.25])
    assert check.kind == "invalid" and check.max_violation is not None
    assert check.max_violation.where == "circles 0 and 1 overlap"
    assert check.max_violation.amount == Fraction(1, 2) - (Fraction(0.74) - Fraction(0.25))


def test_walls_and_negative_radii_are_checked_exactly() -> None:
    # x + r = 1 + 2**-52 exactly: float addition would round 0.75 + (0.25 + 2**-53) to 1.0
    check = check_packing([[0.75, 0.5]], [0.25 + 2**-53])
    assert check.kind == "tolerant" and check.max_violation is not None
    assert check.max_violation.amount == Fraction(1, 2**53)
    assert "right wall" in check.max_violation.where
    assert check_packing([[0.75, 0.5]], [0.25 + 2**-53], Fraction(1, 2**53)).kind == "tolerant"  # inclusive
    assert check_packing([[0.75, 0.5]], [0.25 + 2**-53], Fraction(1, 2**54)).kind == "invalid"
    neg = check_packing([[0.5, 0.5], [0.2, 0.2]], [0.1, -0.5])
    assert neg.kind == "invalid" and neg.max_violation is not None
    assert "circle 1 has a negative radius" == neg.max_violation.where


def test_hostile_floats_give_a_verdict_not_an_exception() -> None:
    assert check_packing([[float("nan"), 0.5]], [0.1]).kind == "invalid"
    assert check_packing([[0.5, 0.5]], [float("inf")]).kind == "invalid"
    huge = check_packing([[1e308, 0.5], [-1e308, 0.5]], [1e308, 1e308])  # overflows float64 arithmetic
    assert huge.kind == "invalid" and huge.score == 2 * Fraction(1e308)
    assert "by inf" in huge.reason  # the reason line stays printable: beyond float64 reads as inf
    tiny = check_packing([[0.5, 0.5], [0.5, 0.5]], [5e-324, 5e-324])  # two subnormal circles on one center
    assert tiny.kind == "tolerant" and tiny.max_violation is not None
    assert tiny.max_violation.amount == 2 * Fraction(5e-324) and tiny.max_violation.exact


# ------------------------------------------------------------------------------------ Heilbronn, exact


def test_heilbronn_min_area_equals_an_independent_brute_force() -> None:
    rng = random.Random(7)
    for n in (3, 5, 11, 15):
        points = [[rng.random(), rng.random()] for _ in range(n)]
        check = check_points(points)
        assert check.kind == "strict"
        assert check.score == _brute_min_area(points)


def test_heilbronn_exactly_collinear_points_score_zero_where_float_rounding_does_not() -> None:
    # p, p + d, p + 2d with every coordinate an exact float (found by a search): the float64 kernel
    # reports a positive area (~1.7e-18); the triangle is exactly degenerate.
    points = [[0.19856689105339953, 0.11596026479379984], [0.23647223588359245, 0.21344439868701426],
              [0.2743775807137854, 0.3109285325802287]]
    assert min_triangle_area(np.array(points)) > 0
    assert _brute_min_area(points) == 0
    assert check_points(points).score == 0 and check_points(points).kind == "strict"


def test_heilbronn_points_outside_the_square() -> None:
    inside = [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]
    assert check_points(inside).kind == "strict" and check_points(inside).score == Fraction(1, 2)
    slightly = [[0.0, 0.0], [1.0 + 2**-40, 0.0], [0.0, 1.0]]
    check = check_points(slightly)
    assert check.kind == "tolerant" and check.max_violation is not None
    assert check.max_violation.amount == Fraction(1, 2**40)
    assert check.max_violation.where == "point 1 lies outside [0, 1]^2"
    assert check_points(slightly, Fraction(1, 2**40)).kind == "tolerant"  # the tolerance is inclusive
    assert check_points(slightly, Fraction(1, 2**41)).kind == "invalid"
    assert check_points([[0.0, 0.0], [1.0, -0.1], [0.0, 1.0]]).kind == "invalid"
    assert check_points([[0.0, float("inf")], [1.0, 0.0], [0.0, 1.0]]).kind == "invalid"


# ------------------------------------------------------------------------------------ through the sandbox


@pytest.mark.parametrize("n", [23, 26, 32])
def test_the_circle_packing_seed_certifies_strict_with_the_task_score(pool: SandboxPool, n: int) -> None:
    task = reasearch.make(f"circle_packing/n{n}-v1")
    source = task.seed_program()
    cert = certify(task, source, executor=pool)
    assert cert.kind == "strict" and cert.score is not None and cert.violations == 0
    assert float(cert.score) == cert.float_score == SEED_SCORES[n] == task.evaluate(source, executor=pool).score
    assert cert.float_status == "OK" and cert.sandbox_mode == pool.mode
    assert cert.candidate_sha256 == candidate_sha256(source) and cert.evaluator_hash == task.evaluator_hash()
    assert (cert.task_id, cert.task_version, cert.tolerance) == (f"circle_packing/n{n}-v1", 1, DEFAULT_TOLERANCE)
    assert f"sandbox={pool.mode}" in cert.summary()
    if pool.mode == "process":  # a weaker sandbox is said out loud, as in every result and report
        assert "sandbox=process (no filesystem or network isolation)" in cert.summary()
    back = Certificate.from_json(cert.to_json())
    assert back == cert
    redone = back.recheck()
    assert (redone.kind, redone.score) == ("strict", cert.score)


@pytest.mark.parametrize("n", range(11, 16))
def test_the_heilbronn_seed_certifies_strict_with_the_task_score(pool: SandboxPool, n: int) -> None:
    task = reasearch.make(f"heilbronn/n{n}-v1")
    cert = certify(task, task.seed_program(), executor=pool)
    assert cert.kind == "strict" and cert.score is not None and cert.float_score is not None
    # The task's kernel rounds the cross product of coordinates in [0, 1]: two subtractions, three products
    # and two additions of terms at most 1 in size put it within 12 * 2**-53 of the exact value (area: half).
    assert cert.float_score != 0 and abs(float(cert.score) - cert.float_score) <= 6 * 2.0**-53
    assert cert.solution is not None
    points = [[float.fromhex(x), float.fromhex(y)] for x, y in cert.solution["points"]]
    assert cert.score == _brute_min_area(points)
    assert Certificate.from_json(cert.to_json()) == cert


HOSTILE = {
    "overlapping": "def run():\n    return [[0.25, 0.25], [0.74, 0.25]], [0.25, 0.25]\n",
    "nan": "def run():\n    return [[0.25, 0.25], [0.75, 0.25]], [float('nan'), 0.25]\n",
    "text": "def run():\n    return [['0.25', '0.25'], ['0.75', '0.25']], ['1/4', '1/4']\n",
    "shape": "def run():\n    return [[0.25, 0.25]], [0.25]\n",
    "crash": "def run():\n    raise SystemExit('I certify myself')\n",
    "claims": "def run():\n    return [[0.5, 0.5]] * 2, [0.5] * 2, {'kind': 'strict', 'score': '99/1'}\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_candidate_gets_an_invalid_certificate(pool: SandboxPool, name: str) -> None:
    task = CirclePackingTask(n=2)
    cert = certify(task, HOSTILE[name], executor=pool)
    assert cert.kind == "invalid" and cert.float_status != "OK"
    assert "\n" not in cert.reason and cert.reason
    if name == "overlapping":
        assert cert.max_violation is not None and cert.max_violation.where == "circles 0 and 1 overlap"
    elif name == "claims":
        assert cert.score == 1  # the sum of its radii; the score it reports itself is never read
    elif name == "nan":  # the answer is kept (as float.hex) so that anyone can see why
        assert cert.score is None and cert.solution is not None and cert.solution["radii"][0] == "nan"
        assert cert.recheck().kind == "invalid"
    else:
        assert cert.score is None and cert.solution is None
    assert Certificate.from_json(json.dumps(cert.to_dict())) == cert


def test_a_float_accepted_overlap_through_the_sandbox_is_tolerant(pool: SandboxPool) -> None:
    centers, radii = FLOAT_ONLY_PAIR
    src = f"def run():\n    return {centers!r}, {radii!r}\n"
    cert = certify(CirclePackingTask(n=2), src, executor=pool)
    assert cert.float_status == "OK" and cert.kind == "tolerant"  # the float check accepts; exactness does not
    assert cert.max_violation is not None and 0 < float(cert.max_violation.amount) < 1e-17
    assert cert.to_dict()["max_violation"]["bound"] == "upper"


def test_a_task_without_exact_certification_is_refused_before_running() -> None:
    class Boom:
        def run(self, request: object) -> None:
            raise AssertionError("the candidate must not run")

    with pytest.raises(ConfigError, match="txn_scheduling/v1 has no exact certification"):
        certify(reasearch.make("txn_scheduling/v1"), "def get_best_schedule(w, n):\n    return []\n",
                executor=Boom())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="tolerance must be >= 0"):
        certify(HeilbronnTask(n=3), "def run():\n    return []\n", tolerance=Fraction(-1),
                executor=Boom())  # type: ignore[arg-type]


def test_the_python_api_reexports_certify() -> None:
    assert reasearch.certify is certify and reasearch.Certificate is Certificate
    np.testing.assert_equal(len(reasearch.__all__), len(set(reasearch.__all__)))
