"""Geometry kernels: minimum triangle area (Heilbronn) and strict circle-packing validation.

Three implementations of each kernel, held bit-for-bit equal by property tests:

* the Cython kernels in :mod:`reasearch.native._geometry` (used by the trusted scorers: no JIT
  start-up in the engine's process);
* numba kernels (``*_numba``, in :mod:`reasearch.native._geometry_numba`, imported lazily so the
  scorers never pay numba's start-up; compiled on first call, or by :func:`warmup` in a sandbox worker before
  it forks, so candidates can call them at full speed);
* plain-Python twins (``*_py``), the readable definition.

Every variant evaluates the same expressions in the same order (no tolerance, no fused
multiply-add), which is what makes exact equality a fair test.

Area of a triangle: ``|x1*(y2-y3) + x2*(y3-y1) + x3*(y1-y2)| * 0.5``.
Pair constraint: ``(r_i + r_j) - sqrt(dx*dx + dy*dy) <= 0`` with ``dx = x_i - x_j``.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from reasearch.native import _geometry

__all__ = [
    "Violation",
    "ViolationKind",
    "kernel_source_hash",
    "min_triangle",
    "min_triangle_area",
    "min_triangle_area_numba",
    "min_triangle_area_numpy",
    "min_triangle_area_py",
    "min_triangle_numba",
    "min_triangle_py",
    "packing_violation",
    "packing_violation_numba",
    "packing_violation_py",
    "smallest_triangles",
    "triangle_areas_numpy",
    "warmup",
]


class ViolationKind(enum.IntEnum):
    """Which constraint of a circle packing is broken (codes shared with the compiled kernels)."""

    NONE = 0
    NONFINITE = 1  # a coordinate or radius is NaN or infinite
    NEGATIVE = 2  # r_i < 0
    LEFT = 3  # r_i > x_i
    BOTTOM = 4  # r_i > y_i
    RIGHT = 5  # x_i + r_i > 1
    TOP = 6  # y_i + r_i > 1
    OVERLAP = 7  # r_i + r_j > |c_i - c_j|


@dataclass(frozen=True, slots=True)
class Violation:
    """The worst broken constraint of a packing (``kind`` NONE when the packing is valid).

    Attributes:
        kind: which constraint.
        i: the circle (or the first circle of the pair); -1 when valid.
        j: the second circle of an overlapping pair, else -1.
        amount: by how much the constraint is exceeded (0 when valid; inf for non-finite input).
        count: how many constraints are broken in total.
    """

    kind: ViolationKind
    i: int
    j: int
    amount: float
    count: int

    @property
    def valid(self) -> bool:
        return self.kind is ViolationKind.NONE

    def describe(self) -> str:
        """One sentence naming the constraint, the circles and the excess."""
        k = self.kind
        if k is ViolationKind.NONE:
            return "all constraints hold"
        if k is ViolationKind.NONFINITE:
            return f"circle {self.i} has a non-finite center or radius"
        where = {
            ViolationKind.NEGATIVE: f"circle {self.i} has a negative radius",
            ViolationKind.LEFT: f"circle {self.i} crosses the left wall (r > x)",
            ViolationKind.BOTTOM: f"circle {self.i} crosses the bottom wall (r > y)",
            ViolationKind.RIGHT: f"circle {self.i} crosses the right wall (x + r > 1)",
            ViolationKind.TOP: f"circle {self.i} crosses the top wall (y + r > 1)",
            ViolationKind.OVERLAP: f"circles {self.i} and {self.j} overlap (r_i + r_j > distance)",
        }[k]
        more = f"; {self.count} constraint(s) broken in all" if self.count > 1 else ""
        return f"{where} by {self.amount:.6g}{more}"


_F64 = np.dtype(np.float64)


def _is_points(p: object) -> bool:
    """Already what the kernels take: a C-contiguous native float64 (n, 2) ndarray (no conversion
    needed; numba would compile a new specialisation for any other layout or dtype). ``is``: arrays
    of the builtin float64 share its descriptor; any other (byte-swapped, with metadata) converts."""
    return (type(p) is np.ndarray and p.dtype is _F64 and p.ndim == 2 and p.shape[1] == 2
            and p.flags.c_contiguous)


def _as_points(points: object) -> np.ndarray:
    """A C-contiguous float64 (n, 2) array view of ``points`` (``points`` itself when it is one)."""
    if _is_points(points):
        return points  # type: ignore[return-value]
    arr = np.ascontiguousarray(points, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError(f"expected an (n, 2) array of points, got shape {arr.shape}")
    return arr


# ---------------------------------------------------------------- public (compiled) entry points


def min_triangle_area(points: object) -> float:
    """Smallest area over all triangles of ``points`` (``inf`` for fewer than 3 points).

    Args:
        points: an (n, 2) array-like of floats.

    Returns:
        The minimum of ``|x1(y2-y3) + x2(y3-y1) + x3(y1-y2)| / 2`` over all triples. NaN areas never
        count as smaller (reject non-finite input first).
    """
    try:  # fast path: already a C-contiguous float64 (n, 2) array
        return _geometry.min_triangle_area(points)
    except (TypeError, ValueError):
        return _geometry.min_triangle_area(_as_points(points))


def min_triangle(points: object) -> tuple[float, int, int, int]:
    """``(area, i, j, k)`` of the smallest triangle (first in ``i < j < k`` order on ties)."""
    try:  # fast path: already a C-contiguous float64 (n, 2) array
        return _geometry.min_triangle(points)
    except (TypeError, ValueError):
        return _geometry.min_triangle(_as_points(points))


def packing_violation(centers: object, radii: object) -> Violation:
    """Strict validity of circles in the unit square: the worst broken constraint, if any.

    Args:
        centers: (n, 2) array-like of circle centers.
        radii: (n,) array-like of radii.

    Returns:
        A :class:`Violation`; ``.valid`` is True iff every radius is finite and non-negative, every
        circle lies inside [0, 1]^2 and no two circles overlap, all with no tolerance.
    """
    c = _as_points(centers)
    r = np.ascontiguousarray(radii, dtype=np.float64)
    if r.ndim != 1 or r.shape[0] != c.shape[0]:
        raise ValueError(f"radii must have shape ({c.shape[0]},), got {r.shape}")
    kind, i, j, amount, count = _geometry.packing_violation(c, r)
    return Violation(ViolationKind(kind), int(i), int(j), float(amount), int(count))


def smallest_triangles(points: object, k: int = 5) -> list[tuple[float, tuple[int, int, int]]]:
    """The ``k`` smallest triangles as ``(area, (i, j, l))``, smallest first (ties in index order)."""
    idx, areas = triangle_areas_numpy(points)
    if areas.size == 0:
        return []
    k = min(int(k), areas.size)
    # A stable sort keeps ties in lexicographic index order, matching min_triangle's choice.
    order = np.argsort(areas, kind="stable")[:k]
    return [(float(areas[t]), (int(idx[t, 0]), int(idx[t, 1]), int(idx[t, 2]))) for t in order]


# ---------------------------------------------------------------- numba kernels


_numba_kernels: Any = None


def _nb() -> Any:
    """The numba kernel module, imported on first use (numba's start-up is paid only by its users)."""
    global _numba_kernels
    if _numba_kernels is None:
        from reasearch.native import _geometry_numba

        _numba_kernels = _geometry_numba
    return _numba_kernels


def min_triangle_area_numba(points: object) -> float:
    """numba twin of :func:`min_triangle_area`."""
    return float((_numba_kernels or _nb()).min_triangle_area_nb(_as_points(points)))


def min_triangle_numba(points: object) -> tuple[float, int, int, int]:
    """numba twin of :func:`min_triangle`."""
    a, i, j, k = (_numba_kernels or _nb()).min_triangle_nb(_as_points(points))
    return float(a), int(i), int(j), int(k)


def packing_violation_numba(centers: object, radii: object) -> Violation:
    """numba twin of :func:`packing_violation`."""
    c = _as_points(centers)
    r = np.ascontiguousarray(radii, dtype=np.float64)
    if r.ndim != 1 or r.shape[0] != c.shape[0]:
        raise ValueError(f"radii must have shape ({c.shape[0]},), got {r.shape}")
    kind, i, j, amount, count = (_numba_kernels or _nb()).packing_violation_nb(c, r)
    return Violation(ViolationKind(kind), int(i), int(j), float(amount), int(count))


def warmup(kernels: str = "all") -> None:
    """Imports and compiles numba kernels (a sandbox worker calls this once, before it forks).

    Args:
        kernels: ``"triangles"`` (the ``min_triangle*`` kernels), ``"packing"`` or ``"all"``.
    """
    _nb().warmup(kernels)


# ---------------------------------------------------------------- plain-Python twins (the definition)


def min_triangle_py(points: object) -> tuple[float, int, int, int]:
    """Plain-Python definition of :func:`min_triangle`."""
    pts = [(float(x), float(y)) for x, y in _as_points(points).tolist()]
    best, bi, bj, bk = math.inf, -1, -1, -1
    n = len(pts)
    for i in range(n):
        x1, y1 = pts[i]
        for j in range(i + 1, n):
            x2, y2 = pts[j]
            for k in range(j + 1, n):
                x3, y3 = pts[k]
                a = abs(x1 * (y2 - y3) + x2 * (y3 - y1) + x3 * (y1 - y2)) * 0.5
                if a < best:
                    best, bi, bj, bk = a, i, j, k
    return best, bi, bj, bk


def min_triangle_area_py(points: object) -> float:
    """Plain-Python definition of :func:`min_triangle_area`."""
    return min_triangle_py(points)[0]


def packing_violation_py(centers: object, radii: object) -> Violation:
    """Plain-Python definition of :func:`packing_violation`."""
    c = _as_points(centers).tolist()
    r = [float(v) for v in np.asarray(radii, dtype=np.float64).reshape(-1).tolist()]
    if len(r) != len(c):
        raise ValueError(f"radii must have shape ({len(c)},), got ({len(r)},)")
    for i, ((x, y), ri) in enumerate(zip(c, r, strict=True)):
        if not (math.isfinite(x) and math.isfinite(y) and math.isfinite(ri)):
            return Violation(ViolationKind.NONFINITE, i, -1, math.inf, 1)
    worst, kind, wi, wj, count = 0.0, ViolationKind.NONE, -1, -1, 0
    for i, ((x, y), ri) in enumerate(zip(c, r, strict=True)):
        for code, e in (
            (ViolationKind.NEGATIVE, 0.0 - ri),
            (ViolationKind.LEFT, ri - x),
            (ViolationKind.BOTTOM, ri - y),
            (ViolationKind.RIGHT, (x + ri) - 1.0),
            (ViolationKind.TOP, (y + ri) - 1.0),
        ):
            if e > 0.0:
                count += 1
                if e > worst:
                    worst, kind, wi, wj = e, code, i, -1
    for i, j in itertools.combinations(range(len(c)), 2):
        dx = c[i][0] - c[j][0]
        dy = c[i][1] - c[j][1]
        e = (r[i] + r[j]) - math.sqrt(dx * dx + dy * dy)
        if e > 0.0:
            count += 1
            if e > worst:
                worst, kind, wi, wj = e, ViolationKind.OVERLAP, i, j
    return Violation(kind, wi, wj, worst, count)


@functools.cache
def kernel_source_hash() -> str:
    """Hash of the kernel sources the geometry scorers depend on (part of their evaluator hash).

    The Cython kernel is hashed by its ``.pyx`` source, not the built binary, so rebuilding the same
    code keeps cached results valid while any change to the scoring arithmetic invalidates them.
    """
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for name in ("geometry.py", "_geometry.pyx", "_geometry_numba.py", "lp.py"):
        h.update(name.encode())
        h.update((here / name).read_bytes())
    return h.hexdigest()[:16]


# ---------------------------------------------------------------- vectorised NumPy reference


@functools.lru_cache(maxsize=32)
def _triples(n: int) -> np.ndarray:
    """All index triples i < j < k of n points, in lexicographic order, as an (m, 3) array."""
    if n < 3:
        return np.empty((0, 3), dtype=np.intp)
    return np.array(list(itertools.combinations(range(n), 3)), dtype=np.intp)


def triangle_areas_numpy(points: object) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised areas of every triangle: ``(triples (m, 3), areas (m,))`` in lexicographic order."""
    p = _as_points(points)
    t = _triples(p.shape[0])
    x1, y1 = p[t[:, 0], 0], p[t[:, 0], 1]
    x2, y2 = p[t[:, 1], 0], p[t[:, 1], 1]
    x3, y3 = p[t[:, 2], 0], p[t[:, 2], 1]
    areas = np.abs(x1 * (y2 - y3) + x2 * (y3 - y1) + x3 * (y1 - y2)) * 0.5
    return t, areas


def min_triangle_area_numpy(points: object) -> float:
    """Vectorised NumPy reference of :func:`min_triangle_area` (the benchmark's baseline)."""
    _, areas = triangle_areas_numpy(points)
    return float(areas.min()) if areas.size else math.inf
