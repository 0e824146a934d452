"""Several drivers on one run, and runs whose driver died: the cap holds, the state tells the truth.

- Budget reservations live in the store, so two driver processes evaluating on one run at once
  never spend more than its cap (SQLite and PostgreSQL).
- A driver beats while it drives; a ``running`` run whose drivers all died (``kill -9``) is shown
  as ``interrupted`` with the command that resumes it, and resuming makes it ``running`` again.
- A version-1 store (before drivers and reservations) is migrated in place, nothing lost.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reasearch.cli import main as cli_main
from reasearch.evaluators.result import Status
from reasearch.evaluators.testing import ToyTask, toy_candidate
from reasearch.runs.ledger import Unit
from reasearch.runs.run import STALE_S, Run, effective_state
from reasearch.runs.store import SCHEMA_VERSION, RunState, open_store
from tests.pg_helpers import BACKENDS, store_location

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from store_location(request.param, tmp_path, "l")


_DRIVER = """
import sys
from reasearch.engine import SandboxConfig, SandboxPool
from reasearch.evaluators.testing import toy_candidate
from reasearch.runs import LocalExecutor, Run, open_store

url, run_id, first = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open_store(url) as store, SandboxPool(SandboxConfig(mode="process", workers=2)) as pool, \\
        LocalExecutor(2, pool=pool) as ex:
    run = Run.open(store, run_id, executor=ex, resume=True)
    futures = []
    import concurrent.futures as cf
    with cf.ThreadPoolExecutor(2) as tp:
        for i in range(8):
            src = toy_candidate([float(first + i), 1.0, 1.0, 1.0], sleep_s=0.05)
            futures.append(tp.submit(run.evaluate, src, step=first + i))
    print(",".join(f.result().status.value for f in futures))
    run.close()
"""


def test_two_driver_processes_never_overspend_a_cap(store_url: str) -> None:
    with open_store(store_url) as store:
        run = Run.create(store, task=ToyTask(), budget={"evaluations": 5})
        run.close()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", _DRIVER, store_url, run.id, str(first)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for first in (0, 100)]
    outs = [p.communicate(timeout=240) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    statuses = [x for out, _ in outs for x in out.strip().split(",")]
    assert len(statuses) == 16
    assert statuses.count("OK") == 5 and statuses.count("REFUSED") == 11
    with open_store(store_url) as store:
        assert store.usage(run.id) == {Unit.EVALUATIONS: 5.0}
        assert store.reserved(run.id) == {}  # every reservation was recorded or released
        ok = [e for e in store.evaluations(run.id) if e.result.status is Status.OK]
        assert len(ok) == 5


_SLEEPER = """
import sys, time
from reasearch.evaluators.testing import ToyTask
from reasearch.runs import Run, open_store
store = open_store(sys.argv[1])
run = Run.create(store, task=ToyTask(), budget={"evaluations": 3})
print(run.id, flush=True)
time.sleep(120)
"""


def test_a_run_whose_driver_died_is_shown_interrupted_and_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path / "runs")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", _SLEEPER, url], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        run_id = proc.stdout.readline().strip()
        with open_store(url) as store:
            rec = store.get_run(run_id)
            assert effective_state(store, rec) is RunState.RUNNING  # its driver is beating
            driver = store.drivers(run_id)[0]
            assert driver.pid == proc.pid and not driver.stopped
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with open_store(url) as store:
        rec = store.get_run(run_id)
        assert rec.state is RunState.RUNNING  # nothing could write "interrupted": it was kill -9
        later = time.time() + STALE_S + 1
        assert effective_state(store, rec, now=later) is RunState.INTERRUPTED
    # The CLI says so, with the command to resume (seen STALE_S later: the heartbeat is backdated).
    with sqlite3.connect(Path(url) / "store.sqlite") as conn:
        conn.execute("UPDATE drivers SET heartbeat_at = heartbeat_at - ?", (STALE_S + 1,))
    # (the commands run in this process, which never drove the run: what they read is the store's)
    monkeypatch.setenv("COLUMNS", "400")  # no wrapped lines
    capsys.readouterr()
    assert cli_main(["runs", "--run-dir", url]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "interrupted" in out and f"python -m reasearch.runs.sweep --run {run_id}" in out
    assert cli_main(["show", run_id, "--run-dir", url]) == 0
    out = capsys.readouterr().out
    assert "state interrupted" in out and "resume with" in out
    # Resuming makes it running again, driven by this process; finishing stops the driver.
    with open_store(url) as store:
        run = Run.open(store, run_id, resume=True)
        assert run.state is RunState.RUNNING
        assert "resumed; was interrupted" in store.get_run(run_id).reason
        run.finish()
        assert all(d.stopped for d in store.drivers(run_id) if d.pid == os.getpid())
        assert run.state is RunState.FINISHED


def test_a_version_1_store_is_migrated_in_place(tmp_path: Path) -> None:
    url = str(tmp_path / "runs")
    with open_store(url) as store:
        run = Run.create(store, task=ToyTask(), budget={"evaluations": 2}, executor=None)
        run.close()
    with sqlite3.connect(Path(url) / "store.sqlite") as conn:  # what a version-1 store looked like
        conn.execute("DROP TABLE drivers")
        conn.execute("DROP TABLE reservations")
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    with open_store(url) as store:
        assert store.schema_version() == SCHEMA_VERSION == 3
        assert store.get_run(run.id).task_id == ToyTask().spec.id
        assert store.drivers(run.id) == [] and store.reserved(run.id) == {}
        # and a run recorded before liveness existed is not called interrupted without evidence
        assert effective_state(store, store.get_run(run.id), now=time.time() + 10 * STALE_S) is RunState.RUNNING


def test_budget_refusal_message_counts_other_drivers_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A refusal says what it saw, including what other drivers hold in flight; one caused only by
    their holds (after a bounded wait, shortened here) says so and is not recorded."""
    import reasearch.runs.run as run_module

    monkeypatch.setattr(run_module, "OTHERS_WAIT_S", 0.2)
    with open_store(tmp_path / "runs") as store:
        run = Run.create(store, task=ToyTask(), budget={"evaluations": 1})
        assert store.reserve(run.id, "other", {Unit.EVALUATIONS: 1.0}, {Unit.EVALUATIONS: 1.0},
                             driver_id="someone-else") is None
        r = run.evaluate(toy_candidate([1.0, 1.0, 1.0, 1.0]), step=0)
        assert r.status is Status.REFUSED and "1/1 used" in r.feedback and "other drivers" in r.feedback
        assert store.get_evaluation(run.id, 0) is None
        store.release("other")
        assert run.evaluate(toy_candidate([1.0, 1.0, 1.0, 1.0]), step=0).status is Status.OK
        r = run.evaluate(toy_candidate([2.0, 1.0, 1.0, 1.0]), step=1)  # the budget's real end is recorded
        assert r.status is Status.REFUSED and "1/1 used" in r.feedback and store.get_evaluation(run.id, 1) is not None
        run.close()


def test_a_reused_pid_is_not_taken_for_the_dead_driver(tmp_path: Path) -> None:
    """A driver's pid may be reused by another process after it died: the process start time recorded
    with it (``/proc/<pid>/stat``) tells them apart, so a resume reclaims the dead driver's hold; a live
    driver (same pid and start) keeps it; a driver of another host is left to its reservation's expiry."""
    import socket

    from reasearch.runs.run import driver_gone, process_start
    from reasearch.runs.store import DriverRecord

    here, me = socket.gethostname(), os.getpid()
    alive = DriverRecord("r", "d", here, me, 0.0, 0.0, proc_start=process_start(me))
    assert alive.proc_start and not driver_gone(alive)
    reused = DriverRecord("r", "d", here, me, 0.0, 0.0, proc_start=alive.proc_start.rsplit(":", 1)[0] + ":1")
    assert driver_gone(reused)  # the pid is alive, but it is another process than the one recorded
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert driver_gone(DriverRecord("r", "d", here, child.pid, 0.0, 0.0, proc_start="x:1"))  # no such process
    assert not driver_gone(DriverRecord("r", "d", here + "-elsewhere", child.pid, 0.0, 0.0, proc_start="x:1"))
    with open_store(tmp_path) as store:  # what a resume reclaims: that driver's reservations, nothing else
        run = Run.create(store, task=ToyTask(), budget={"evaluations": 3})
        store.heartbeat(run.id, "dead", host=here, pid=child.pid, proc_start="x:1")
        store.heartbeat(run.id, "remote", host=here + "-elsewhere", pid=child.pid, proc_start="x:1")
        assert store.reserve(run.id, "t1", {Unit.EVALUATIONS: 1.0}, {}, driver_id="dead") is None
        assert store.reserve(run.id, "t2", {Unit.EVALUATIONS: 1.0}, {}, driver_id="remote") is None
        assert run.reclaim_dead_drivers() == 1 and store.reserved(run.id) == {Unit.EVALUATIONS: 1.0}
        assert {d.driver_id: d.stopped for d in store.drivers(run.id)}["dead"]
        run.close()


def test_a_driver_that_exited_unreaped_is_gone(tmp_path: Path) -> None:
    """A driver process that exited but is not reaped yet (a zombie: a dead Ray node's worker below a child
    subreaper stays one until reaped) holds nothing: it is gone, not alive, and a takeover proceeds."""
    import socket

    from reasearch.runs.run import driver_alive, driver_gone, process_start
    from reasearch.runs.store import DriverRecord

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        start = process_start(child.pid)
        record = DriverRecord("r", "d", socket.gethostname(), child.pid, 0.0, time.time(), proc_start=start)
        assert start and driver_alive(record) and not driver_gone(record)
        child.kill()
        deadline = time.monotonic() + 30
        while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the killed child never became a zombie"
            time.sleep(0.01)
        assert process_start(child.pid) == ""
        assert not driver_alive(record) and driver_gone(record)  # exited, though its pid is still there
        with open_store(tmp_path) as store:
            run = Run.create(store, task=ToyTask(), budget={"evaluations": 3})
            store.heartbeat(run.id, "dead", host=socket.gethostname(), pid=child.pid, proc_start=start)
            run.close()
            Run.open(store, run.id, resume=True, takeover=True).close()  # not refused: nobody holds the run
    finally:
        child.kill()
        child.wait()


def test_a_store_without_the_driver_start_column_gains_it(tmp_path: Path) -> None:
    """Stores written before drivers recorded their process start get the column (default "") on open."""
    with open_store(tmp_path) as store:
        Run.create(store, task=ToyTask(), budget={}).close()
    with sqlite3.connect(tmp_path / "store.sqlite") as conn:
        conn.execute("ALTER TABLE drivers DROP COLUMN proc_start")
    with open_store(tmp_path) as store:
        (run,) = store.list_runs()
        assert [d.proc_start for d in store.drivers(run.id)] == [""]
        store.heartbeat(run.id, "new", host="h", pid=1, proc_start="b:7")
        assert {d.driver_id: d.proc_start for d in store.drivers(run.id)}["new"] == "b:7"
