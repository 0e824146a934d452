"""Geometry: LP radii, the minimum-area kernel, and ``evaluate()`` of the geometry seeds.

Run: ``pytest benchmarks/bench_geometry.py --benchmark-group-by=group``. Each group holds the measured
code and its reference side by side:

* ``LP radii n=26``: ``optimal_radii`` (HiGHS, one reused model, strict repair) vs
  ``scipy.optimize.linprog(method="highs")`` on the same centers (goal: <= 1 ms);
* ``min area n=15`` / ``n=100``: the Cython and numba kernels vs a vectorised NumPy reference
  (goal: >= 20x); ``cython_portable`` is the Cython kernel without its AVX2 loop (n >= 32 only
  differs), the figure the AVX2 loop is measured against;
* ``evaluate circle_packing/n26``: ``Task.evaluate`` of the seed on the warm pool vs the trusted
  scoring alone (the pool's share is the difference; goal: whole evaluate <= 5 ms, issue 16, as in
  ``reasearch bench --section sandbox``);
* ``evaluate heilbronn/n13``: ``Task.evaluate`` of the seed vs the seed's ``run()`` timed inside a
  sandbox child (goal: within 20 ms).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import reasearch
from reasearch._bench.geometry import _TIMED_ENTRY
from reasearch.engine import SandboxConfig, SandboxPool
from reasearch.engine.protocol import RunRequest
from reasearch.native import _geometry, geometry
from reasearch.native.lp import optimal_radii, optimal_radii_scipy


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    with SandboxPool(SandboxConfig(workers=1)) as p:  # one worker: every call hits the same warm child
        yield p


@pytest.mark.parametrize("impl", ["highspy", "scipy_linprog"])
def test_lp_radii(benchmark, impl):  # type: ignore[no-untyped-def]
    centers = np.random.default_rng(0).uniform(0.05, 0.95, size=(26, 2))
    fn = optimal_radii if impl == "highspy" else optimal_radii_scipy
    benchmark.group = "LP radii n=26"
    r = benchmark(fn, centers)
    assert r.sum() == pytest.approx(optimal_radii_scipy(centers).sum(), abs=1e-7)


@pytest.mark.parametrize("n", [15, 100])
@pytest.mark.parametrize("impl", ["cython", "cython_portable", "numba", "numpy"])
def test_min_area(benchmark, n, impl):  # type: ignore[no-untyped-def]
    pts = np.random.default_rng(n).uniform(size=(n, 2))
    fn = {"cython": geometry.min_triangle_area, "cython_portable": lambda p: _geometry.min_triangle_area(p, False),
          "numba": geometry.min_triangle_area_numba, "numpy": geometry.min_triangle_area_numpy}[impl]
    fn(pts)  # compile (numba) outside the timing
    benchmark.group = f"min area n={n}"
    assert benchmark(fn, pts) == geometry.min_triangle_area_py(pts)


@pytest.mark.parametrize("impl", ["evaluate_warm_pool", "scoring_alone"])
def test_evaluate_circle_packing(benchmark, pool, impl):  # type: ignore[no-untyped-def]
    task = reasearch.make("circle_packing/n26-v1")
    src = task.seed_program()
    first = task.evaluate(src, executor=pool)
    benchmark.group = f"evaluate circle_packing/n26 ({pool.mode})"
    if impl == "evaluate_warm_pool":
        res = benchmark(task.evaluate, src, executor=pool)
    else:
        data = pool.run(task.build_request(src, seed=0)).value
        res = benchmark(task.score_solution, data)
    assert res.ok and res.score == first.score == task.spec.seed_score


@pytest.mark.parametrize("impl", ["evaluate_warm_pool", "own_compute_in_sandbox"])
def test_evaluate_heilbronn(benchmark, pool, impl):  # type: ignore[no-untyped-def]
    task = reasearch.make("heilbronn/n13-v1")
    src = task.seed_program()
    task.evaluate(src, executor=pool)
    benchmark.group = f"evaluate heilbronn/n13 ({pool.mode})"
    if impl == "evaluate_warm_pool":
        res = benchmark.pedantic(task.evaluate, args=(src,), kwargs={"executor": pool}, rounds=7, iterations=1)
        assert res.ok and res.score == task.spec.seed_score
    else:
        req = RunRequest(source=src + _TIMED_ENTRY, entry=("_bench_timed_run",))
        out = benchmark.pedantic(pool.run, args=(req,), rounds=7, iterations=1)
        assert out.status.value == "OK" and out.value > 0
        benchmark.extra_info["own_compute_s"] = out.value
