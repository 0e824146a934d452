"""Transaction scheduling: compiled simulator vs plain Python, and ``evaluate()`` end to end.

Run: ``pytest benchmarks/bench_txn.py --benchmark-group-by=group``. Each group holds the measured
code and its reference side by side:

* ``get_opt_seq_cost[workload_N]``: compiled ``get_opt_seq_cost`` vs the plain-Python model with full
  lock lists (the published simulator's data structure), on the same shuffled full schedule.
* ``peek``: pricing one extension of a 50-transaction prefix vs recomputing the 51-prefix.
* ``evaluate``: the seed program through ``TxnSchedulingTask.evaluate`` (warm sandbox pool, trusted
  rescoring) vs the published evaluator's path: a fresh interpreter running the same greedy on the
  plain-Python model, pricing each candidate by recomputing the whole prefix.
"""

from __future__ import annotations

import random

import pytest

from reasearch._bench.txn import published_style_total
from reasearch.evaluators.txn_scheduling import TxnSchedulingTask, load_workloads
from reasearch.native.txn import lock_list_makespan

WORKLOADS = {w.name: w for w in load_workloads()}


def _shuffled(n: int, seed: int = 0) -> list[int]:
    seq = list(range(n))
    random.Random(seed).shuffle(seq)
    return seq


@pytest.mark.parametrize("name", sorted(WORKLOADS))
@pytest.mark.parametrize("impl", ["native", "python"])
def test_get_opt_seq_cost(benchmark, name, impl):
    w = WORKLOADS[name]
    seq = _shuffled(w.num_txns)
    benchmark.group = f"get_opt_seq_cost[{name}]"
    expected = lock_list_makespan(w.txns, seq)
    if impl == "native":
        got = benchmark(w.get_opt_seq_cost, seq)
    else:
        got = benchmark(lock_list_makespan, w.txns, seq)
    assert got == expected


@pytest.mark.parametrize("impl", ["peek", "full_recompute"])
def test_peek(benchmark, impl):
    w = WORKLOADS["workload_1"]
    seq = _shuffled(w.num_txns)
    state = w.new_state()
    for t in seq[:50]:
        w.extend(state, t)
    benchmark.group = "peek"
    if impl == "peek":
        got = benchmark(w.peek, state, seq[50])
    else:
        got = benchmark(w.get_opt_seq_cost, seq[:51])
    assert got == w.get_opt_seq_cost(seq[:51])


@pytest.fixture(scope="module")
def pool():
    from reasearch.engine import SandboxConfig, SandboxPool

    with SandboxPool(SandboxConfig(workers=1)) as p:
        yield p


@pytest.mark.parametrize("impl", ["sandboxed_native", "published_style"])
def test_evaluate_seed_program(benchmark, pool, impl):
    task = TxnSchedulingTask()
    source = task.seed_program()
    benchmark.group = "evaluate"
    if impl == "sandboxed_native":
        task.evaluate(source, seed=0, executor=pool)  # warm the worker's harness import
        res = benchmark.pedantic(lambda: task.evaluate(source, seed=0, executor=pool), rounds=20, warmup_rounds=1)
        assert res.score == task.spec.seed_score
        return

    def reference() -> int:
        return published_style_total()

    # Same algorithm and draws as the seed program (peek gives the same numbers as a full recomputation).
    assert benchmark.pedantic(reference, rounds=3, warmup_rounds=0) == task.spec.seed_score
