"""Ray against this machine's own ways: evaluations per second, and fleets against their members in a row.

Run: ``pytest benchmarks/bench_fleet.py -s`` (``--bench-quick``: smaller fleets). The figures of
``reasearch bench --section fleet``, measured by the same code (:mod:`reasearch._bench.fleet`: set-up,
timing and ratios); this file is only their pytest entry point.

RayExecutor against the local pool on trivial evaluations; a fleet of 4 demo-model members on Ray (one
machine, then a local two-node cluster) against the same members one after another: the speed-up and
the scheduler's overhead per member.
"""

from __future__ import annotations

from collections.abc import Callable

from reasearch._bench import BenchRow


def test_fleet(bench_section: Callable[[str], list[BenchRow]]) -> None:
    bench_section("fleet")
