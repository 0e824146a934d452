"""A busy machine does not turn into failures: the wall limit does not count waiting for a CPU that
other jobs took; a wait the candidate makes itself (its own threads and processes) counts, and the
extension stays under a hard bound (outer_wall_s) that neither sleeping nor contention gets past. Both modes."""

from __future__ import annotations

import concurrent.futures
import os
import textwrap
import time

import pytest

from reasearch.engine import SandboxConfig, SandboxPool, _pool_schedule, _supervisor
from reasearch.engine._pump import Child
from reasearch.engine.protocol import Limits, RunRequest, Status
from reasearch.engine.testing import CpuBurner
from reasearch.engine.waits import WaitNotice, add_wait_reporter
from tests.engine.conftest import MODES, needs_mode, stray_processes

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


@pytest.mark.parametrize("mode", MODES)
def test_waiting_for_a_cpu_is_not_a_timeout(mode: str) -> None:
    # 0.25 s of CPU at a sixth of a CPU at most (5 OUTSIDE burners on its CPU) takes >= 1.5 s of wall
    # time: past the 1 s wall limit when waiting counts (it did: TIMEOUT), within it when only running
    # and sleeping count. The engine's own deadline for the worker's reply moves with the waits the
    # worker reports: with a grace (0.3 s) shorter than the waits, a fixed wall + grace would give up
    # on the worker at 1.3 s ("did not answer"). Room to spare on a busy machine: the outer bound
    # (4 s) holds up to 16 runnable processes on its CPU.
    needs_mode(mode)
    req = RunRequest(source=HONEST, payload={"cpu": ONE_CPU, "work_s": 0.25}, limits=Limits(wall_s=1.0, cpu_s=3.0))
    with SandboxPool(SandboxConfig(mode=mode, workers=1, preload=(), grace_s=0.3)) as pool:
        with CpuBurner(5, cpus={ONE_CPU}):
            out = pool.run(req)
        assert out.status is Status.OK, out.error
        assert out.value == 1
        assert out.cpu_s < 3.0
        assert pool.restarts == 0


def test_sleeping_is_still_stopped_at_the_wall_limit(pool: SandboxPool) -> None:
    sleeper = "import time\n\ndef run():\n    time.sleep(60)\n"
    lim = Limits(wall_s=0.5, cpu_s=30.0)
    with CpuBurner(2):
        out = pool.run(RunRequest(source=sleeper, limits=lim))
    assert out.status is Status.TIMEOUT
    assert "wall-time limit of 0.5 s" in out.error
    assert out.wall_s < lim.outer_wall_s()  # a sleeper waits for no CPU: no extension past its limit
    assert stray_processes(pool) == []


# The attacker's tries: keep its own main thread waiting in a run queue so that the deadline keeps
# moving. Busy children on its CPU; burners that leave its process tree (new session, parent gone:
# orphans of the worker); a plain fork bomb on every CPU.
SELF_MADE = {
    "busy children": """
        import os

        def run(cpu):
            os.sched_setaffinity(0, {cpu})
            for _ in range(7):
                if os.fork() == 0:
                    while True:
                        pass
            while True:
                pass
    """,
    "orphaned burners": """
        import os

        def run(cpu):
            os.sched_setaffinity(0, {cpu})
            for _ in range(7):
                pid = os.fork()
                if pid == 0:
                    os.setsid()
                    if os.fork() == 0:
                        while True:
                            pass
                    os._exit(0)
                os.waitpid(pid, 0)
            while True:
                pass
    """,
    "fork bomb": """
        import os

        def run(cpu):
            while True:
                try:
                    os.fork()
                except OSError:
                    pass
    """,
}


@pytest.mark.parametrize("kind", sorted(SELF_MADE))
def test_self_made_contention_buys_no_time(pool: SandboxPool, kind: str) -> None:
    # What its own threads and processes ran while its main thread waited is taken off that wait (a
    # wait it made itself buys nothing), and whatever it waited, the deadline never passes the outer
    # bound (4 x wall_s, where it was 8 x: the old engine let a fork bomb hold its worker that long).
    # Other jobs on the machine can still take its CPUs: their share counts, up to that bound.
    lim = Limits(wall_s=0.5, cpu_s=60.0, nproc=16)
    out = pool.run(RunRequest(source=textwrap.dedent(SELF_MADE[kind]), payload={"cpu": ONE_CPU}, limits=lim))
    assert out.status is Status.TIMEOUT, out.error
    assert "wall-time limit" in out.error
    assert lim.outer_wall_s() <= 4 * lim.wall_s
    assert out.wall_s < 4 * lim.wall_s + 1.0, out.error  # not the old 8 x 0.5 s, nor the 60 s CPU limit
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
    monkeypatch.setattr(_supervisor._procs, "main_thread_cpu_s", lambda pid: ran_share * 1.0)
    limits = {"wall_s": 0.5, "outer_wall_s": 4.0}
    assert _supervisor.Supervisor.pump_limited(ch, limits, want_frame=True) == expect


@pytest.mark.parametrize(("others_share", "counted"), [(0.0, 0.8), (0.5, 0.4), (1.0, 0.0), (3.0, 0.0)])
def test_a_wait_its_own_threads_or_processes_ran_in_is_not_counted(monkeypatch: pytest.MonkeyPatch,
                                                                   others_share: float, counted: float) -> None:
    # The attacker's try: busy children or threads starve its own main thread, which then waits in a
    # run queue. Whatever its own tree ran while the main thread waited is taken off the wait: a fork
    # bomb (its tree ran all along) gets nothing; an honest candidate starved by other jobs (its tree
    # ran nothing else) gets its whole wait; the deadline moves by what is left, and the engine is told.
    lim = Limits(wall_s=1.0)
    ch = Child(pid=os.getpid(), pidfd=-1, result_r=None, calls_w=None, out_r=-1, err_r=-1)
    ch.t0 = 100.0
    deadlines: list[float] = []
    told: list[float] = []

    def fake_pump(child: Child, deadline: float, want_frame: bool, spin_until: float = 0.0) -> str:
        deadlines.append(deadline - child.t0)
        return "deadline" if len(deadlines) == 1 else "frame"

    monkeypatch.setattr(_supervisor, "pump", fake_pump)
    monkeypatch.setattr(_supervisor._procs, "run_delay_s", lambda pid: 0.8)  # its main thread waited 0.8 s
    monkeypatch.setattr(_supervisor._procs, "main_thread_cpu_s", lambda pid: 0.2)
    limits = {"wall_s": lim.wall_s, "outer_wall_s": lim.outer_wall_s()}
    state = _supervisor.Supervisor.pump_limited(ch, limits, want_frame=True, others_cpu=lambda: others_share * 0.8,
                                                notify=told.append)
    assert state == ("frame" if counted else "deadline")
    assert ch.waited == pytest.approx(counted)
    assert deadlines == pytest.approx([1.0, 1.0 + counted][:1 + bool(counted)])
    assert told == pytest.approx([counted][:bool(counted)])


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


_TREE_PROBE = textwrap.dedent("""
    import json, os, threading, time
    from reasearch.engine import _procs
    from reasearch.engine._proc_tree import ProcessTree
    from reasearch.engine._pump import Child

    class Forks:  # no child forked ahead, no zygote
        idle = zpid = None
        lost = staticmethod(lambda pid: False)

    def burn(s):
        t0 = time.process_time()
        while time.process_time() - t0 < s:
            pass

    _procs.set_child_subreaper()  # as the worker: orphans come back here
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the candidate: a busy child, a busy orphan in a new session, a busy thread, 0.2 s each
        if os.fork() == 0:
            burn(0.2); os.write(w, b"x"); time.sleep(60)
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                burn(0.2); os.write(w, b"x"); time.sleep(60)
            os._exit(0)
        th = threading.Thread(target=burn, args=(0.2,))
        th.start(); th.join()
        burn(0.1)  # its main thread's own CPU: never part of what the others ran
        os.write(w, b"x"); time.sleep(60)
    for _ in range(3):
        os.read(r, 1)
    ch = Child(pid=pid, pidfd=-1, result_r=None, calls_w=None, out_r=-1, err_r=-1)
    tree = ProcessTree(False, Forks())
    print(json.dumps({"others": tree.others_cpu(ch), "main": _procs.main_thread_cpu_s(pid)}))
    tree.kill_tree(ch)
""")


def test_others_cpu_counts_the_whole_tree_but_the_main_thread() -> None:
    # What is taken off a wait: every thread but the main one, every process below the candidate, and
    # orphans that left its session (they come back to the worker, a subreaper). 3 x 0.2 s of it here.
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _TREE_PROBE], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["main"] >= 0.1
    assert 0.6 - 0.03 <= got["others"] <= 0.6 + 0.05, got
