"""LP radii: hand-solved cases, strict validity after repair, agreement with scipy's linprog."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from reasearch.native.geometry import packing_violation
from reasearch.native.lp import make_strictly_valid, optimal_radii, optimal_radii_scipy


def test_single_center_touches_nearest_wall() -> None:
    assert optimal_radii(np.array([[0.5, 0.5]])).tolist() == [0.5]
    r = optimal_radii(np.array([[0.2, 0.7]]))
    assert r[0] == pytest.approx(0.2, abs=1e-12) and r[0] <= 0.2


def test_grid_centers_give_equal_radii() -> None:
    m = 5
    c = np.array([((i + 0.5) / m, (j + 0.5) / m) for j in range(m) for i in range(m)])
    r = optimal_radii(c)
    assert packing_violation(c, r).valid
    assert r.sum() == pytest.approx(2.5, abs=1e-8)  # 25 circles of radius 1/10
    assert np.all(r > 0.1 - 1e-8)


def test_two_centers() -> None:
    c = np.array([[0.25, 0.5], [0.75, 0.5]])
    r = optimal_radii(c)
    assert r.sum() == pytest.approx(0.5, abs=1e-12)
    assert packing_violation(c, r).valid


@pytest.mark.parametrize("seed", range(6))
def test_random_centers_match_linprog_and_are_strictly_valid(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 33))
    c = rng.uniform(0.0, 1.0, size=(n, 2))
    r = optimal_radii(c)
    assert r.shape == (n,) and r.dtype == np.float64
    assert packing_violation(c, r).valid
    assert r.sum() == pytest.approx(optimal_radii_scipy(c).sum(), abs=1e-7)


def test_answer_does_not_depend_on_earlier_calls() -> None:
    rng = np.random.default_rng(11)
    c = rng.uniform(size=(26, 2))
    first = optimal_radii(c)
    optimal_radii(rng.uniform(size=(26, 2)))
    assert optimal_radii(c).tolist() == first.tolist()


def test_repair_shrinks_infeasible_radii() -> None:
    c = np.array([[0.25, 0.25], [0.75, 0.25], [0.25, 0.75], [0.75, 0.75]])
    r = np.full(4, 0.25) + 1e-9  # what a solver tolerance leaves behind
    assert not packing_violation(c, r).valid
    fixed = make_strictly_valid(c, r)
    assert packing_violation(c, fixed).valid
    assert fixed.sum() == pytest.approx(1.0, abs=1e-8)


def test_bad_centers_are_rejected() -> None:
    with pytest.raises(ValueError, match="unit square"):
        optimal_radii(np.array([[0.5, 1.5]]))
    with pytest.raises(ValueError, match="finite"):
        optimal_radii(np.array([[0.5, np.nan]]))
    with pytest.raises(ValueError, match=r"\(n, 2\)"):
        optimal_radii(np.zeros((3, 3)))
    assert optimal_radii(np.zeros((0, 2))).shape == (0,)


def test_no_banner_on_stdout(capfd: pytest.CaptureFixture[str]) -> None:
    out: list[np.ndarray] = []
    # A fresh thread builds a fresh HiGHS instance: the construction banner must not escape.
    t = threading.Thread(target=lambda: out.append(optimal_radii(np.array([[0.25, 0.5], [0.75, 0.5]]))))
    t.start()
    t.join()
    captured = capfd.readouterr()
    assert "HiGHS" not in captured.out and "HiGHS" not in captured.err
    assert out and out[0].sum() == pytest.approx(0.5, abs=1e-9)
