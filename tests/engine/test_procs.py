"""/proc accounting: CPU time of a live process counts its exited threads too (issue 10 §2 item 11)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

from reasearch.engine._procs import children_walk, cpu_s, descendants_of, last_pid, process_table, reap_pids, task_cpu_s

_BURN_THEN_WAIT = textwrap.dedent("""
    import sys, threading, time
    def burn():
        t = time.thread_time()
        while time.thread_time() - t < 0.2:
            pass
    threads = [threading.Thread(target=burn) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("burnt", flush=True)
    time.sleep(30)
    """)


def test_cpu_of_exited_threads_counts_in_a_live_process() -> None:
    proc = subprocess.Popen([sys.executable, "-c", _BURN_THEN_WAIT], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "burnt"
        deadline = time.monotonic() + 10  # a joined thread may take a moment to leave the kernel's task list
        while len(os.listdir(f"/proc/{proc.pid}/task")) > 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        live_threads_only = task_cpu_s(proc.pid)  # the two burners are gone: their time is not here
        total = cpu_s(proc.pid)
        assert total >= 0.38, (total, live_threads_only)  # 2 x 0.2 s (a nanosecond clock: no slack needed)
        assert total > live_threads_only + 0.35
    finally:
        proc.kill()
        proc.wait()
    assert cpu_s(proc.pid) == 0.0  # gone: nothing, not an error


def test_descendants_walk_finds_grandchildren() -> None:
    code = (
        "import os, time\nif os.fork() == 0:\n    time.sleep(30)\n"
        "else:\n    print('up', flush=True)\n    time.sleep(30)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        deadline = time.monotonic() + 10
        while len(children_walk(proc.pid)) < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        below = children_walk(proc.pid)
        assert len(below) == 1
        assert below == descendants_of(proc.pid, process_table())  # the children-file walk agrees with a scan
        assert set(below) <= set(descendants_of(os.getpid()))
    finally:
        below = descendants_of(proc.pid)
        for pid in below:
            os.kill(pid, 9)
        proc.kill()
        proc.wait()
        reap_pids(below)  # orphaned zombies come to this process when it is a subreaper (a pool made it one)


def test_last_pid_moves_past_every_new_process() -> None:
    """``last_pid`` (the PID namespace's counter) is at least the pid of a process just started: the
    jailed worker's shortcut (no tree walk when the counter is still the child's pid) relies on it."""
    before = last_pid()
    assert isinstance(before, int)
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    after = last_pid()
    assert after is not None and after != before
    assert after >= pid or after < before  # increasing, or wrapped past pid_max meanwhile
