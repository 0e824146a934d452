"""Run store and executors: write throughput per backend, overhead per evaluation per executor.

Run: ``pytest benchmarks/bench_store.py -s`` (``--bench-quick``: fewer repetitions). The figures of
``reasearch bench --section store``, measured by the same code (:mod:`reasearch._bench.store`: set-up,
timing loop and statistics); this file is only their pytest entry point.

Evaluations recorded per second on SQLite WAL vs the rollback journal (and PostgreSQL when
``REASEARCH_BENCH_POSTGRES_URL`` or ``REASEARCH_TEST_POSTGRES_URL`` is set); ``LocalExecutor`` and
``RayExecutor`` overhead per evaluation against ``Task.evaluate`` on the pool directly.
"""

from __future__ import annotations

from collections.abc import Callable

from reasearch._bench import BenchRow


def test_store(bench_section: Callable[[str], list[BenchRow]]) -> None:
    bench_section("store")
