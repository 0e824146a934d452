"""Controller overhead per evaluation of each baseline method against the agent's harness.

Run: ``pytest benchmarks/bench_methods.py -s`` (``--bench-quick``: fewer repetitions). The figures of
``reasearch bench --section methods``, measured by the same code (:mod:`reasearch._bench.methods`: set-up,
timing loop and statistics); this file is only their pytest entry point.

A ToyTask run on the real SQLite store, evaluations on a StaticRunner (no sandbox), an instant model;
the figure per evaluation is the run's time divided by the evaluations recorded.
"""

from __future__ import annotations

from collections.abc import Callable

from reasearch._bench import BenchRow


def test_methods(bench_section: Callable[[str], list[BenchRow]]) -> None:
    bench_section("methods")
