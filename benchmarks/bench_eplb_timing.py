"""EPLB's ``t_alg``: how much of the sandbox transport each way of timing counts, for a 1 ms algorithm.

Run: ``pytest benchmarks/bench_eplb_timing.py -s``. The candidate busy-waits exactly 1 ms per call (on
the wall clock) before returning the library's placement computed at import for a fixed window, so
the algorithm's true time is known: 1 ms. Side by side, for each evaluation:

* ``t_alg`` (what the score uses: the sandbox's clock, bounded by the parent's round trips less each
  call's replayed transport, see ``reasearch.evaluators.eplb._timing``) and its share above 1 ms;
* ``t_call`` (the parent's round trip, what the score used before) and its share above 1 ms;
* the sandbox clock's claims alone, the median allowance, and how many evaluations kept the sandbox
  clock (``t_alg_source == "sandbox clock"``); the others' ``t_alg_source`` says why (floored, round trips).

Goal (issue 17): the transport share of ``t_alg`` under 5% for a 1 ms algorithm. The figures are
printed with the 1-minute load average and stored in ``benchmark.extra_info`` (median over evaluations
of the per-evaluation means).

Two candidates, each 1 ms per call:

* ``cached`` (:data:`SPIN_1MS`) returns the very arrays it computed at its first call, untouched since
  the previous round trip: the harness's narrowing of its answer (after the clock, in the candidate's
  process) then reads them cold from memory, about 0.2 ms more CPU per call than on arrays just
  written (measured in-process: ``compact`` of the seed's answer 253 us cold, 65 us hot). Neither the
  round trip nor the process's CPU can tell that from work hidden after the clock (an answer computed
  lazily on conversion), so any sound rule counts it;
* ``fresh`` (:data:`SPIN_1MS_FRESH`) copies the placement inside its millisecond, as an algorithm writes
  its answer: what the goal is about.
"""

from __future__ import annotations

import statistics

import pytest

from reasearch.evaluators.eplb import EplbTask
from reasearch.evaluators.eplb._timing import CLOCK

SPIN_1MS = """
import time
import numpy as np
from reasearch.native.eplb import rebalance_experts as _lib

_cache = {}

def rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus):
    t = time.perf_counter()
    key = (weight.shape, num_replicas)
    if key not in _cache:  # the placement is computed once, outside the measured millisecond
        _cache[key] = _lib(np.asarray(weight), num_replicas, num_groups, num_nodes, num_gpus)
        t = time.perf_counter()
    while time.perf_counter() - t < 0.001:
        pass
    return _cache[key]
"""


SPIN_1MS_FRESH = SPIN_1MS.replace(
    "    while time.perf_counter() - t < 0.001:\n        pass\n    return _cache[key]\n",
    "    out = tuple(a.copy() for a in _cache[key])  # written in the timed millisecond, as an algorithm does\n"
    "    while time.perf_counter() - t < 0.001:\n        pass\n    return out\n",
)
assert SPIN_1MS_FRESH != SPIN_1MS
CANDIDATES = {"fresh": SPIN_1MS_FRESH, "cached": SPIN_1MS}


@pytest.fixture(scope="module")
def pool():
    from reasearch.engine import default_pool

    return default_pool()


@pytest.mark.parametrize("answer", list(CANDIDATES))
def test_transport_share_of_a_1ms_algorithm(benchmark, pool, answer):
    benchmark.group = "eplb t_alg of a 1 ms algorithm"
    source = CANDIDATES[answer]
    task = EplbTask(num_windows=21)
    assert task.evaluate(source, executor=pool).ok  # warm the worker
    results = []

    def once():
        res = task.evaluate(source, executor=pool)
        assert res.ok, res.feedback
        m = res.metrics
        # the first call computes the cached placement: leave it out
        claims = [t for t in m["t_claimed_per_window_s"][1:] if t is not None]
        results.append((statistics.fmean(m["t_alg_per_window_s"][1:]), statistics.fmean(m["t_call_per_window_s"][1:]),
                        m["t_alg_bounded_windows"], m["t_alg_source"],
                        statistics.fmean(claims) if claims else float("nan"), m["t_transport_slack_s"],
                        m.get("cpu_slack_s")))

    benchmark.pedantic(once, rounds=7, iterations=1)
    t_alg = statistics.median(r[0] for r in results)
    t_call = statistics.median(r[1] for r in results)
    claimed = statistics.median(r[4] for r in results)
    with open("/proc/loadavg") as fh:
        load = float(fh.read().split()[0])
    info = {"t_alg_ms": t_alg * 1e3, "t_alg_transport_share": t_alg / 1e-3 - 1, "t_call_ms": t_call * 1e3,
            "t_call_transport_share": t_call / 1e-3 - 1, "claimed_ms": claimed * 1e3,
            "claimed_transport_share": claimed / 1e-3 - 1, "bounded_windows": sum(r[2] for r in results),
            "calibrated_evaluations": sum(r[3] == CLOCK for r in results), "evaluations": len(results),
            "median_allowance_us": statistics.median(r[5] or 0.0 for r in results) * 1e6,
            "median_cpu_allowance_us": statistics.median(r[6] or 0.0 for r in results) * 1e6,
            "worst_t_alg_share": max(r[0] for r in results) / 1e-3 - 1, "load_1min": load}
    benchmark.extra_info.update(info)
    print(f"\n[{answer} answer] " + ", ".join(f"{k}={v:.4g}" for k, v in info.items()))
    for source in sorted({r[3] for r in results} - {CLOCK}):
        print(f"  {sum(r[3] == source for r in results)} evaluation(s): t_alg_source = {source}")
