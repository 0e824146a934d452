"""Profile of one trivial evaluation: the stamps breakdown and CPU per evaluation of N evaluations one
at a time (nsjail, bare image, 2 workers), with the machine's load meanwhile, as markdown table rows.

Usage: ``python scripts/profile_trivial_eval.py [N]`` (default 300). The same code as the breakdown
rows of ``reasearch bench --section sandbox`` (``reasearch._bench.sandbox``).
"""

from __future__ import annotations

import os
import sys
import time

from reasearch._bench import cpu_ticks
from reasearch._bench import sandbox as sb
from reasearch.engine import SandboxConfig, SandboxPool
from reasearch.engine.protocol import RunRequest


def main(n: int) -> None:
    pool = SandboxPool(SandboxConfig(mode="nsjail", workers=2, switch_interval_s=0.0))
    try:
        req = RunRequest(source=sb.TRIVIAL)
        sb._fit_workers(pool, req)
        before = cpu_ticks()
        t0 = time.perf_counter()
        rows = sb._breakdown_rows(pool, n)
        load = sb.machine_load(before, cpu_ticks(), n + 10)
        busy = "unknown" if load is None else f"{load[1] * 100:.0f}% busy, {load[0]:.2f} ms machine CPU per evaluation"
        print(f"# {n} stamped evaluations in {time.perf_counter() - t0:.1f} s; machine {busy}; "
              f"load average {os.getloadavg()[0]:.1f}")
        for r in rows:
            print(f"| {r.name} | {r.value:.3f} {r.unit} | {r.note} |")
    finally:
        pool.close()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
