"""Geometry kernels: hand-computed cases, and Cython == numba == plain Python on adversarial inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasearch.native import geometry as g
from reasearch.native.geometry import Violation, ViolationKind

# Coordinates drawn from a small pool make duplicates, collinear triples and boundary points common.
_POOL = [0.0, 1.0, 0.5, 0.25, 0.75, 1 / 3, 2 / 3, 0.1, 0.9, 1e-300, 1 - 2**-53, 0.3]
coord = st.one_of(st.sampled_from(_POOL), st.floats(0.0, 1.0, allow_nan=False))
wild = st.one_of(coord, st.sampled_from([math.nan, math.inf, -math.inf, -0.0, -0.5, 1.5]))


def _points(elems: st.SearchStrategy[float], max_n: int = 12) -> st.SearchStrategy[np.ndarray]:
    return st.integers(0, max_n).flatmap(
        lambda n: st.lists(st.tuples(elems, elems), min_size=n, max_size=n).map(
            lambda xs: np.array(xs, dtype=np.float64).reshape(-1, 2)
        )
    )


# ------------------------------------------------------------------------------ triangle areas


def test_area_hand_computed() -> None:
    p = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    assert g.min_triangle_area(p) == 0.5
    assert g.min_triangle(p) == (0.5, 0, 1, 2)  # four equal triangles: the first in index order
    q = np.array([[0.0, 0.0], [0.5, 0.5], [1.0, 1.0], [0.0, 1.0]])  # 0, 1, 2 collinear
    assert g.min_triangle(q) == (0.0, 0, 1, 2)
    r = np.array([[0.1, 0.1], [0.9, 0.2], [0.4, 0.8], [0.4, 0.3]])
    # |x1(y2-y3) + x2(y3-y1) + x3(y1-y2)| / 2 for (0, 1, 3): 0.1*(-0.1) + 0.9*0.2 + 0.4*(-0.1) = 0.13
    assert g.min_triangle(r)[1:] == (0, 1, 3)
    assert g.min_triangle(r)[0] == pytest.approx(0.065, abs=1e-15)


def test_fewer_than_three_points() -> None:
    for n in (0, 1, 2):
        p = np.zeros((n, 2))
        assert g.min_triangle_area(p) == math.inf
        assert g.min_triangle(p) == (math.inf, -1, -1, -1)
        assert g.min_triangle_py(p) == (math.inf, -1, -1, -1)
        assert g.min_triangle_numba(p) == (math.inf, -1, -1, -1)
        assert g.smallest_triangles(p) == []


def test_accepts_lists_and_strided_arrays() -> None:
    base = np.random.default_rng(3).uniform(size=(9, 4))
    strided = base[:, ::2]  # not C-contiguous: goes through the conversion path
    assert not strided.flags.c_contiguous
    assert g.min_triangle_area(strided) == g.min_triangle_area_py(strided.tolist())
    assert g.min_triangle(strided.tolist()) == g.min_triangle_py(strided)


def test_numba_wrappers_convert_every_other_layout_once() -> None:
    """The numba wrappers pass a C-contiguous native float64 (n, 2) array straight through and convert
    anything else (lists, Fortran order, views, float32, big-endian): same answer, and no new numba
    specialisation compiled for the odd inputs."""
    g.warmup("triangles")
    nb = g._nb()
    p = np.random.default_rng(3).uniform(size=(9, 2))
    expected = g.min_triangle_py(p)
    before = (len(nb.min_triangle_area_nb.signatures), len(nb.min_triangle_nb.signatures))
    wide = np.zeros((9, 3))
    wide[:, :2] = p
    for q in (p, p.tolist(), np.asfortranarray(p), wide[:, :2], p.astype(">f8")):
        assert g.min_triangle_area_numba(q) == expected[0]
        assert g.min_triangle_numba(q) == expected
    assert g.min_triangle_area_numba(p.astype(np.float32)) == g.min_triangle_py(p.astype(np.float32))[0]
    assert (len(nb.min_triangle_area_nb.signatures), len(nb.min_triangle_nb.signatures)) == before


def test_rejects_wrong_shape() -> None:
    with pytest.raises(ValueError, match=r"\(n, 2\)"):
        g.min_triangle_area(np.zeros((5, 3)))
    with pytest.raises(ValueError, match=r"\(n, 2\)"):
        g.min_triangle(np.zeros(6))


@settings(max_examples=300, deadline=None)
@given(_points(wild))
def test_min_triangle_twins_agree(p: np.ndarray) -> None:
    expected = g.min_triangle_py(p)
    assert g.min_triangle(p) == expected
    assert g.min_triangle_numba(p) == expected
    assert g.min_triangle_area(p) == expected[0]
    assert g.min_triangle_area_numba(p) == expected[0]


@settings(max_examples=150, deadline=None)
@given(_points(coord, max_n=14))
def test_numpy_reference_and_smallest_triangles_agree(p: np.ndarray) -> None:
    area, i, j, k = g.min_triangle_py(p)
    if p.shape[0] < 3:
        return
    assert g.min_triangle_area_numpy(p) == area
    tris = g.smallest_triangles(p, 4)
    assert tris[0] == (area, (i, j, k))
    areas = [a for a, _ in tris]
    assert areas == sorted(areas)
    assert len(tris) == min(4, math.comb(p.shape[0], 3))


@settings(max_examples=40, deadline=None)
@given(st.integers(32, 44).flatmap(
    lambda n: st.lists(st.tuples(wild, wild), min_size=n, max_size=n).map(
        lambda xs: np.array(xs, dtype=np.float64).reshape(-1, 2))))
def test_buffered_min_area_path_matches_twins(p: np.ndarray) -> None:
    """n >= 32 takes the Cython kernel's AVX2 loop (where the CPU has it) or its buffered,
    four-accumulator loop: both bit-identical, NaN areas (from inf and NaN coordinates) never winning."""
    from reasearch.native import _geometry

    expected = g.min_triangle_py(p)[0]
    for simd in (True, False):
        got = _geometry.min_triangle_area(p, simd)
        assert got == expected or (math.isnan(got) and math.isnan(expected)), simd
    assert g.min_triangle_area(p) == expected or math.isnan(expected)
    assert g.min_triangle_area_numba(p) == expected or math.isnan(expected)


@pytest.mark.parametrize("n", range(32, 41))
def test_vector_min_area_every_tail_length(n: int) -> None:
    """The AVX2 loop takes four triangles at a time and the rest one by one: each remainder, with
    the smallest triangle placed last (in the tail of the last rows) and first."""
    from reasearch.native import _geometry

    p = np.random.default_rng(n).uniform(size=(n, 2))
    p[-1] = (p[-2] + p[-3]) / 2 + 1e-9  # a thin triangle among the last three points
    for q in (p, p[::-1].copy()):
        expected = g.min_triangle_py(q)[0]
        assert _geometry.min_triangle_area(q, True) == expected == _geometry.min_triangle_area(q, False)


def test_large_n_matches_python() -> None:
    p = np.random.default_rng(0).uniform(size=(60, 2))
    assert g.min_triangle(p) == g.min_triangle_py(p) == g.min_triangle_numba(p)
    assert g.min_triangle_area(p) == g.min_triangle_py(p)[0]


# ------------------------------------------------------------------------------ packing validity


def _v(kind: ViolationKind, i: int, j: int, amount: float, count: int) -> Violation:
    return Violation(kind, i, j, amount, count)


def test_packing_exactly_touching_is_valid() -> None:
    # Every sum and distance here is exact in binary floating point.
    c = np.array([[0.25, 0.25], [0.75, 0.25], [0.25, 0.75], [0.75, 0.75]])
    r = np.full(4, 0.25)
    assert g.packing_violation(c, r) == _v(ViolationKind.NONE, -1, -1, 0.0, 0)
    assert g.packing_violation(c, r).valid
    assert g.packing_violation(c, r).describe() == "all constraints hold"


@pytest.mark.parametrize(
    ("center", "radius", "kind", "amount"),
    [
        ((0.5, 0.5), -0.125, ViolationKind.NEGATIVE, 0.125),
        ((0.25, 0.5), 0.375, ViolationKind.LEFT, 0.125),
        ((0.5, 0.25), 0.375, ViolationKind.BOTTOM, 0.125),
        ((0.75, 0.5), 0.375, ViolationKind.RIGHT, 0.125),
        ((0.5, 0.75), 0.375, ViolationKind.TOP, 0.125),
    ],
)
def test_each_wall_is_named(center: tuple[float, float], radius: float, kind: ViolationKind, amount: float) -> None:
    c = np.array([center, [0.0625, 0.0625]])
    r = np.array([radius, 0.0625])
    v = g.packing_violation(c, r)
    assert (v.kind, v.i, v.j, v.amount, v.count) == (kind, 0, -1, amount, 1)
    assert g.packing_violation_py(c, r) == v
    assert g.packing_violation_numba(c, r) == v


def test_worst_of_several_violations_and_count() -> None:
    c = np.array([[0.25, 0.5], [0.5, 0.5], [0.875, 0.5]])
    r = np.array([0.25, 0.125, 0.25])
    # pair (0, 1): 0.375 - 0.25 = 0.125; pair (1, 2): 0.375 - 0.375 = 0; right wall of 2: 0.125
    v = g.packing_violation(c, r)
    assert v == _v(ViolationKind.RIGHT, 2, -1, 0.125, 2)  # tie: the wall comes first in scan order
    r2 = np.array([0.25, 0.1875, 0.125])
    v2 = g.packing_violation(c, r2)
    assert (v2.kind, v2.i, v2.j, v2.amount, v2.count) == (ViolationKind.OVERLAP, 0, 1, 0.1875, 1)
    assert "circles 0 and 1 overlap" in v2.describe()


def test_one_ulp_is_a_violation() -> None:
    c = np.array([[0.25, 0.5], [0.75, 0.5]])
    # One ulp of 0.25 vanishes in the sum (0.5 + 2**-54 rounds to even); two ulps give 0.5 + 2**-53.
    r = np.array([0.25, 0.25 + 2**-53])
    v = g.packing_violation(c, r)
    assert v.amount == 2**-53
    assert v.kind is ViolationKind.OVERLAP and v.amount > 0
    assert v.kind is g.packing_violation_py(c, r).kind


def test_nonfinite_is_reported_first() -> None:
    c = np.array([[0.5, 0.5], [0.2, np.nan]])
    r = np.array([0.9, 0.1])
    assert g.packing_violation(c, r) == _v(ViolationKind.NONFINITE, 1, -1, math.inf, 1)
    assert g.packing_violation(c, np.array([0.1, math.inf])).kind is ViolationKind.NONFINITE


def test_packing_shape_errors() -> None:
    with pytest.raises(ValueError, match="radii"):
        g.packing_violation(np.zeros((3, 2)), np.zeros(4))
    with pytest.raises(ValueError, match=r"\(n, 2\)"):
        g.packing_violation(np.zeros((3, 3)), np.zeros(3))


radius = st.one_of(st.sampled_from([0.0, 0.25, 0.5, 0.125, 1 / 3, -0.0, 0.1]), st.floats(-0.1, 0.6))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10).flatmap(
    lambda n: st.tuples(
        st.lists(st.tuples(wild, wild), min_size=n, max_size=n),
        st.lists(st.one_of(radius, st.sampled_from([math.nan, math.inf])), min_size=n, max_size=n),
    )
))
def test_packing_twins_agree(data: tuple[list[tuple[float, float]], list[float]]) -> None:
    c = np.array(data[0], dtype=np.float64).reshape(-1, 2)
    r = np.array(data[1], dtype=np.float64)
    expected = g.packing_violation_py(c, r)
    assert g.packing_violation(c, r) == expected
    assert g.packing_violation_numba(c, r) == expected


def test_warmup_compiles() -> None:
    g.warmup()
    from reasearch.native import _geometry_numba as nb

    assert nb.min_triangle_area_nb.signatures  # compiled for at least one signature
    assert nb.packing_violation_nb.signatures
