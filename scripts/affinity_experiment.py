"""Trivial evaluations with each worker's jail pinned to a CPU, against unpinned (docs/engine.md: tried and
not adopted). Prints p50/p99 of N evaluations one at a time and the bench's throughput, per mode:

* ``none``: as the engine runs (no affinity set);
* ``jail``: each worker, its zygote and its children on CPU ``index % 2`` (the engine's threads free);
* ``all1``: the worker processes and this process all on CPU 0.

Usage: ``python scripts/affinity_experiment.py [N] [MODE ...]`` (default 1000, every mode), on a quiet
machine with nsjail. The affinity is set from outside on the running processes (children forked later
inherit it from the zygote), so the engine itself is unchanged.
"""

from __future__ import annotations

import os
import sys
import time

from reasearch._bench import sandbox as sb
from reasearch.engine import SandboxConfig, SandboxPool, descendants_of
from reasearch.engine.protocol import RunRequest


def one(n: int, mode: str) -> str:
    pool = SandboxPool(SandboxConfig(mode="nsjail", workers=2, switch_interval_s=0.0))
    try:
        req = RunRequest(source=sb.TRIVIAL)
        sb._fit_workers(pool, req)
        if mode in ("jail", "all1"):
            for w in pool._workers:
                assert w.proc is not None
                cpus = {w.index % 2} if mode == "jail" else {0}
                for pid in [w.proc.pid, *descendants_of(w.proc.pid)]:
                    try:
                        os.sched_setaffinity(pid, cpus)
                    except OSError:  # exited meanwhile
                        pass
            for _ in range(20):  # children forked before the pin are used up
                pool.run(req)
        if mode == "all1":
            os.sched_setaffinity(0, {0})
        for _ in range(50):
            pool.run(req)
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            pool.run(req)
            ts.append(time.perf_counter() - t0)
        ts.sort()
        rate = sb._throughput(pool, req, 1000)
        return (f"{mode:5s} p50 {ts[n // 2] * 1e3:.3f} ms  p99 {ts[int(n * 0.99)] * 1e3:.3f} ms  "
                f"{rate:.0f} evaluations/s  load average {os.getloadavg()[0]:.1f}")
    finally:
        pool.close()


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    for m in sys.argv[2:] or ["none", "jail", "all1"]:
        if m not in ("none", "jail", "all1"):
            raise SystemExit(f"unknown mode {m!r}: none, jail or all1")
        print(one(count, m), flush=True)
