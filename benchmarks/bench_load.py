"""The warm pool beside a CPU burner at 0x, 1x and 2x the cores: evaluations/s, p50, p99 and failures.

Run: ``pytest benchmarks/bench_load.py -s`` (``--bench-quick``: fewer evaluations). The figures of
``reasearch bench --section load``, measured by the same code (:mod:`reasearch._bench.load`); this file
is only their pytest entry point.
"""

from __future__ import annotations

from collections.abc import Callable

from reasearch._bench import BenchRow


def test_load(bench_section: Callable[[str], list[BenchRow]]) -> None:
    bench_section("load")
