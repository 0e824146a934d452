"""``reasearch bench`` section ``load``: the warm pool with a CPU burner beside it (issue 43, item 4).

A machine a user has is never idle. At each load (0x, 1x and 2x the cores: that many busy processes,
started and always stopped here, at this process's niceness, each in its own session as a user's job
from another terminal; :class:`reasearch.engine.testing.CpuBurner`), one caller thread per worker runs:

* trivial evaluations (``def run(): return 1``): evaluations/s, p50 and p99 of the wall time each
  caller saw, and how many did not come back ``OK`` with 1;
* an honest CPU-bound candidate (it spins :data:`HONEST_CPU_S` of its own CPU time) under a wall
  limit of :data:`HONEST_WALL_S`, which it never reaches on an idle core: how many ended in anything
  but ``OK`` (TIMEOUT when waiting for a CPU counts as running).

Goal: no failures at any load (the engine extends an evaluation's wall limit by the time it waited in
a run queue, less what the candidate's own other threads and processes ran meanwhile, up to
``Limits.outer_wall_s()``; a request beyond the free workers waits for one).
Trust boundary: the project's own code; the candidates are the two fixed ones above, run in the sandbox.
"""

from __future__ import annotations

import concurrent.futures
import os
import time
from collections.abc import Callable
from typing import Any

from reasearch._bench import BenchRow, median

__all__ = ["HONEST", "HONEST_CPU_S", "HONEST_WALL_S", "LOADS", "p99", "run"]

SECTION = "load"
LOADS = (0, 1, 2)  # burners per core
TRIVIAL = "def run():\n    return 1\n"
HONEST_CPU_S = 0.03
HONEST_WALL_S = 0.1
HONEST = ("import time\n\ndef run(work_s):\n    t0 = time.process_time()\n"
          "    while time.process_time() - t0 < work_s:\n        pass\n    return 1\n")


def p99(xs: list[float]) -> float:
    """The 99th percentile (nearest rank) of ``xs``."""
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, -(-99 * len(s) // 100) - 1))]


def _burst(pool: Any, req: Any, n: int, ok: Callable[[Any], bool]) -> tuple[float, list[float], int, dict[str, int]]:
    """(evaluations/s, wall seconds of each, failures, failure count by status) of ``n`` requests
    from one caller thread per worker."""
    def one(_: int) -> tuple[float, Any]:
        t0 = time.perf_counter()
        out = pool.run(req)
        return time.perf_counter() - t0, out

    with concurrent.futures.ThreadPoolExecutor(pool.workers) as ex:
        list(ex.map(one, range(pool.workers * 4)))  # warm every worker under this load
        t0 = time.perf_counter()
        done = list(ex.map(one, range(n)))
        rate = n / (time.perf_counter() - t0)
    bad: dict[str, int] = {}
    first = ""
    for _, out in done:
        if not ok(out):
            bad[str(out.status)] = bad.get(str(out.status), 0) + 1
            first = first or f"{out.status}: {out.error[:160]}"
    if first:
        bad[f"first: {first}"] = 0
    return rate, [t for t, _ in done], sum(bad.values()), bad


def run(quick: bool) -> list[BenchRow]:
    """Measures the figures above; ``quick`` uses fewer evaluations."""
    from reasearch.engine import SandboxConfig, SandboxPool, detect_isolation
    from reasearch.engine.protocol import Limits, RunRequest, Status
    from reasearch.engine.testing import CpuBurner

    cores = len(os.sched_getaffinity(0))
    n, n_honest = (300, 40) if quick else (2000, 200)
    mode = "nsjail" if detect_isolation().nsjail_ok else "process"
    trivial = RunRequest(source=TRIVIAL)
    honest = RunRequest(source=HONEST, payload={"work_s": HONEST_CPU_S},
                        limits=Limits(wall_s=HONEST_WALL_S, cpu_s=1.0))
    rows: list[BenchRow] = []

    def ok(out: Any) -> bool:
        return out.status is Status.OK and out.value == 1

    pool = SandboxPool(SandboxConfig(mode=mode, workers=cores, switch_interval_s=0.0))
    try:
        pool.run(trivial)
        for k in LOADS:
            with CpuBurner(k * cores):
                time.sleep(0.2)  # the burners are running before anything is timed
                rate, ts, failed, by = _burst(pool, trivial, n, ok)
                h_rate, h_ts, h_failed, h_by = _burst(pool, honest, n_honest, ok)
            tag = f"load {k}x ({k * cores} burners on {cores} cores; {mode}, {pool.workers} workers)"
            rows.append(BenchRow(SECTION, f"trivial evaluations/s, {tag}", rate, "evals/s",
                                 note=f"{n} evaluations, one caller thread per worker"))
            rows.append(BenchRow(SECTION, f"trivial evaluation p50, {tag}", median(ts) * 1e3, "ms",
                                 note=f"p99 {p99(ts) * 1e3:.2f} ms (wall time each caller saw)"))
            rows.append(BenchRow(SECTION, f"trivial evaluation p99, {tag}", p99(ts) * 1e3, "ms"))
            rows.append(BenchRow(SECTION, f"trivial evaluations failed, {tag}", failed, "evals",
                                 goal="0", met=failed == 0, note=f"of {n}; {by or 'none'}"))
            rows.append(BenchRow(SECTION, f"honest {HONEST_CPU_S * 1e3:.0f} ms-CPU candidate failed "
                                          f"(wall limit {HONEST_WALL_S * 1e3:.0f} ms), {tag}", h_failed, "evals",
                                 goal="0", met=h_failed == 0,
                                 note=f"of {n_honest}; {h_by or 'none'}; p50 {median(h_ts) * 1e3:.1f} ms, "
                                      f"p99 {p99(h_ts) * 1e3:.1f} ms, {h_rate:.0f} evals/s"))
    finally:
        pool.close()
    return rows
