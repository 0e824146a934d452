"""Where the machine's CPU goes while the sandbox serves evaluations back to back: ``perf record -a -g``
over the whole machine, each sample put in a process role (engine, jail, idle, other) and a kind of
work (fork, page faults, exit, system calls, scheduler, user space), as CPU ms per evaluation
(``reasearch._bench.kernel_profile``; the figures are in docs/engine.md).

Usage: ``python scripts/perf_profile.py [N] [WORKLOAD ...]`` (default 3000; workloads ``trivial``, the
bench's trivial candidate, and ``circle_packing``, the circle-packing seed's sandbox run; default both).
2 workers, one caller thread each (the bench's throughput), nsjail. Needs Linux ``perf`` (Debian:
``linux-perf``) and the right to profile every CPU (root, or ``kernel.perf_event_paranoid`` <= -1).
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from reasearch._bench import kernel_profile as kp
from reasearch._bench import sandbox as sb
from reasearch.engine import SandboxConfig, SandboxPool, descendants_of
from reasearch.engine.protocol import RunRequest

ENGINE_COMM = "rs-engine"  # this process's threads (the name is inherited by the threads it starts)
FREQUENCY_HZ = 4999


def _name_this_thread(name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(15, name.encode(), 0, 0, 0) != 0:  # PR_SET_NAME
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NAME)")


def _request(workload: str) -> Any:
    if workload == "trivial":
        return RunRequest(source=sb.TRIVIAL)
    import reasearch

    cp = reasearch.make("circle_packing/n26-v1")
    return cp.build_request(cp.seed_program(), seed=0)


def _jail_comms(pool: SandboxPool) -> frozenset[str]:
    names = set()
    for w in pool._workers:
        if w.proc is None:
            continue
        for pid in [w.proc.pid, *descendants_of(w.proc.pid)]:
            try:
                names.add(Path(f"/proc/{pid}/comm").read_text().strip())
            except OSError:
                pass
    return frozenset(names)


def profile(workload: str, n: int, out_dir: Path) -> None:
    print(f"profiling {workload}: {n} evaluations under perf record ...", file=sys.stderr, flush=True)
    pool = SandboxPool(SandboxConfig(mode="nsjail", workers=2, switch_interval_s=0.0))
    try:
        req = _request(workload)
        sb._fit_workers(pool, req)
        for _ in range(100):
            out = pool.run(req)
        if out.status.name != "OK":
            raise SystemExit(f"{workload}: the evaluation failed in the sandbox: {out.status} {out.error[-300:]}")
        jail = _jail_comms(pool)
        data = out_dir / f"{workload}.data"
        perf = subprocess.Popen(["perf", "record", "-a", "-g", "-F", str(FREQUENCY_HZ), "-o", str(data)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.0)  # perf is recording
        if perf.poll() is not None:
            raise SystemExit(f"perf record failed: {perf.stderr.read().decode()[-500:] if perf.stderr else ''}")

        def work(k: int) -> None:
            for _ in range(k):
                pool.run(req)

        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(2) as ex:
            list(ex.map(work, [n // 2, n - n // 2]))
        elapsed = time.perf_counter() - t0
        perf.send_signal(2)
        perf.wait()
    finally:
        pool.close()
    text = subprocess.run(["perf", "script", "-i", str(data), "-F", "comm,tid,ip,sym,dso"],
                          capture_output=True, text=True, check=True).stdout
    counts = kp.tally(kp.parse_samples(text.splitlines()), ENGINE_COMM, jail)
    # Samples outside the timed window (perf ran ~1 s before it): scale to the window's share.
    recorded = sum(counts.values()) / FREQUENCY_HZ / (os.cpu_count() or 1)
    scale = elapsed / recorded if recorded > elapsed else 1.0
    print(f"\n## {workload}: {n} evaluations in {elapsed:.2f} s ({n / elapsed:.0f}/s), "
          f"load average {os.getloadavg()[0]:.1f}, jail processes named {sorted(jail)}; "
          f"{sum(counts.values())} samples over {recorded:.2f} s (x{scale:.2f} to the timed window)\n")
    print("| role | work | share of samples | CPU ms per evaluation |")
    print("|---|---|---|---|")
    for who, kind, share, ms in kp.table(counts, FREQUENCY_HZ, n):
        print(f"| {who} | {kind} | {share * 100:.1f}% | {ms * scale:.3f} |")


if __name__ == "__main__":
    if shutil.which("perf") is None:
        raise SystemExit("perf is not installed (Debian: apt-get install linux-perf)")
    try:
        count = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    except ValueError:
        raise SystemExit(f"N must be a whole number of evaluations, not {sys.argv[1]!r}") from None
    if count < 2:
        raise SystemExit(f"N must be at least 2 (two caller threads), not {count}")
    workloads = sys.argv[2:] or ["trivial", "circle_packing"]
    for w in workloads:
        if w not in ("trivial", "circle_packing"):
            raise SystemExit(f"unknown workload {w!r} (trivial, circle_packing)")
    _name_this_thread(ENGINE_COMM)
    with tempfile.TemporaryDirectory(prefix="perf-profile-") as tmp:
        for w in workloads:
            profile(w, count, Path(tmp))
