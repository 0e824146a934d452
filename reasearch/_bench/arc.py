"""``reasearch bench`` section ``arc``: a trivial candidate over all 120 ARC-AGI-2 evaluation tasks.

Figures, measured side by side in one run (train pairs only, as during optimization):
* ``arc_agi_2/eval-v1`` through the warm pool with one thread per worker (the set runner) vs the
  same 120 evaluations one after another on the same pool;
* the same 120 tasks with a fresh interpreter per task (``python -c`` running the harness, no jail:
  what an evaluator that spawns a process per evaluation pays at the very least);
* trusted scoring alone (``score_solution``) per task;
* a generated DSL-sized candidate (~36 KB: a few hundred grid primitives and a solver built from them,
  the size of real hand-written ARC solvers): the same 120 tasks one at a time through the pool vs
  compiling and running the file in this process for each task (no sandbox), and the trusted side's
  CPU per evaluation of a never-seen 36 KB candidate beside a never-seen 1 KB one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from reasearch._bench import BenchRow, median, time_calls
from reasearch.engine.protocol import SandboxRunner

__all__ = ["TRIVIAL_CANDIDATE", "dsl_candidate", "run"]

SECTION = "arc"
TRIVIAL_CANDIDATE = "def transform_grid_attempt_1(grid):\n    return grid\n"
_FRESH_SNIPPET = (
    "import json, sys\n"
    "from reasearch.evaluators.arc_agi_2._harness import run_attempts\n"
    "ns = {}\n"
    "exec(sys.argv[1], ns)\n"
    "print(json.dumps(run_attempts(ns['transform_grid_attempt_1'], json.loads(sys.stdin.read()))))\n"
)


_PRIMITIVES = (
    "def {n}(grid):\n    return tuple(tuple(row) for row in grid[::-1])\n",
    "def {n}(grid):\n    return tuple(tuple(row[::-1]) for row in grid)\n",
    "def {n}(grid):\n    return tuple(zip(*grid))\n",
    "def {n}(grid, value={k}):\n    return tuple(tuple(value if c == {k} else c for c in row) for row in grid)\n",
    "def {n}(grid):\n    counts = {{}}\n    for row in grid:\n        for c in row:\n"
    "            counts[c] = counts.get(c, 0) + 1\n    return max(counts, key=counts.get) if counts else 0\n",
    "def {n}(grid, i={k}):\n    h = len(grid)\n    return tuple(grid[(r + i) % h] for r in range(h)) if h else grid\n",
    "def {n}(grid):\n    return frozenset((i, j) for i, row in enumerate(grid) for j, c in enumerate(row) if c)\n",
    "def {n}(a, b):\n    return tuple(tuple(x if x else y for x, y in zip(ra, rb)) for ra, rb in zip(a, b))\n",
)


def dsl_candidate(size: int = 36_000, tag: str = "") -> str:
    """A solver the size of a real hand-written one: grid primitives (a DSL) and attempts built on
    them. ``tag`` makes a distinct text (a never-seen candidate) of the same size and behaviour."""
    parts, i = [f"# generated DSL-sized ARC candidate {tag}\n"
                "from typing import Any, Callable, FrozenSet, Tuple\nimport itertools\nimport collections\n"], 0
    while sum(map(len, parts)) < size - 400:
        parts.append(_PRIMITIVES[i % len(_PRIMITIVES)].format(n=f"p{i}", k=i % 10))
        i += 1
    parts.append("def transform_grid_attempt_1(grid):\n    g = p2(p2(grid))\n    g = p1(p1(g))\n"
                 "    return [list(row) for row in p3(g, 0)]\n\n"
                 "def transform_grid_attempt_2(grid):\n    return [list(row) for row in p0(p0(grid))]\n")
    return "".join(parts)


def _in_process_set(tasks: list, source: str) -> float:
    """Wall seconds to compile and run ``source`` in this process for every task (no sandbox)."""
    from reasearch.evaluators.arc_agi_2 import run_attempts

    payloads = [(t, t.payload(None)) for t in tasks]
    t0 = time.perf_counter()
    for task, payload in payloads:
        ns: dict = {"__name__": "candidate"}
        exec(compile(source, "candidate.py", "exec", dont_inherit=True), ns)
        res = task.score_solution(run_attempts(ns["transform_grid_attempt_1"], payload))
        if res.status.value not in ("OK", "INVALID"):
            raise RuntimeError(f"in-process reference failed on {task.task_id}: {res.feedback[:200]}")
    return time.perf_counter() - t0


def _trusted_cpu(task: object, pool: object, size: int, n: int) -> float:
    """Median CPU seconds of this thread (the trusted side) per evaluation of a never-seen candidate."""
    cpus = []
    for i in range(n):
        src = dsl_candidate(size, tag=f"{size}-{i}-{time.monotonic_ns()}")
        t0 = time.thread_time()
        res = task.evaluate(src, executor=pool)  # type: ignore[attr-defined]
        cpus.append(time.thread_time() - t0)
        if res.status.value not in ("OK", "INVALID"):
            raise RuntimeError(f"DSL candidate failed: {res.status} {res.feedback[:200]}")
    return median(cpus)


def _dsl_rows(quick: bool, pool: SandboxRunner, tasks: list) -> list[BenchRow]:
    from reasearch.evaluators.arc_agi_2 import ArcSetTask

    source = dsl_candidate()
    serial = ArcSetTask("evaluation", workers=1, progress=False)
    serial.evaluate(source, executor=pool)  # every worker compiles it once, harness imported
    repeat = 1 if quick else 3
    pool_s = median(time_calls(lambda: serial.evaluate(source, executor=pool), repeat=repeat, warmup=0))
    local_s = median(time_calls(lambda: _in_process_set(tasks, source), repeat=repeat, warmup=0))
    n = len(tasks)
    rows = [BenchRow(
        SECTION, f"{len(source) // 1000} KB DSL candidate, {n} tasks one at a time through the pool", n / pool_s,
        "evals/s", reference="compile + run in this process per task (no sandbox)", reference_value=n / local_s,
        ratio=local_s / pool_s, goal=">= 0.9x", met=local_s / pool_s >= 0.9,
        note=f"{pool_s / n * 1e3:.1f} ms vs {local_s / n * 1e3:.1f} ms per task; the set's one program")]
    one = tasks[0]
    runs = 5 if quick else 15
    small = _trusted_cpu(one, pool, 1_000, runs)
    large = _trusted_cpu(one, pool, 36_000, runs)
    rows.append(BenchRow(
        SECTION, "trusted-side CPU per evaluation, new 36 KB candidate minus new 1 KB one", (large - small) * 1e3,
        "ms", goal="<= 1 ms", met=(large - small) * 1e3 <= 1.0,
        note=f"{large * 1e3:.2f} ms vs {small * 1e3:.2f} ms (median of {runs} never-seen texts each, "
             "this thread's CPU around ArcTask.evaluate)"))
    return rows


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
    rows.extend(_dsl_rows(quick, pool, tasks))
    return rows
