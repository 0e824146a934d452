"""OpenEvolve's parallel workers through the run's metering proxy: 4 workers against 1.

Run: ``pytest benchmarks/bench_peers.py -s`` (``--bench-quick``: a smaller budget). The figures of
``reasearch bench --section peers``, measured by the same code (:mod:`reasearch._bench.peers`); this file
is only their pytest entry point.
"""

from __future__ import annotations

from collections.abc import Callable

from reasearch._bench import BenchRow


def test_peers(bench_section: Callable[[str], list[BenchRow]]) -> None:
    bench_section("peers")
