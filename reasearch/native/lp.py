"""Optimal radii for fixed circle centers: a linear program solved with HiGHS (highspy).

For centers ``c`` in the unit square, ``optimal_radii(c)`` solves

    maximize sum_i r_i  s.t.  r_i + r_j <= |c_i - c_j|  (all pairs),
                              0 <= r_i <= min(x_i, y_i, 1 - x_i, 1 - y_i),

then shrinks the HiGHS solution (which may break constraints by ~1e-9) until it passes the strict,
tolerance-free check of :func:`reasearch.native.geometry.packing_violation`. One HiGHS instance
and one LP skeleton per size are kept per thread; each call overwrites the bounds and reloads the model
(``passModel`` discards the previous basis, so the answer never depends on earlier calls).
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from typing import Any

import numpy as np

from reasearch.errors import ReasearchError
from reasearch.native.geometry import packing_violation

__all__ = ["LPError", "optimal_radii", "optimal_radii_scipy"]

_MAX_REPAIR_ROUNDS = 64


class LPError(ReasearchError):
    """HiGHS did not reach an optimal solution (it should for any centers inside the square)."""


_local = threading.local()
_banner_lock = threading.Lock()


def _solver() -> Any:
    """This thread's HiGHS instance, created silently on first use."""
    h = getattr(_local, "highs", None)
    if h is None:
        from highspy import _core

        # HiGHS prints a copyright banner from its C++ constructor, before any option can be set;
        # silence file descriptor 1 for the few microseconds of construction.
        with _banner_lock:
            sys.stdout.flush()
            saved = os.dup(1)
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, 1)
                h = _core._Highs()
            finally:
                os.dup2(saved, 1)
                os.close(saved)
                os.close(devnull)
        h.setOptionValue("output_flag", False)
        h.setOptionValue("threads", 1)
        # Primal simplex: measured fastest on these LPs (n=26: ~0.4 ms vs ~0.6 ms for the default).
        h.setOptionValue("simplex_strategy", 4)
        # No presolve: on these small dense LPs it costs more than it saves (n=26: ~0.4 ms against
        # ~0.6-0.9 ms with it, same optimum to 1e-15; measured on the seed and random centers).
        h.setOptionValue("presolve", "off")
        _local.highs = h
        _local.models = {}
    return h


@functools.lru_cache(maxsize=64)
def _structure(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Row-wise constraint matrix of the pair constraints for n circles (shared by all calls)."""
    iu, ju = np.triu_indices(n, 1)
    m = iu.size
    start = np.arange(0, 2 * m + 1, 2, dtype=np.int32)
    index = np.empty(2 * m, dtype=np.int32)
    index[0::2] = iu
    index[1::2] = ju
    return iu, ju, start, index, np.ones(2 * m)


def _model(n: int) -> Any:
    """This thread's LP skeleton for n circles (objective, matrix, lower bounds); bounds set per call."""
    import highspy

    models = _local.models
    lp = models.get(n)
    if lp is None:
        _, _, start, index, value = _structure(n)
        m = n * (n - 1) // 2
        lp = highspy.HighsLp()
        lp.num_col_ = n
        lp.num_row_ = m
        lp.sense_ = highspy.ObjSense.kMaximize
        lp.col_cost_ = np.ones(n)
        lp.col_lower_ = np.zeros(n)
        lp.row_lower_ = np.full(m, -highspy.kHighsInf)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
        lp.a_matrix_.start_ = start
        lp.a_matrix_.index_ = index
        lp.a_matrix_.value_ = value
        models[n] = lp
    return lp


def _wall_bounds(c: np.ndarray) -> np.ndarray:
    return np.minimum(np.minimum(c[:, 0], c[:, 1]), np.minimum(1.0 - c[:, 0], 1.0 - c[:, 1]))


def _check_centers(centers: object) -> np.ndarray:
    c = np.ascontiguousarray(centers, dtype=np.float64)
    if c.ndim != 2 or c.shape[1] != 2:
        raise ValueError(f"centers must be an (n, 2) array, got shape {c.shape}")
    if not np.all(np.isfinite(c)):
        raise ValueError("centers must be finite")
    if np.any(c < 0.0) or np.any(c > 1.0):
        raise ValueError("every center must lie in the unit square [0, 1]^2")
    return c


def optimal_radii(centers: object) -> np.ndarray:
    """The radii of largest total for fixed centers, valid under the strict check.

    Args:
        centers: (n, 2) array-like, every center inside [0, 1]^2.

    Returns:
        (n,) float64 radii; ``packing_violation(centers, radii).valid`` is True.

    Raises:
        ValueError: centers of the wrong shape, non-finite, or outside the unit square.
        LPError: HiGHS failed to solve the LP.
    """
    import highspy

    c = _check_centers(centers)
    n = c.shape[0]
    if n == 0:
        return np.zeros(0)
    iu, ju, *_ = _structure(n)
    d = np.sqrt((c[iu, 0] - c[ju, 0]) ** 2 + (c[iu, 1] - c[ju, 1]) ** 2)
    h = _solver()
    lp = _model(n)
    # Every call overwrites all the bounds that depend on the centers; the rest is fixed per n.
    lp.col_upper_ = np.maximum(_wall_bounds(c), 0.0)
    lp.row_upper_ = d
    h.passModel(lp)
    h.run()
    status = h.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        raise LPError(f"HiGHS ended with {h.modelStatusToString(status)} for {n} centers")
    r = np.array(h.getSolution().col_value, dtype=np.float64)
    return make_strictly_valid(c, r)


def make_strictly_valid(centers: np.ndarray, radii: np.ndarray) -> np.ndarray:
    """Shrinks nearly-feasible radii (solver tolerance ~1e-9) until the strict check passes."""
    c = np.ascontiguousarray(centers, dtype=np.float64)
    r = np.clip(np.asarray(radii, dtype=np.float64), 0.0, None)
    r = np.minimum(r, np.maximum(_wall_bounds(c), 0.0))
    iu, ju, *_ = _structure(c.shape[0])
    d = np.sqrt((c[iu, 0] - c[ju, 0]) ** 2 + (c[iu, 1] - c[ju, 1]) ** 2)
    for _ in range(_MAX_REPAIR_ROUNDS):
        if packing_violation(c, r).valid:
            return r
        # Each circle in an overlapping pair gives up the pair's whole excess (a little more than
        # needed, never less), then one ulp more against rounding in the subtraction itself.
        excess = np.maximum((r[iu] + r[ju]) - d, 0.0)
        cut = np.zeros_like(r)
        np.maximum.at(cut, iu, excess)
        np.maximum.at(cut, ju, excess)
        r = np.where(cut > 0.0, np.nextafter(np.maximum(r - cut, 0.0), 0.0), r)
        # Walls: 1 - x can round up, so step down until x + r <= 1 holds in floating point.
        over = (r > c[:, 0]) | (r > c[:, 1]) | (c[:, 0] + r > 1.0) | (c[:, 1] + r > 1.0)
        r = np.where(over, np.maximum(np.nextafter(r, 0.0), 0.0), r)
    raise LPError("could not repair the LP radii to pass the strict check (please report this)")


def optimal_radii_scipy(centers: object) -> np.ndarray:
    """The same LP through ``scipy.optimize.linprog`` (the benchmark's reference; not repaired)."""
    from scipy.optimize import linprog
    from scipy.sparse import csr_array

    c = _check_centers(centers)
    n = c.shape[0]
    iu, ju, start, index, value = _structure(n)
    d = np.sqrt((c[iu, 0] - c[ju, 0]) ** 2 + (c[iu, 1] - c[ju, 1]) ** 2)
    a = csr_array((value, index, start), shape=(d.size, n))
    res = linprog(
        -np.ones(n), A_ub=a, b_ub=d, bounds=list(zip(np.zeros(n), _wall_bounds(c), strict=True)), method="highs"
    )
    if res.status != 0:
        raise LPError(f"linprog failed: {res.message}")
    return np.asarray(res.x, dtype=np.float64)
