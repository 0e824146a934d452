"""A session call's CPU account (``CallOutcome.cpu_s``, ``cpu_before_s``) and a closed session's
``descendants_cpu_s``: read by the worker from the kernel's clock of the candidate's process, in both modes."""

from __future__ import annotations

import os
import textwrap
import time

from reasearch.engine import SandboxPool
from reasearch.engine._pool_session import _ns_as_s
from reasearch.engine._procs import process_cpu_ns
from reasearch.engine._supervisor import SESSION_PIPE_BYTES
from reasearch.engine.protocol import CallOutcome, RunOutcome, RunRequest, Status

ECHO = "reasearch.engine._probe_harness:echo"

SPINNER = textwrap.dedent("""
    import os, threading, time

    def _spin(s):
        t = time.thread_time()  # CPU of this thread: preemption on a loaded machine does not shorten the work
        while time.thread_time() - t < s:
            pass

    def run(p):
        kind, s = p["kind"], p["s"]
        if kind == "spin":
            _spin(s)
        elif kind == "sleep":
            time.sleep(s)
        elif kind == "thread":  # the work in a thread that exits before the answer: still this process's CPU
            th = threading.Thread(target=_spin, args=(s,))
            th.start()
            th.join()
        elif kind == "fork":  # the work in a forked process: not this process's CPU
            pid = os.fork()
            if pid == 0:
                _spin(s)
                os._exit(0)
            os.waitpid(pid, 0)
        return kind
    """)


_PROBE_NAME = "rs-burn-probe"


def _find_process(comm: str) -> int:
    """The pid (in this namespace) of the one process named ``comm``."""
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/comm") as fh:
                if name.isdigit() and fh.read().strip() == comm:
                    found.append(int(name))
        except OSError:
            continue
    assert len(found) == 1, f"processes named {comm}: {found}"
    return found[0]


def _wait_for_a_thread_to_exit(pid: int, timeout_s: float = 120.0) -> None:
    """Until ``pid`` has fewer threads than now (its Timer thread ran and ended); bounded, never timed."""
    start = len(os.listdir(f"/proc/{pid}/task"))
    deadline = time.monotonic() + timeout_s
    while len(os.listdir(f"/proc/{pid}/task")) >= start:
        assert time.monotonic() < deadline, f"process {pid}'s burner thread never ended"
        time.sleep(0.005)


def _calls(pool: SandboxPool, payloads: list[dict]) -> tuple[list[CallOutcome], RunOutcome]:
    with pool.session(RunRequest(source=SPINNER, harness=ECHO)) as sess:
        outs = [sess.call(p) for p in payloads]
        return outs, sess.close()


def test_a_calls_cpu_is_the_kernels_account_of_the_candidates_process(pool: SandboxPool) -> None:
    outs, final = _calls(pool, [{"kind": "spin", "s": 0.0}, {"kind": "spin", "s": 0.02}, {"kind": "sleep", "s": 0.03},
                                {"kind": "thread", "s": 0.02}, {"kind": "fork", "s": 0.02}])
    assert all(o.status is Status.OK for o in outs), [o.error for o in outs]
    empty, spin, sleep, thread, fork = (o.cpu_s for o in outs)
    assert all(isinstance(x, float) for x in (empty, spin, sleep, thread, fork))
    assert 0 < empty < 0.01  # the harness's own work: far below a 20 ms spin
    assert 0.02 <= spin < 0.02 + 0.01  # the spin's 20 ms of CPU, plus the harness around it
    assert sleep < 0.01 and outs[2].wall_s >= 0.03  # sleeping is wall time, not CPU
    assert 0.02 <= thread < 0.03  # a thread's CPU counts, even once the thread has exited
    assert fork < 0.01  # a forked process's CPU is not the candidate process's ...
    assert final.status is Status.OK and final.descendants_cpu_s is not None
    assert 0.02 <= final.descendants_cpu_s < 0.06  # ... it shows in the session's account of its descendants
    assert final.cpu_s >= sum(o.cpu_s for o in outs) + final.descendants_cpu_s - 1e-6
    # before the first call: the candidate's import; between calls the process sleeps in its read
    assert outs[0].cpu_before_s is not None and outs[0].cpu_before_s > 0
    assert all(o.cpu_before_s is not None and o.cpu_before_s < 0.005 for o in outs[1:])


def test_work_between_calls_is_not_in_the_next_calls_cpu(pool: SandboxPool) -> None:
    """A thread burns 30 ms of CPU after the first call's answer; the second call is made once that thread
    has exited (watched from here through the candidate's /proc task list, not a sleep: a 0.3 s sleep gave a
    burner on a loaded machine too little CPU), so its burn shows before the call, not in it."""
    cand = textwrap.dedent("""
        import ctypes, threading, time

        def _burn(s):
            t = time.thread_time()
            while time.thread_time() - t < s:
                pass

        def run(p):
            if p.get("later"):  # a thread that burns 30 ms of CPU, 50 ms after this call
                ctypes.CDLL(None).prctl(15, b"%s", 0, 0, 0)  # PR_SET_NAME: the test finds this process
                threading.Timer(0.05, _burn, args=(0.03,)).start()
            return 1
        """) % _PROBE_NAME
    with pool.session(RunRequest(source=cand, harness=ECHO)) as sess:
        first = sess.call({"later": True})
        assert first.status is Status.OK, first.error
        _wait_for_a_thread_to_exit(_find_process(_PROBE_NAME))
        second = sess.call({})
        sess.close()
    assert first.status is second.status is Status.OK
    assert second.cpu_s is not None and second.cpu_s < 0.01  # the burn was before this call ...
    assert second.cpu_before_s is not None and second.cpu_before_s >= 0.03  # ... and shows there


def test_cpu_figures_are_none_safe() -> None:
    out = CallOutcome(Status.OK, 1, 0.001)  # a runner that does not measure CPU
    assert out.cpu_s is None and out.cpu_before_s is None
    assert RunOutcome(Status.OK, None, 0.1, 0.1).descendants_cpu_s is None
    for bad in (None, -1, 1.5, "7", True, [1]):
        assert _ns_as_s(bad) is None
    assert _ns_as_s(2_500_000) == 0.0025
    assert process_cpu_ns(2**22 + 12345) is None  # no such process (beyond pid_max): None, never an error
    assert process_cpu_ns(-5) is None or isinstance(process_cpu_ns(-5), int)  # nonsense pid: never raises


def test_a_crashed_call_keeps_its_cpu(pool: SandboxPool) -> None:
    cand = "import time\ndef run(p):\n    t = time.thread_time()\n    while time.thread_time() - t < 0.01:\n" \
           "        pass\n    raise ValueError('after 10 ms of CPU')\n"
    with pool.session(RunRequest(source=cand, harness=ECHO)) as sess:
        out = sess.call({})
        sess.close()
    assert out.status is Status.CRASH and "after 10 ms" in out.error
    assert out.cpu_s is not None and out.cpu_s >= 0.01


def test_the_clock_of_this_process() -> None:
    me = os.getpid()
    a = process_cpu_ns(me)
    t = time.process_time()
    while time.process_time() - t < 0.005:
        pass
    b = process_cpu_ns(me)
    assert a is not None and b is not None and b - a >= 0.005e9


def test_a_sessions_pipes_hold_a_whole_answer(pool: SandboxPool) -> None:
    """A session's request and result pipes are widened (EPLB's answers, ~330 KB, then cross without
    hand-offs between writer and reader); a single run's are not."""
    cand = "import fcntl\ndef run(p):\n    return [fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) for fd in (3, 4)]\n"
    with open("/proc/sys/fs/pipe-max-size") as fh:
        wanted = min(SESSION_PIPE_BYTES, int(fh.read()))
    with pool.session(RunRequest(source=cand, harness=ECHO)) as sess:
        out = sess.call({})
        sess.close()
    assert out.status is Status.OK and out.value == [wanted, wanted]
    single = pool.run(RunRequest(source=cand.replace("def run(p)", "def run()")))
    assert single.status is Status.OK and all(size < wanted for size in single.value)
