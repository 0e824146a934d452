"""Agent harness overhead per turn (scripted model, evaluation time excluded), side by side.

Run: ``pytest benchmarks/bench_agent.py -s`` (``--bench-quick``: fewer repetitions). The figures of
``reasearch bench --section agent``, measured by the same code (:mod:`reasearch._bench.agent`: set-up,
timing loop and statistics); this file is only their pytest entry point.

A scripted run (each turn: snapshot, journaled and debited reply, one cheap tool) on the real SQLite
store and on the in-memory recorder (reference: the store's share); median and p95 per turn. Goal: <= 50 ms.
"""

from __future__ import annotations

from collections.abc import Callable

from reasearch._bench import BenchRow


def test_agent(bench_section: Callable[[str], list[BenchRow]]) -> None:
    bench_section("agent")
