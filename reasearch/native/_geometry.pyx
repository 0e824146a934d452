# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False, nonecheck=False
# distutils: extra_compile_args = -ffp-contract=off -O3
"""Compiled geometry kernels used by the trusted scorers (no JIT start-up in the engine's process).

The arithmetic is written in exactly the order of the plain-Python twins in
``reasearch.native.geometry`` (and ``-ffp-contract=off`` forbids fused multiply-adds), so results are
bit-identical to them; the property tests hold them equal.
"""

from libc.math cimport sqrt, fabs, isfinite, INFINITY
from libc.stdlib cimport malloc, free

cdef extern from "geometry_simd.h":
    int geom_have_avx2()
    double geom_min_area_avx2(const double* xs, const double* ys, Py_ssize_t n) nogil

cdef int _AVX2 = geom_have_avx2()  # the CPU runs the AVX2 loop (include/geometry_simd.h)

# Violation kinds, mirrored by reasearch.native.geometry.ViolationKind.
cdef enum:
    K_NONE = 0
    K_NONFINITE = 1
    K_NEGATIVE = 2
    K_LEFT = 3
    K_BOTTOM = 4
    K_RIGHT = 5
    K_TOP = 6
    K_OVERLAP = 7


def min_triangle(const double[:, ::1] p):
    """(area, i, j, k) of the first smallest triangle (i < j < k); (inf, -1, -1, -1) when n < 3."""
    cdef Py_ssize_t n = p.shape[0]
    cdef Py_ssize_t i, j, k, bi = -1, bj = -1, bk = -1
    cdef double best = INFINITY, a, x1, y1, x2, y2, x3, y3
    if p.shape[1] != 2:
        raise ValueError(f"expected an (n, 2) array of points, got {p.shape[1]} columns")
    for i in range(n):
        x1 = p[i, 0]
        y1 = p[i, 1]
        for j in range(i + 1, n):
            x2 = p[j, 0]
            y2 = p[j, 1]
            for k in range(j + 1, n):
                x3 = p[k, 0]
                y3 = p[k, 1]
                a = fabs(x1 * (y2 - y3) + x2 * (y3 - y1) + x3 * (y1 - y2)) * 0.5
                if a < best:
                    best = a
                    bi = i
                    bj = j
                    bk = k
    return best, bi, bj, bk


cdef inline double _min_of(const double* a, Py_ssize_t m, double best) noexcept nogil:
    """min(best, a[0..m)) ignoring NaN, as ``a < best`` does; four accumulators for the pipeline."""
    cdef Py_ssize_t k = 0
    cdef double b0 = best, b1 = best, b2 = best, b3 = best
    while k + 3 < m:
        b0 = a[k] if a[k] < b0 else b0
        b1 = a[k + 1] if a[k + 1] < b1 else b1
        b2 = a[k + 2] if a[k + 2] < b2 else b2
        b3 = a[k + 3] if a[k + 3] < b3 else b3
        k += 4
    while k < m:
        b0 = a[k] if a[k] < b0 else b0
        k += 1
    b0 = b1 if b1 < b0 else b0
    b2 = b3 if b3 < b2 else b2
    return b2 if b2 < b0 else b0


def min_triangle_area(const double[:, ::1] p, bint simd=True):
    """The smallest triangle area over all triples (inf when n < 3).

    For n >= 32, on a CPU with AVX2 (and ``simd`` true), four triangles per instruction
    (``include/geometry_simd.h``); elsewhere the innermost loop writes the areas of one (i, j) row
    into a buffer (a loop the compiler vectorises) and takes their minimum with four accumulators.
    Either way the same expression in the same order per triangle, and min ignores order, so the
    result is bit-identical to the twins. ``simd=False`` forces the portable loops (tests).
    """
    cdef Py_ssize_t n = p.shape[0]
    cdef Py_ssize_t i, j, k
    cdef double best = INFINITY, a, x1, y1, x2, y2, x3, y3, d12
    cdef double *xs
    cdef double *ys
    cdef double *buf
    if p.shape[1] != 2:
        raise ValueError(f"expected an (n, 2) array of points, got {p.shape[1]} columns")
    if n < 32:  # small n: the plain triple loop beats the buffer's set-up
        for i in range(n):
            x1 = p[i, 0]
            y1 = p[i, 1]
            for j in range(i + 1, n):
                x2 = p[j, 0]
                y2 = p[j, 1]
                for k in range(j + 1, n):
                    x3 = p[k, 0]
                    y3 = p[k, 1]
                    a = fabs(x1 * (y2 - y3) + x2 * (y3 - y1) + x3 * (y1 - y2)) * 0.5
                    if a < best:
                        best = a
        return best
    xs = <double*>malloc(3 * n * sizeof(double))
    if xs == NULL:
        raise MemoryError()
    ys = xs + n
    buf = xs + 2 * n
    for i in range(n):
        xs[i] = p[i, 0]
        ys[i] = p[i, 1]
    if _AVX2 and simd:
        with nogil:
            best = geom_min_area_avx2(xs, ys, n)
        free(xs)
        return best
    with nogil:
        for i in range(n):
            x1 = xs[i]
            y1 = ys[i]
            for j in range(i + 1, n):
                x2 = xs[j]
                y2 = ys[j]
                d12 = y1 - y2
                for k in range(j + 1, n):
                    buf[k] = fabs(x1 * (y2 - ys[k]) + x2 * (ys[k] - y1) + xs[k] * d12) * 0.5
                best = _min_of(buf + j + 1, n - j - 1, best)
    free(xs)
    return best


def packing_violation(const double[:, ::1] c, const double[::1] r):
    """Strict (no tolerance) check of circles in the unit square.

    Returns ``(kind, i, j, amount, count)``: the worst violated constraint (largest excess; the first
    one in scan order on ties), the circles involved (``j`` = -1 for single-circle constraints), its
    excess, and how many constraints are violated. ``kind`` 0 means valid. A non-finite value stops
    the scan at once (kind 1, amount inf).
    """
    cdef Py_ssize_t n = c.shape[0]
    cdef Py_ssize_t i, j, wi = -1, wj = -1
    cdef long count = 0
    cdef int kind = K_NONE
    cdef double worst = 0.0, e, xi, yi, ri, dx, dy
    if c.shape[1] != 2:
        raise ValueError(f"centers must be an (n, 2) array, got {c.shape[1]} columns")
    if r.shape[0] != n:
        raise ValueError(f"centers has {n} rows but radii has {r.shape[0]}")
    for i in range(n):
        if not (isfinite(c[i, 0]) and isfinite(c[i, 1]) and isfinite(r[i])):
            return K_NONFINITE, i, -1, INFINITY, 1
    for i in range(n):
        xi = c[i, 0]
        yi = c[i, 1]
        ri = r[i]
        e = 0.0 - ri
        if e > 0.0:
            count += 1
            if e > worst:
                worst = e; kind = K_NEGATIVE; wi = i; wj = -1
        e = ri - xi
        if e > 0.0:
            count += 1
            if e > worst:
                worst = e; kind = K_LEFT; wi = i; wj = -1
        e = ri - yi
        if e > 0.0:
            count += 1
            if e > worst:
                worst = e; kind = K_BOTTOM; wi = i; wj = -1
        e = (xi + ri) - 1.0
        if e > 0.0:
            count += 1
            if e > worst:
                worst = e; kind = K_RIGHT; wi = i; wj = -1
        e = (yi + ri) - 1.0
        if e > 0.0:
            count += 1
            if e > worst:
                worst = e; kind = K_TOP; wi = i; wj = -1
    for i in range(n):
        xi = c[i, 0]
        yi = c[i, 1]
        ri = r[i]
        for j in range(i + 1, n):
            dx = xi - c[j, 0]
            dy = yi - c[j, 1]
            e = (ri + r[j]) - sqrt(dx * dx + dy * dy)
            if e > 0.0:
                count += 1
                if e > worst:
                    worst = e; kind = K_OVERLAP; wi = i; wj = j
    return kind, wi, wj, worst, count
