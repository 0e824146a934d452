"""EPLB: the compiled algorithm and the seed program vs the loop twin, and ``evaluate()`` end to end.

Run: ``pytest benchmarks/bench_eplb.py -s`` (``--bench-quick``: fewer repetitions). The figures of
``reasearch bench --section eplb``, measured by the same code (:mod:`reasearch._bench.eplb`: set-up,
timing loop and statistics); this file is only their pytest entry point.

``rebalance_experts`` (compiled library, seed program) vs the plain-Python loop twin on one synthetic
window (results checked against the twin's), and the seed program through ``EplbTask.evaluate`` with its
in-sandbox ``t_alg``.
"""

from __future__ import annotations

from collections.abc import Callable

from reasearch._bench import BenchRow


def test_eplb(bench_section: Callable[[str], list[BenchRow]]) -> None:
    bench_section("eplb")
