"""Transaction scheduling: compiled simulator vs plain Python, and ``evaluate()`` end to end.

Run: ``pytest benchmarks/bench_txn.py -s`` (``--bench-quick``: fewer repetitions). The figures of
``reasearch bench --section txn``, measured by the same code (:mod:`reasearch._bench.txn`: set-up,
timing loop and statistics); this file is only their pytest entry point.

``get_opt_seq_cost`` per workload vs the plain-Python model, ``peek`` vs recomputing the prefix, and
the seed program's ``evaluate()`` vs the published evaluator's path rebuilt from this package's parts.
"""

from __future__ import annotations

from collections.abc import Callable

from reasearch._bench import BenchRow


def test_txn(bench_section: Callable[[str], list[BenchRow]]) -> None:
    bench_section("txn")
