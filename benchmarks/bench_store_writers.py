"""Concurrent store writers (fleets: ``reasearch bench --section fleet``, benchmarks/bench_fleet.py).

Run: ``pytest benchmarks/bench_store_writers.py --benchmark-group-by=group -s``. Group:

* ``store_8_writers``: 8 threads, each its own connection, recording evaluations of one run at once
  (idempotent steps, one transaction each), on SQLite (WAL) and PostgreSQL when
  ``REASEARCH_BENCH_POSTGRES_URL``/``REASEARCH_TEST_POSTGRES_URL`` is set; writes per second printed.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from reasearch._bench.store import new_bench_run, postgres_url, record_evaluations
from reasearch.runs.store import open_store


def _writers(url: str, n_writers: int, per_writer: int) -> float:
    with open_store(url) as store:
        run_id = new_bench_run(store)
    stores = [open_store(url) for _ in range(n_writers)]
    t0 = time.perf_counter()
    threads = [
        threading.Thread(target=record_evaluations, args=(s, run_id, per_writer), kwargs={"start": i * per_writer})
        for i, s in enumerate(stores)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    assert len(stores[0].evaluations(run_id)) == n_writers * per_writer
    for s in stores:
        s.close()
    return n_writers * per_writer / dt


@pytest.mark.parametrize("backend", ["sqlite"] + (["postgres"] if postgres_url() else []))
def test_store_8_writers(benchmark, backend: str, tmp_path: Path) -> None:
    benchmark.group = "store_8_writers"
    url = postgres_url() if backend == "postgres" else str(tmp_path / "runs")
    rates: list[float] = []
    benchmark.pedantic(lambda: rates.append(_writers(url, 8, 50)), rounds=3, iterations=1)
    print(f"\n{backend}: 8 concurrent writers, {max(rates):.0f} evaluations recorded/s (best of 3)")
