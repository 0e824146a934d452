"""EPLB: the compiled algorithm and the seed program vs the loop twin, and ``evaluate()`` end to end.

Run: ``pytest benchmarks/bench_eplb.py --benchmark-group-by=group``. Each group holds the measured
code and its reference side by side:

* ``rebalance[L=58,E=256]``: the compiled library ``rebalance_experts``, the seed program (NumPy
  around the compiled steps) and the plain-Python loop twin, on one synthetic window; each result is
  checked against the twin's. (DeepSeek's published torch code took 416 ms here.) The process uses
  the allocator settings of the EPLB sandbox (``reasearch.native.alloc``).
* ``evaluate``: the seed program through ``EplbTask.evaluate`` (warm sandbox pool, one session, 10
  timed rebalances, trusted scoring) vs the same 10 rebalances and the same scoring in-process (what
  the sandbox and the per-call timing cost).
"""

from __future__ import annotations

import types

import numpy as np
import pytest

from reasearch.evaluators.eplb import EplbTask, SyntheticTrace
from reasearch.native.alloc import keep_freed_memory
from reasearch.native.eplb import rebalance_experts, rebalance_experts_reference

keep_freed_memory()  # the allocator settings the EPLB sandbox runs candidates with (see reasearch.native.alloc)

CONFIG = (288, 8, 4, 32)
WEIGHT = SyntheticTrace().windows(1)[0]
EXPECTED = rebalance_experts_reference(WEIGHT, *CONFIG)


def _seed_function():
    module = types.ModuleType("eplb_seed")
    exec(compile(EplbTask().seed_program(), "seed.py", "exec"), module.__dict__)  # noqa: S102 (our own seed)
    return module.rebalance_experts


@pytest.mark.parametrize("impl", ["library", "seed", "loop_twin"])
def test_rebalance(benchmark, impl):
    benchmark.group = "rebalance[L=58,E=256]"
    fn = {"library": rebalance_experts, "seed": _seed_function(), "loop_twin": rebalance_experts_reference}[impl]
    if impl == "loop_twin":
        out = benchmark.pedantic(fn, args=(WEIGHT, *CONFIG), rounds=5, iterations=1)
    else:
        out = benchmark(fn, WEIGHT, *CONFIG)
    for got, want in zip(out, EXPECTED, strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.fixture(scope="module")
def pool():
    from reasearch.engine import default_pool

    return default_pool()


@pytest.mark.parametrize("impl", ["sandbox", "in_process"])
def test_evaluate(benchmark, impl, pool):
    benchmark.group = "evaluate"
    task = EplbTask()
    source = task.seed_program()
    if impl == "sandbox":
        assert task.evaluate(source, executor=pool).ok  # warm the worker
        res = benchmark.pedantic(task.evaluate, args=(source,), kwargs={"executor": pool}, rounds=10, iterations=1)
        assert res.ok
        return
    windows, _ = task.trace_windows()
    seed_fn = _seed_function()

    def in_process():
        answers = []
        for w in windows[:-1]:
            phy2log, log2phy, logcnt = seed_fn(w, *CONFIG)
            answers.append({"phy2log": phy2log, "log2phy": log2phy, "logcnt": logcnt})
        return task.score_solution({"placements": answers, "t_alg_s": [0.002] * len(answers)})

    assert benchmark.pedantic(in_process, rounds=10, iterations=1).ok
