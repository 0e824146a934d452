"""Controller overhead per evaluation of each baseline method against the agent's harness (no model latency).

Run: ``pytest benchmarks/bench_methods.py --benchmark-group-by=group``, or the same figures side by
side with their ratio in one run: ``reasearch bench --section methods``. Group ``controller``: a
30-evaluation ToyTask run on the real SQLite store with evaluations on a StaticRunner (no sandbox) and
an instant model (the methods' MutatingModel; the agent's scripted model calling ``evaluate`` once a
turn). The figure per evaluation is the round time divided by the evaluations recorded.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from reasearch._bench.methods import agent_per_evaluation, method_per_evaluation

EVALUATIONS = 30


@pytest.mark.parametrize("optimizer", ["agent", "best-of-n", "evolve", "reflect"])
def test_controller_overhead(benchmark, optimizer: str, tmp_path: Path) -> None:
    benchmark.group = "controller"
    rounds = itertools.count()
    per_eval: list[float] = []

    def one_run() -> None:
        d = tmp_path / f"r{next(rounds)}"
        d.mkdir()
        if optimizer == "agent":
            per_eval.append(agent_per_evaluation(EVALUATIONS, d))
        else:
            per_eval.append(method_per_evaluation(optimizer, EVALUATIONS, d))

    benchmark.pedantic(one_run, rounds=3, iterations=1, warmup_rounds=1)
    assert per_eval and all(s > 0 for s in per_eval)
    benchmark.extra_info["ms_per_evaluation"] = min(per_eval) * 1e3
