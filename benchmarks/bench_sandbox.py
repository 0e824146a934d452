"""Per-evaluation overhead of the warm sandbox pool, side by side with its references.

Run: ``pytest benchmarks/bench_sandbox.py -s`` (``--bench-quick``: fewer repetitions). The figures of
``reasearch bench --section sandbox``, measured by the same code (:mod:`reasearch._bench.sandbox`: set-up,
timing loop and statistics); this file is only their pytest entry point.

Trivial candidates through the warm pool (fitted, NumPy and full images; nsjail and process mode),
throughput, a fresh jailed and a plain ``python -c "import numpy"``, the circle-packing ``evaluate()``,
the step-by-step breakdown, CPU and page faults per evaluation, fork floors and the zygote.
"""

from __future__ import annotations

from collections.abc import Callable

from reasearch._bench import BenchRow


def test_sandbox(bench_section: Callable[[str], list[BenchRow]]) -> None:
    bench_section("sandbox")
