"""Benchmark fixtures (run with ``pytest benchmarks/``).

``bench_section``: the entry point of the files that measure a ``reasearch bench`` section. The set-up,
timing loop and statistics are the section's own (``reasearch/_bench/``): the file calls them, prints
the section's table (``-s`` shows it) and checks the rows are well formed. ``--bench-quick`` (or
``--benchmark-disable``, a smoke run) takes the fewer repetitions of ``reasearch bench --quick``.
The other files (adapters, fleets, MCP, ...) time figures no section has, with pytest-benchmark.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from rich.console import Console

from reasearch._bench import BenchRow, run_section, table


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Benchmarks run in one process (pyproject's ``-n auto`` gives 0 workers here): a timing taken beside a
    second worker is not a figure, pytest-benchmark turns itself off under xdist, and ``-s`` shows the tables."""
    return 0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--bench-quick", action="store_true",
                     help="sections of `reasearch bench` with its --quick repetitions")


def check_rows(name: str, rows: list[BenchRow]) -> None:
    """Each row of section ``name`` is its own, named, with a unit and a finite value (or NaN with a
    note that says why it was not measured)."""
    assert rows, f"section {name} measured nothing"
    for r in rows:
        assert r.section == name and r.name and r.unit, r
        assert math.isfinite(r.value) or (math.isnan(r.value) and r.note), r


@pytest.fixture
def bench_section(request: pytest.FixtureRequest) -> Callable[[str], list[BenchRow]]:
    """Measures a section as ``reasearch bench --section NAME`` does, prints its table, returns its rows."""
    quick = bool(request.config.getoption("--bench-quick") or request.config.getoption("benchmark_disable", False))

    def measure(name: str) -> list[BenchRow]:
        rows = run_section(name, quick=quick)
        Console(width=180).print(table(rows))
        check_rows(name, rows)
        for r in rows:
            request.node.user_properties.append((r.name, f"{r.value:.4g} {r.unit}"))
        return rows

    return measure

