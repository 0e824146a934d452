"""Cold start: fresh processes, each timed from exec to exit.

Run: ``pytest benchmarks/bench_coldstart.py -s`` (``--bench-quick``: fewer repetitions). The figures of
``reasearch bench --section coldstart``, measured by the same code (:mod:`reasearch._bench.coldstart`: set-up,
timing loop and statistics); this file is only their pytest entry point.

``reasearch tasks`` vs ``python -c "import numpy"``; ``reasearch eval circle_packing/n26-v1`` on the seed,
end to end; the first ``Task.evaluate`` in a fresh process vs a fresh jailed interpreter importing NumPy.
"""

from __future__ import annotations

from collections.abc import Callable

from reasearch._bench import BenchRow


def test_coldstart(bench_section: Callable[[str], list[BenchRow]]) -> None:
    bench_section("coldstart")
