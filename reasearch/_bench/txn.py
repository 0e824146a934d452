"""``reasearch bench`` section ``txn``: the compiled transaction simulator and ``txn_scheduling/v1``.

Figures, measured side by side in one run:
* ``get_opt_seq_cost`` on a full schedule of each workload: compiled vs the plain-Python model with
  full lock lists (the published simulator's data structure; :func:`reasearch.native.txn.lock_list_makespan`).
* ``peek`` (price one extension of a 50-transaction prefix) vs recomputing the 51-transaction prefix.
* ``evaluate()`` of the seed program end to end (sandbox run + trusted scoring) on the default pool, vs
  the published evaluator's path rebuilt from this package's parts (:data:`PUBLISHED_STYLE`).
"""

from __future__ import annotations

import functools
import random
import subprocess
import sys

from reasearch._bench import BenchRow, median, per_call_us, time_calls
from reasearch.errors import TaskDefinitionError
from reasearch.native.txn import lock_list_makespan

__all__ = ["run", "published_style_total", "PUBLISHED_STYLE"]

SECTION = "txn"
# Published evaluator of the same task, end to end (a peer's figure on this machine class).
PEER_EVALUATE_S = 1.16
# Published Python simulator, per full schedule, workloads 1/2/3 (measured on this machine class).
PUBLISHED_US = (1500.0, 362.0, 239.0)


# The published evaluator's path, rebuilt from this package's parts: a fresh interpreter, the plain-Python
# model, and the published greedy's way of pricing a candidate (recompute the whole prefix every time).
PUBLISHED_STYLE = """\
import random
from reasearch.evaluators.txn_scheduling import load_workloads
from reasearch.native.txn import lock_list_makespan

random.seed(0)
total = 0
for w in load_workloads():
    cost = lambda seq: lock_list_makespan(w.txns, seq)
    first = random.randint(0, w.num_txns - 1)
    seq, remaining = [first], [t for t in range(w.num_txns) if t != first]
    while remaining:
        sample = random.sample(remaining, min(10, len(remaining)))
        best = min(sample, key=lambda t: cost(seq + [t]))
        seq.append(best)
        remaining.remove(best)
    total += cost(seq)
print(total)
"""


def published_style_total() -> int:
    """Runs :data:`PUBLISHED_STYLE` in a fresh interpreter; returns its total makespan (seed 0)."""
    out = subprocess.run([sys.executable, "-c", PUBLISHED_STYLE], capture_output=True, text=True, check=True)
    return int(out.stdout)


def run(quick: bool) -> list[BenchRow]:
    """Measures the simulator and the task; ``quick`` uses fewer repetitions."""
    from reasearch.evaluators.txn_scheduling import TxnSchedulingTask, load_workloads

    rows: list[BenchRow] = []
    rng = random.Random(0)
    inner, repeat = (200, 3) if quick else (2000, 7)
    for w, published in zip(load_workloads(), PUBLISHED_US, strict=True):
        seq = list(range(w.num_txns))
        rng.shuffle(seq)
        native_us = per_call_us(functools.partial(w.get_opt_seq_cost, seq), inner=inner, repeat=repeat)
        python_us = per_call_us(functools.partial(lock_list_makespan, w.txns, seq), inner=max(inner // 100, 3),
                                  repeat=repeat)
        ratio = python_us / native_us
        rows.append(BenchRow(
            SECTION, f"get_opt_seq_cost {w.name} (full schedule)", native_us, "us",
            reference="plain-Python model", reference_value=python_us, ratio=ratio,
            goal=">= 100x", met=ratio >= 100,
            note=f"published simulator: {published:g} us on this machine class ({published / native_us:.0f}x)",
        ))

    w = load_workloads()[0]
    seq = list(range(w.num_txns))
    rng.shuffle(seq)
    state = w.new_state()
    for t in seq[:50]:
        w.extend(state, t)
    nxt = seq[50]
    prefix = seq[:51]
    peek_us = per_call_us(lambda: w.peek(state, nxt), inner=inner * 5, repeat=repeat)
    full_us = per_call_us(lambda: w.get_opt_seq_cost(prefix), inner=inner, repeat=repeat)
    rows.append(BenchRow(
        SECTION, "peek after 50 txns (workload_1)", peek_us, "us",
        reference="get_opt_seq_cost of the 51-prefix", reference_value=full_us, ratio=full_us / peek_us,
    ))

    from reasearch.engine import default_pool

    task = TxnSchedulingTask()
    pool = default_pool()
    source = task.seed_program()
    res = task.evaluate(source, seed=0, executor=pool)  # also warms the worker's harness import
    if not res.ok:
        raise TaskDefinitionError(f"the txn seed program failed in the benchmark: {res.status} {res.feedback[:300]}")
    times = time_calls(lambda: task.evaluate(source, seed=0, executor=pool), repeat=5 if quick else 20, warmup=1)
    e2e_ms = median(times) * 1e3
    ref_times = time_calls(published_style_total, repeat=1 if quick else 3, warmup=0)
    ref_ms = median(ref_times) * 1e3
    rows.append(BenchRow(
        SECTION, "evaluate() seed program, end to end", e2e_ms, "ms",
        reference="published-style path (fresh interpreter, plain Python)", reference_value=ref_ms,
        ratio=ref_ms / e2e_ms, goal="<= 60 ms", met=e2e_ms <= 60.0,
        note=(f"sandbox={res.provenance.sandbox_mode if res.provenance else '?'}; score {res.score:g}; "
              f"the peer's published evaluator: {PEER_EVALUATE_S:g} s"),
    ))
    return rows
