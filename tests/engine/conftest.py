"""Sandbox pools for the engine tests: one per mode, shared by a test module, closed at its end.

nsjail tests run wherever nsjail works (this project's machines). On a machine where it cannot run
(e.g. a CI image that forbids user namespaces) they are skipped with the probe's reason, unless
``REASEARCH_REQUIRE_NSJAIL=1`` is set, which turns that into a failure.
"""

from __future__ import annotations

import functools
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reasearch.engine import SandboxConfig, SandboxPool
from reasearch.engine._procs import descendants_of, process_table

MODES = ("nsjail", "process")


@functools.cache
def _nsjail_problem() -> str | None:
    from reasearch.engine import detect_isolation

    report = detect_isolation()
    return None if report.nsjail_ok else "; ".join(report.problems) or "nsjail probe failed"


def needs_mode(mode: str) -> None:
    """Skips (or, with REASEARCH_REQUIRE_NSJAIL=1, fails) a test of nsjail mode where nsjail cannot run."""
    if mode != "nsjail":
        return
    problem = _nsjail_problem()
    if problem is None:
        return
    if os.environ.get("REASEARCH_REQUIRE_NSJAIL") == "1":
        pytest.fail(f"nsjail is required (REASEARCH_REQUIRE_NSJAIL=1) but unavailable: {problem}")
    pytest.skip(f"nsjail mode does not apply on this machine: {problem}")


@pytest.fixture(scope="module", params=MODES)
def pool(request: pytest.FixtureRequest) -> Iterator[SandboxPool]:
    """A small warm pool in each mode (light preload keeps start-up cheap on 2 cores)."""
    needs_mode(request.param)
    p = SandboxPool(SandboxConfig(mode=request.param, workers=2, preload=("numpy",)))
    try:
        yield p
    finally:
        p.close()


def stray_processes(pool: SandboxPool) -> list[int]:
    """Processes (zombies included) left below the pool's workers, or running as a child uid."""
    # Ping first: a worker answers only after it finished cleaning up after its last request (it
    # replies to a request before reaping, off the critical path) and forked its next child.
    # The zygote (engine code that forks each child) is not a stray either.
    idle = {pid for st in pool.ping() for pid in (st["idle_child"], st.get("zygote"))}
    table = process_table()
    workers: set[int] = set()
    for w in pool._workers:
        if w.proc is not None:
            workers.add(w.proc.pid)
            if pool.mode == "nsjail":  # the jail's pid 1 is the worker, a child of nsjail
                workers.update(p for p, row in table.items() if row[0] == w.proc.pid)
    below: set[int] = set()
    for pid in workers:
        below.update(descendants_of(pid, table))
    below -= workers
    uids = {pool._launcher.child_uid(i) for i in range(pool.workers)} - {None}
    below.update(p for p, row in table.items() if row[2] in uids)
    return sorted(p for p in below if _innermost_pid(p) not in idle)


def _innermost_pid(pid: int) -> int:
    """The pid as seen inside its own PID namespace (a jail's), from /proc/<pid>/status NSpid."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except OSError:
        pass
    return pid


def kill_minus_9_by_marker(marker: str, timeout_s: float = 20.0) -> bool:
    """An operator's ``kill -9`` from the host of the jailed process carrying ``marker`` in its argv (not nsjail
    itself), once it runs; False when none appeared within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for proc in Path("/proc").iterdir():
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if marker.encode() in argv and b"nsjail" not in argv[0]:
                os.kill(int(proc.name), signal.SIGKILL)
                return True
        time.sleep(0.02)
    return False
