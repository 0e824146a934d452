"""The chaos soak's figures: runs, evaluations, model calls, faults by kind, resumes and violations.

Run: ``pytest benchmarks/bench_chaos.py -s`` (the long soak: >= 10,000 evaluations, >= 200 kills;
``--bench-quick``: the short soak of the test suite). The figures of ``reasearch bench --section chaos``,
measured by the same code (:mod:`reasearch._bench.chaos`); this file is only their pytest entry point.
"""

from __future__ import annotations

from collections.abc import Callable

from reasearch._bench import BenchRow


def test_chaos(bench_section: Callable[[str], list[BenchRow]]) -> None:
    bench_section("chaos")
