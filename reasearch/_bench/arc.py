"""``reasearch bench`` section ``arc``: a trivial candidate over all 120 ARC-AGI-2 evaluation tasks.

Figures, measured side by side in one run (train pairs only, as during optimization):
* ``arc_agi_2/eval-v1`` through the warm pool with one thread per worker (the set runner) vs the
  same 120 evaluations one after another on the same pool;
* the same 120 tasks with a fresh interpreter per task (``python -c`` running the harness, no jail:
  what an evaluator that spawns a process per evaluation pays at the very least);
* trusted scoring alone (``score_solution``) per task.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from reasearch._bench import BenchRow, median, time_calls

__all__ = ["TRIVIAL_CANDIDATE", "run"]

SECTION = "arc"
TRIVIAL_CANDIDATE = "def transform_grid_attempt_1(grid):\n    return grid\n"
_FRESH_SNIPPET = (
    "import json, sys\n"
    "from reasearch.evaluators.arc_agi_2._harness import run_attempts\n"
    "ns = {}\n"
    "exec(sys.argv[1], ns)\n"
    "print(json.dumps(run_attempts(ns['transform_grid_attempt_1'], json.loads(sys.stdin.read()))))\n"
)


def _fresh_process_set(tasks: list, source: str) -> float:
    """Wall seconds to evaluate every task with a new interpreter each (serial, no sandbox)."""
    t0 = time.perf_counter()
    for task in tasks:
        proc = subprocess.run([sys.executable, "-c", _FRESH_SNIPPET, source], input=json.dumps(task.payload(None)),
                              capture_output=True, text=True, check=True)
        res = task.score_solution(json.loads(proc.stdout))
        if not res.ok:
            raise RuntimeError(f"fresh-process reference failed on {task.task_id}: {res.feedback[:200]}")
    return time.perf_counter() - t0


def run(quick: bool) -> list[BenchRow]:
    """Measures the evaluation set end to end; ``quick`` uses fewer repetitions."""
    from reasearch.engine import default_pool
    from reasearch.evaluators.arc_agi_2 import ArcSetTask

    pool = default_pool()
    whole = ArcSetTask("evaluation", progress=False)
    tasks = whole.tasks()
    warm = whole.evaluate(TRIVIAL_CANDIDATE, executor=pool)  # loads data, warms every worker's harness import
    if not warm.ok:
        raise RuntimeError(f"the trivial candidate failed in the benchmark: {warm.status} {warm.feedback[:300]}")
    repeat = 1 if quick else 3
    parallel_s = median(time_calls(lambda: whole.evaluate(TRIVIAL_CANDIDATE, executor=pool), repeat=repeat, warmup=0))
    serial = ArcSetTask("evaluation", workers=1, progress=False)
    serial_s = median(time_calls(lambda: serial.evaluate(TRIVIAL_CANDIDATE, executor=pool), repeat=repeat, warmup=0))
    n = len(tasks)
    rows = [
        BenchRow(SECTION, f"eval-v1 trivial candidate, {n} tasks, {pool.workers} workers ({pool.mode})",
                 parallel_s, "s", reference="same pool, one task at a time", reference_value=serial_s,
                 ratio=serial_s / parallel_s, note=f"{parallel_s / n * 1e3:.1f} ms per task"),
    ]
    subset = tasks[: 20 if quick else n]
    fresh_s = _fresh_process_set(subset, TRIVIAL_CANDIDATE) * n / len(subset)
    rows.append(BenchRow(
        SECTION, f"eval-v1 trivial candidate, {n} tasks, serial on the warm pool", serial_s, "s",
        reference="fresh interpreter per task (no sandbox)", reference_value=fresh_s, ratio=fresh_s / serial_s,
        note="" if len(subset) == n else f"reference extrapolated from {len(subset)} tasks",
    ))
    datas = [(t, t.payload(None)) for t in tasks]
    answers = [(t, {"attempts": [[g, None] for g in p["inputs"]]}) for t, p in datas]

    def score_all() -> None:
        for task, data in answers:
            task.score_solution(data)

    score_s = median(time_calls(score_all, repeat=3 if quick else 10))
    rows.append(BenchRow(SECTION, "trusted scoring (score_solution), per task", score_s / n * 1e6, "us",
                         note=f"mean over the {n} evaluation tasks"))
    return rows
