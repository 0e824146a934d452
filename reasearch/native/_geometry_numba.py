"""numba kernels of :mod:`reasearch.native.geometry` (imported lazily: numba's start-up is ~0.2 s).

Same expressions, same order and same tie-breaking as the Cython kernels and the plain-Python twins.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["min_triangle_area_nb", "min_triangle_nb", "packing_violation_nb", "warmup"]


@numba.njit(cache=True, nogil=True)
def min_triangle_nb(p: np.ndarray) -> tuple[float, int, int, int]:  # pragma: no cover - compiled
    n = p.shape[0]
    best = np.inf
    bi = bj = bk = -1
    for i in range(n):
        x1 = p[i, 0]
        y1 = p[i, 1]
        for j in range(i + 1, n):
            x2 = p[j, 0]
            y2 = p[j, 1]
            for k in range(j + 1, n):
                x3 = p[k, 0]
                y3 = p[k, 1]
                a = abs(x1 * (y2 - y3) + x2 * (y3 - y1) + x3 * (y1 - y2)) * 0.5
                if a < best:
                    best = a
                    bi = i
                    bj = j
                    bk = k
    return best, bi, bj, bk


@numba.njit(cache=True, nogil=True)
def min_triangle_area_nb(p: np.ndarray) -> float:  # pragma: no cover - compiled
    n = p.shape[0]
    best = np.inf
    for i in range(n):
        x1 = p[i, 0]
        y1 = p[i, 1]
        for j in range(i + 1, n):
            x2 = p[j, 0]
            y2 = p[j, 1]
            for k in range(j + 1, n):
                x3 = p[k, 0]
                y3 = p[k, 1]
                a = abs(x1 * (y2 - y3) + x2 * (y3 - y1) + x3 * (y1 - y2)) * 0.5
                if a < best:  # noqa: PLR1730 - same comparison as the twins (NaN never wins)
                    best = a
    return best


@numba.njit(cache=True, nogil=True)
def packing_violation_nb(c: np.ndarray, r: np.ndarray) -> tuple[int, int, int, float, int]:  # pragma: no cover
    n = c.shape[0]
    for i in range(n):
        if not (np.isfinite(c[i, 0]) and np.isfinite(c[i, 1]) and np.isfinite(r[i])):
            return 1, i, -1, np.inf, 1
    kind = 0
    wi = -1
    wj = -1
    worst = 0.0
    count = 0
    for i in range(n):
        xi = c[i, 0]
        yi = c[i, 1]
        ri = r[i]
        for code in range(2, 7):
            if code == 2:
                e = 0.0 - ri
            elif code == 3:
                e = ri - xi
            elif code == 4:
                e = ri - yi
            elif code == 5:
                e = (xi + ri) - 1.0
            else:
                e = (yi + ri) - 1.0
            if e > 0.0:
                count += 1
                if e > worst:
                    worst = e
                    kind = code
                    wi = i
                    wj = -1
    for i in range(n):
        xi = c[i, 0]
        yi = c[i, 1]
        ri = r[i]
        for j in range(i + 1, n):
            dx = xi - c[j, 0]
            dy = yi - c[j, 1]
            e = (ri + r[j]) - np.sqrt(dx * dx + dy * dy)
            if e > 0.0:
                count += 1
                if e > worst:
                    worst = e
                    kind = 7
                    wi = i
                    wj = j
    return kind, wi, wj, worst, count


def warmup(kernels: str = "all") -> None:
    """Compiles kernels (or loads them from NUMBA_CACHE_DIR) so forked children call them at full speed.

    Args:
        kernels: ``"triangles"``, ``"packing"`` or ``"all"``; a worker compiles only what its task uses.
    """
    if kernels not in ("all", "triangles", "packing"):
        raise ValueError(f"kernels must be 'all', 'triangles' or 'packing', not {kernels!r}")
    p = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    if kernels in ("all", "triangles"):
        min_triangle_area_nb(p)
        min_triangle_nb(p)
    if kernels in ("all", "packing"):
        packing_violation_nb(p, np.full(4, 0.1))
