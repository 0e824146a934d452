"""Geometry: LP radii, the minimum-area kernel, and ``evaluate()`` of the geometry seeds.

Run: ``pytest benchmarks/bench_geometry.py -s`` (``--bench-quick``: fewer repetitions). The figures of
``reasearch bench --section geometry``, measured by the same code (:mod:`reasearch._bench.geometry`: set-up,
timing loop and statistics); this file is only their pytest entry point.

``optimal_radii`` vs ``scipy.optimize.linprog``; the Cython and numba min-area kernels vs NumPy at n=15
and n=100; the circle-packing seed's ``evaluate()`` on the default pool; the Heilbronn seed's overhead
(wall minus the candidate's CPU); every geometry seed's score beside its best known value.
"""

from __future__ import annotations

from collections.abc import Callable

from reasearch._bench import BenchRow


def test_geometry(bench_section: Callable[[str], list[BenchRow]]) -> None:
    bench_section("geometry")
