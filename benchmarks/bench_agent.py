"""Agent harness overhead per turn (scripted model, evaluation time excluded), side by side.

Run: ``pytest benchmarks/bench_agent.py --benchmark-group-by=group``. Group ``agent_turn``: one
40-turn scripted run (each turn: snapshot, journaled and debited reply, one cheap tool) recorded in
the real SQLite store, and the same run on the in-memory recorder (reference: the store's share).
Goal: <= 50 ms per turn. The figure per turn is the round time divided by 40.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from reasearch._bench.agent import GOAL_MS, harness_turns

TURNS = 40


@pytest.mark.parametrize("store", ["sqlite", "memory"])
def test_agent_turn(benchmark, store: str, tmp_path: Path) -> None:
    benchmark.group = "agent_turn"
    rounds = itertools.count()
    turns: list[list[float]] = []

    def one_run() -> None:
        d = tmp_path / f"r{next(rounds)}"
        d.mkdir()
        turns.append(harness_turns(TURNS, store=store, workdir=d))

    benchmark.pedantic(one_run, rounds=5, iterations=1, warmup_rounds=1)
    assert all(len(t) == TURNS - 1 for t in turns)
    if benchmark.stats is not None:  # None under --benchmark-disable
        per_turn_ms = benchmark.stats.stats.median / TURNS * 1e3
        benchmark.extra_info["ms_per_turn"] = per_turn_ms
        benchmark.extra_info["goal_ms_per_turn"] = GOAL_MS
        benchmark.extra_info["goal_met"] = per_turn_ms <= GOAL_MS
