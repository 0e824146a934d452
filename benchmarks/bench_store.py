"""Run store and executors: write throughput per backend, overhead per evaluation per executor.

Run: ``pytest benchmarks/bench_store.py --benchmark-group-by=group``. Groups, side by side in one run:

* ``record_evaluation``: one evaluation recorded (candidate + full ``EvalResult`` + ledger debit +
  cache entry, one transaction) on SQLite WAL (the default), on SQLite's rollback journal with
  ``synchronous=FULL`` (reference), and on PostgreSQL when ``REASEARCH_BENCH_POSTGRES_URL`` or
  ``REASEARCH_TEST_POSTGRES_URL`` is set.
* ``evaluate_trivial``: one trivial candidate evaluated by ``Task.evaluate`` on the pool directly
  (reference), through ``LocalExecutor``, and through ``RayExecutor`` (local Ray, 2 CPUs).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from reasearch._bench.store import new_bench_run, postgres_url, record_evaluations
from reasearch.engine import SandboxConfig, SandboxPool
from reasearch.evaluators.testing import ToyTask, toy_candidate
from reasearch.runs.executor import EvalRequest, LocalExecutor
from reasearch.runs.store import SQLiteStore, Store, open_store

BACKENDS = ["sqlite_wal", "sqlite_rollback_full"] + (["postgres"] if postgres_url() else [])


def _open(backend: str, tmp: Path) -> Store:
    if backend == "postgres":
        return open_store(postgres_url())
    store = SQLiteStore(tmp / "store.sqlite")
    if backend == "sqlite_rollback_full":
        store._conn.execute("PRAGMA journal_mode=DELETE")
        store._conn.execute("PRAGMA synchronous=FULL")
    return store


@pytest.mark.parametrize("backend", BACKENDS)
def test_record_evaluation(benchmark, backend: str, tmp_path: Path) -> None:
    benchmark.group = "record_evaluation"
    store = _open(backend, tmp_path)
    try:
        run_id = new_bench_run(store)
        steps = itertools.count()
        benchmark(lambda: record_evaluations(store, run_id, 1, start=next(steps)))
        n = next(steps)
        assert len(store.evaluations(run_id)) == n
        assert store.usage(run_id)["evaluations"] == float(n)  # type: ignore[index]
    finally:
        store.close()


TASK = ToyTask()
REQUEST = EvalRequest(TASK.spec, toy_candidate([1.0, 2.0, 3.0, 4.0]), 0)


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    with SandboxPool(SandboxConfig(workers=2)) as p:
        yield p


@pytest.mark.parametrize("how", ["direct", "local", "ray"])
def test_evaluate_trivial(benchmark, how: str, pool: SandboxPool) -> None:
    benchmark.group = "evaluate_trivial"
    if how == "direct":
        result = benchmark(TASK.evaluate, REQUEST.source, seed=0, executor=pool)
    elif how == "local":
        with LocalExecutor(2, pool=pool) as ex:
            result = benchmark(ex.evaluate, REQUEST)
    else:
        pytest.importorskip("ray", reason="the ray extra is not installed")
        from reasearch.runs.executor import RayExecutor

        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        ex = RayExecutor(address=None, num_cpus=2)
        try:
            ex.map([REQUEST] * 4, progress=False)  # warm-up: Ray workers start their pools
            result = benchmark(ex.evaluate, REQUEST)
        finally:
            ex.close()
    assert result.score == -6.0
