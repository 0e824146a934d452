"""A busy machine does not turn into failures: the wall limit does not count waiting for a CPU, and
it stays a hard bound (outer_wall_s) that neither sleeping nor self-made contention gets past. Both modes."""

from __future__ import annotations

import concurrent.futures
import os
import textwrap
import time

import pytest

from reasearch.engine import SandboxPool, _pool_schedule, _supervisor
from reasearch.engine._pump import Child
from reasearch.engine.protocol import Limits, RunRequest, Status
from reasearch.engine.testing import CpuBurner
from reasearch.engine.waits import WaitNotice, add_wait_reporter
from tests.engine.conftest import stray_processes

# Candidate and burners share one CPU: whatever else runs, the candidate gets at most a quarter of it.
ONE_CPU = min(os.sched_getaffinity(0))

HONEST = textwrap.dedent("""
    import os, time

    def run(cpu, work_s):
        os.sched_setaffinity(0, {cpu})
        t0 = time.process_time()
        while time.process_time() - t0 < work_s:
            pass
        return 1
""")


def test_waiting_for_a_cpu_is_not_a_timeout(pool: SandboxPool) -> None:
    # 0.3 s of CPU at a quarter of a CPU takes >= 1.2 s of wall time: past the 0.6 s wall limit when
    # waiting counts (it did: TIMEOUT), well within it when only running and sleeping count.
    req = RunRequest(source=HONEST, payload={"cpu": ONE_CPU, "work_s": 0.3}, limits=Limits(wall_s=0.6, cpu_s=3.0))
    with CpuBurner(3, cpus={ONE_CPU}):
        out = pool.run(req)
    assert out.status is Status.OK, out.error
    assert out.value == 1
    assert out.cpu_s < 3.0


def test_sleeping_is_still_stopped_at_the_wall_limit(pool: SandboxPool) -> None:
    sleeper = "import time\n\ndef run():\n    time.sleep(60)\n"
    lim = Limits(wall_s=0.5, cpu_s=30.0)
    with CpuBurner(2):
        out = pool.run(RunRequest(source=sleeper, limits=lim))
    assert out.status is Status.TIMEOUT
    assert "wall-time limit of 0.5 s" in out.error
    assert out.wall_s < lim.outer_wall_s()  # a sleeper waits for no CPU: no extension past its limit
    assert stray_processes(pool) == []


def test_self_made_contention_is_stopped(pool: SandboxPool) -> None:
    # The attacker's try: keep its own main thread waiting in a run queue (busy children on its CPU)
    # so that the deadline keeps moving. It is stopped at its wall limit with its waits added (here
    # about 4x, how much depends on the machine's load), never later than the outer bound (the test
    # below holds that bound whatever the waits), long before its 60 s CPU limit.
    hog = textwrap.dedent("""
        import os

        def run(cpu):
            os.sched_setaffinity(0, {cpu})
            for _ in range(7):
                if os.fork() == 0:
                    while True:
                        pass
            while True:
                pass
    """)
    lim = Limits(wall_s=0.25, cpu_s=60.0)
    out = pool.run(RunRequest(source=hog, payload={"cpu": ONE_CPU}, limits=lim))
    assert out.status is Status.TIMEOUT
    assert "wall-time limit" in out.error
    assert out.wall_s < lim.outer_wall_s() + 5.0  # the outer bound, not the 60 s CPU limit
    assert stray_processes(pool) == []


def test_a_child_that_always_waits_stops_at_the_outer_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    # However long the child claims to wait in a run queue, the deadline never passes outer_wall_s.
    lim = Limits(wall_s=0.02)
    ch = Child(pid=os.getpid(), pidfd=-1, result_r=None, calls_w=None, out_r=-1, err_r=-1)
    ch.t0 = 100.0
    deadlines: list[float] = []

    def fake_pump(child: Child, deadline: float, want_frame: bool, spin_until: float = 0.0) -> str:
        deadlines.append(deadline - child.t0)  # no real waiting: pump_limited reads no clock itself
        assert len(deadlines) < 1000, "the deadline kept moving"
        return "deadline"

    monkeypatch.setattr(_supervisor, "pump", fake_pump)
    # It claims to have waited for a CPU ten times as long as it has existed.
    monkeypatch.setattr(_supervisor._procs, "run_delay_s", lambda pid: 10.0 * deadlines[-1])
    limits = {"wall_s": lim.wall_s, "outer_wall_s": lim.outer_wall_s()}
    assert _supervisor.Supervisor.pump_limited(ch, limits, want_frame=True) == "deadline"
    assert deadlines[0] == pytest.approx(lim.wall_s)
    assert max(deadlines) == pytest.approx(lim.outer_wall_s())


@pytest.mark.parametrize(("ran_share", "expect"), [(0.0, "frame"), (1.0, "deadline")])
def test_a_wait_not_yet_booked_counts_only_when_it_did_not_run(monkeypatch: pytest.MonkeyPatch, ran_share: float,
                                                               expect: str) -> None:
    # The kernel books a run-queue wait when it ends: a child queued right now shows no new run_delay.
    # Runnable and idle since its hand-over, it is waiting (its frame comes later); runnable and busy
    # all along, its wall limit is reached.
    ch = Child(pid=os.getpid(), pidfd=-1, result_r=None, calls_w=None, out_r=-1, err_r=-1)
    ch.t0 = time.monotonic() - 1.0
    calls: list[float] = []

    def fake_pump(child: Child, deadline: float, want_frame: bool, spin_until: float = 0.0) -> str:
        calls.append(deadline)
        return "deadline" if len(calls) == 1 else "frame"

    monkeypatch.setattr(_supervisor, "pump", fake_pump)
    monkeypatch.setattr(_supervisor._procs, "run_delay_s", lambda pid: 0.0)
    monkeypatch.setattr(_supervisor._procs, "runnable", lambda pid: True)
    monkeypatch.setattr(_supervisor._procs, "process_cpu_ns", lambda pid: int(ran_share * 1e9))
    limits = {"wall_s": 0.5, "outer_wall_s": 4.0}
    assert _supervisor.Supervisor.pump_limited(ch, limits, want_frame=True) == expect


def test_a_request_beyond_the_free_workers_waits_and_says_so(pool: SandboxPool,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # Back-pressure: with every worker busy the next request waits for one (no clock of its runs
    # meanwhile), is reported as a wait, and then runs normally.
    monkeypatch.setattr(_pool_schedule, "BUSY_NOTICE_AFTER_S", 0.2)
    notices: list[WaitNotice] = []
    remove = add_wait_reporter(notices.append)
    sleeper = RunRequest(source="import time\n\ndef run():\n    time.sleep(1.5)\n    return 2\n",
                         limits=Limits(wall_s=10.0))
    try:
        with concurrent.futures.ThreadPoolExecutor(pool.workers) as ex:
            busy = [ex.submit(pool.run, sleeper) for _ in range(pool.workers)]
            deadline = time.monotonic() + 30.0
            while pool._schedule._idle and time.monotonic() < deadline:  # every worker taken
                time.sleep(0.01)
            out = pool.run(RunRequest(source="def run():\n    return 1\n", limits=Limits(wall_s=0.5)))
            assert [f.result().value for f in busy] == [2] * pool.workers
    finally:
        remove()
    assert out.status is Status.OK and out.value == 1, out.error
    assert any("a free sandbox worker" in n.what for n in notices), notices


def test_the_burner_is_always_cleaned_up() -> None:
    with pytest.raises(KeyboardInterrupt):
        with CpuBurner(2) as burner:
            pids = [p.pid for p in burner.procs]
            assert len(pids) == 2 and all(p.poll() is None for p in burner.procs)
            raise KeyboardInterrupt  # Ctrl-C in the middle of a measurement
    for pid in pids:  # killed and reaped: the pid no longer names a process of ours
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if os.path.exists(f"/proc/{pid}"):  # the pid reused by another process, never a burner
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                assert b"os.getppid() == parent" not in fh.read()
