"""kill -9 at several points of a real run, then resume: no lost step, no duplicate, no budget spent twice."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reasearch.engine._procs import descendants_of
from reasearch.evaluators.base import candidate_sha256
from reasearch.evaluators.result import Status
from reasearch.evaluators.testing import ToyTask, toy_candidate
from reasearch.runs.executor import LocalExecutor
from reasearch.runs.ledger import Unit
from reasearch.runs.run import Run
from reasearch.runs.store import RunState, open_store
from reasearch.runs.sweep import run_candidates
from tests.pg_helpers import BACKENDS, store_location

# 14 candidates after the seed: two repeats (served by the cache), one crash, one invalid answer.
_VALUES = [[1.0, 1.0, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0], [3.0, 2.0, 2.0, 2.0], [3.0, 3.0, 2.0, 2.0],
           [3.0, 3.0, 3.0, 2.0], [2.5, 2.5, 2.5, 2.5], [3.0, 3.0, 3.0, 3.0], [4.0, 4.0, 4.0, 4.0],
           [3.0, 3.0, 3.0, 3.5], [0.0, 0.0, 0.0, 0.0]]
SOURCES = [toy_candidate(v, sleep_s=0.12) for v in _VALUES]
SOURCES.insert(3, "import time\n\ndef run():\n    time.sleep(0.12)\n    raise RuntimeError('bad candidate')\n")
SOURCES.insert(6, "import time\n\ndef run():\n    time.sleep(0.12)\n    return [1.0, 2.0]\n")
SOURCES.insert(9, SOURCES[1])  # a repeat
SOURCES.append(SOURCES[0])  # and another
N_STEPS = len(SOURCES) + 1  # the seed is step 0


def _evaluations_in(store_url: str, run_id: str) -> int:
    """Evaluations recorded so far, read through a connection of our own (the driver writes meanwhile)."""
    if store_url.startswith("postgres"):
        import psycopg

        with psycopg.connect(store_url, autocommit=True) as conn:
            row = conn.execute("SELECT COUNT(*) FROM evaluations WHERE run_id = %s", (run_id,)).fetchone()
            return int(row[0]) if row else 0
    try:
        with sqlite3.connect(f"file:{Path(store_url) / 'store.sqlite'}?mode=ro", uri=True, timeout=5) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM evaluations WHERE run_id = ?", (run_id,)).fetchone()[0])
    except sqlite3.OperationalError:  # the file or table is not there yet
        return 0


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh store: a run directory, or a new schema of the test PostgreSQL database."""
    yield from store_location(request.param, tmp_path, "resume")


def _sweep(store_url: str, run_id: str, sources_file: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "reasearch.runs.sweep", "--store", store_url, "--run", run_id,
         "--sources", str(sources_file)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _kill_9_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILLs the driver and everything it started (mid-evaluation), then reaps what was handed to
    this process: the sandbox pool made it a child subreaper, so the driver's orphans come back here."""
    tree = descendants_of(proc.pid)
    os.killpg(proc.pid, signal.SIGKILL)
    for pid in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait()
    pending, deadline = set(tree), time.monotonic() + 10
    while pending and time.monotonic() < deadline:
        for pid in list(pending):
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    pending.discard(pid)
            except ChildProcessError:  # reaped by its own parent, or gone
                if not os.path.exists(f"/proc/{pid}"):
                    pending.discard(pid)
        time.sleep(0.01)
    assert not pending, f"processes of the killed driver still alive: {sorted(pending)}"


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory, executor: LocalExecutor) -> list[tuple[Any, ...]]:
    """(status, score, cached) per step of the same run never interrupted: computed once, both backends read it."""
    with open_store(tmp_path_factory.mktemp("reference")) as ref_store:
        ref = Run.create(ref_store, task=ToyTask(), seed=3, budget={"evaluations": 100}, executor=executor)
        return [(r.status, r.score, r.cached) for r in run_candidates(ref, SOURCES)]


def test_kill_9_at_several_points_then_resume(tmp_path: Path, store_url: str, executor: LocalExecutor,
                                              uninterrupted: list[tuple[Any, ...]]) -> None:
    sources_file = tmp_path / "sources.json"
    sources_file.write_text(json.dumps(SOURCES))
    with open_store(store_url) as store:
        run_id = Run.create(store, task=ToyTask(), seed=3, budget={"evaluations": 100}).id

    killed_at: list[int] = []
    for k in (1, 3, 6):
        proc = _sweep(store_url, run_id, sources_file)
        deadline = time.monotonic() + 120
        while _evaluations_in(store_url, run_id) < k:
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the sweep made no progress"
            time.sleep(0.01)
        _kill_9_tree(proc)
        killed_at.append(_evaluations_in(store_url, run_id))
    assert killed_at == sorted(killed_at) and killed_at[-1] < N_STEPS, killed_at

    final = _sweep(store_url, run_id, sources_file)
    out, err = final.communicate(timeout=300)
    assert final.returncode == 0, err.decode()[-3000:]

    with open_store(store_url) as store:
        run = Run.open(store, run_id, executor=executor)
        evaluations = store.evaluations(run_id)
        # every step exactly once, each with the candidate the driver meant for it
        assert [e.step for e in evaluations] == list(range(N_STEPS))
        plan = [ToyTask().seed_program(), *SOURCES]
        assert [e.candidate_id for e in evaluations] == [candidate_sha256(s) for s in plan]
        # the seed program was evaluated once, at step 0, and paid for once
        seed_id = candidate_sha256(plan[0])
        assert [e.step for e in evaluations if e.candidate_id == seed_id] == [0]
        assert not evaluations[0].result.cached
        # no budget spent twice: one debit per distinct candidate, repeats served by the cache
        # (and an evaluation in flight at a kill charged once more, at its reservation, marked)
        ledger = [e for e in store.ledger(run_id) if not e.note.startswith("charged at reservation")]
        charged = [e for e in store.ledger(run_id) if e not in ledger]
        assert sorted(e.step for e in ledger) == [e.step for e in evaluations if not e.result.cached]
        assert all((e.unit, e.amount, e.note) == (Unit.EVALUATIONS, 1.0, "evaluate") for e in ledger)
        assert sum(e.amount for e in ledger) == len(set(plan)) == N_STEPS - 2
        assert len(charged) <= len(killed_at) and len({e.step for e in charged}) == len(charged)
        assert all(e.unit is Unit.EVALUATIONS and e.amount == 1.0 and "evaluation was in flight" in e.note
                   for e in charged)
        assert {e.step for e in charged} <= {e.step for e in ledger}  # a step that ran (no cache hit) was in flight
        assert [e.step for e in evaluations if e.result.cached] == [10, N_STEPS - 1]
        # no duplicated candidate, no duplicated or lost event
        assert len(store.candidates(run_id)) == len(set(plan))
        assert [e.step for e in run.events(kind="evaluate")] == list(range(N_STEPS))
        # the same outcome as a run that was never interrupted
        assert [(e.result.status, e.result.score, e.result.cached) for e in evaluations] == uninterrupted
        st = run.status()
        optimum = SOURCES.index(toy_candidate([3.0] * 4, sleep_s=0.12))
        assert st.state is RunState.FINISHED and st.best_score == 0.0 and st.best_step == optimum + 1
        assert store.get_run(run_id).final_candidate == candidate_sha256(SOURCES[optimum])
        assert st.by_status == {"OK": N_STEPS - 2, "CRASH": 1, "INVALID": 1}
        assert json.loads(out.decode().strip().splitlines()[-1])["steps"] == N_STEPS


def test_replaying_a_driver_changes_nothing(tmp_path: Path, executor: LocalExecutor) -> None:
    """The agent's pattern: log, debit and evaluate per step; a replay of the same steps is a no-op."""
    with open_store(tmp_path) as store:
        run = Run.create(store, task=ToyTask(), budget={"evaluations": 10, "tokens": 10_000}, executor=executor)

        def drive(r: Run) -> list[float | None]:
            scores = []
            for step, v in enumerate([0.0, 1.0, 2.0]):
                r.log_event(step, "model_turn", {"text": f"try {v}"})
                r.debit(Unit.TOKENS, 1000, step=step, note="turn")
                scores.append(r.evaluate(toy_candidate([v] * 4), step=step).score)
            return scores

        first = drive(run)
        snapshot = (store.evaluations(run.id), store.ledger(run.id), store.events(run.id), store.candidates(run.id))
        again = drive(Run.open(store, run.id, executor=executor))
        assert first == again == [-36.0, -16.0, -4.0]
        assert (store.evaluations(run.id), store.ledger(run.id), store.events(run.id),
                store.candidates(run.id)) == snapshot
        assert run.remaining()[Unit.TOKENS] == 7000.0 and run.remaining()[Unit.EVALUATIONS] == 7.0
        assert run.last_step() == 2
        # a resumed driver that diverges is stopped, not silently given another candidate's score
        from reasearch.errors import ConfigError

        with pytest.raises(ConfigError, match="replay the same candidates"):
            run.evaluate(toy_candidate([9.0] * 4), step=1)
        assert run.evaluate(toy_candidate([9.0] * 4), step=3).status is Status.OK


def test_open_with_resume_marks_the_run_running(tmp_path: Path, executor: LocalExecutor) -> None:
    with open_store(tmp_path) as store:
        run = Run.create(store, task=ToyTask(), budget={}, executor=executor)
        created = store.get_run(run.id)
        run.evaluate(toy_candidate([1.0] * 4), step=0)
        assert store.get_run(run.id).updated_at > created.updated_at  # activity is visible
        run.finish(state="interrupted", reason="user pressed Ctrl-C")
        assert Run.open(store, run.id).state is RunState.INTERRUPTED  # inspecting changes nothing
        again = Run.open(store, run.id, resume=True, executor=executor)
        rec = store.get_run(run.id)
        assert (rec.state, rec.reason) == (RunState.RUNNING, "resumed; was interrupted: user pressed Ctrl-C")
        assert again.evaluate(toy_candidate([1.0] * 4), step=0).score == -16.0
        assert again.used()[Unit.EVALUATIONS] == 1.0


def test_sweep_command_reports_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from reasearch.runs.sweep import main

    (tmp_path / "bad.json").write_text('{"not": "a list"}')
    (tmp_path / "ok.json").write_text("[]")
    with open_store(tmp_path / "runs"):
        pass
    base = ["--store", str(tmp_path / "runs"), "--sources"]
    assert main([*base, str(tmp_path / "bad.json"), "--run", "x"]) == 2
    assert "must hold a JSON list of source strings" in capsys.readouterr().err
    assert main([*base, str(tmp_path / "ok.json"), "--run", "nope"]) == 2
    assert "no run 'nope'" in capsys.readouterr().err
    assert main([*base, str(tmp_path / "none.json"), "--run", "x"]) == 2
    assert "No such file" in capsys.readouterr().err


def test_a_resume_at_once_charges_the_evaluation_a_killed_driver_had_in_flight(tmp_path: Path,
                                                                              store_url: str) -> None:
    """Failure: a sweep is killed with ``kill -9`` while an evaluation is in flight and resumed at once.
    The dead driver's reservation (one evaluation) still counted for 60 s, so the resumed sweep found
    its last evaluation over the cap and recorded it REFUSED for good. Later failure (issue 40 item 3):
    the resume dropped the hold, so the evaluation the sandbox was running when the driver died cost
    nothing. The resume now sees that the driver's process (same host; pid and start time recorded) is
    gone and turns its hold into one charged evaluation, at once: every step runs and is paid once, the
    killed one is charged once more (marked), and a second resume charges nothing."""
    sources = [toy_candidate(v, sleep_s=0.3) for v in _VALUES[:5]]
    sources_file = tmp_path / "sources.json"
    sources_file.write_text(json.dumps(sources))
    cap = len(sources) + 2  # the seed and each candidate, plus the evaluation in flight at the kill
    with open_store(store_url) as store:
        run_id = Run.create(store, task=ToyTask(), seed=3, budget={"evaluations": cap}).id
    proc = _sweep(store_url, run_id, sources_file)
    deadline = time.monotonic() + 120
    with open_store(store_url) as store:  # kill while an evaluation is in flight: its reservation is held
        while _evaluations_in(store_url, run_id) < 2 or not store.reserved(run_id):
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the sweep made no progress"
            time.sleep(0.01)
        dead = [d for d in store.drivers(run_id) if d.pid == proc.pid]
        assert len(dead) == 1 and not dead[0].stopped and dead[0].proc_start  # host, pid and start recorded
    _kill_9_tree(proc)
    with open_store(store_url) as store:
        assert store.reserved(run_id).get(Unit.EVALUATIONS) == 1.0  # the dead driver's hold is still there
        in_flight = len(store.evaluations(run_id))  # the step it was running (steps run in order)
        assert sum(e.amount for e in store.ledger(run_id)) == in_flight

    for _ in range(2):  # resumed at once (well within the reservation's 60 s), then resumed again
        final = _sweep(store_url, run_id, sources_file)
        out, err = final.communicate(timeout=300)
        assert final.returncode == 0, err.decode()[-3000:]
        with open_store(store_url) as store:
            evaluations = store.evaluations(run_id)
            assert [e.step for e in evaluations] == list(range(cap - 1))
            assert [e.result.status for e in evaluations] == [Status.OK] * (cap - 1)  # no REFUSED record
            ledger = store.ledger(run_id)
            charged = [e for e in ledger if e.note.startswith("charged at reservation")]
            assert [(e.step, e.unit, e.amount) for e in charged] == [(in_flight, Unit.EVALUATIONS, 1.0)]
            assert "evaluation was in flight" in charged[0].note
            assert sorted(e.step for e in ledger if e not in charged) == list(range(cap - 1))  # each step once
            assert sum(e.amount for e in ledger) == cap and store.reserved(run_id) == {}
            assert store.get_run(run_id).state is RunState.FINISHED
            assert {d.pid: d.stopped for d in store.drivers(run_id)}[proc.pid]  # the dead driver is marked stopped


def test_a_refusal_caused_only_by_another_drivers_hold_waits_or_says_so(tmp_path: Path, executor: LocalExecutor,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Another live driver holds the last evaluation of the cap: a driver refused only by that hold waits
    for it instead of recording REFUSED as the budget's end; when the hold outlasts the wait, the result
    says so and is not recorded (the step can run later)."""
    import threading

    import reasearch.runs.run as run_module

    with open_store(tmp_path) as store:
        run = Run.create(store, task=ToyTask(), budget={"evaluations": 1}, executor=executor)
        other = Run.open(open_store(tmp_path), run.id, resume=True)  # a second driver, its own connection
        token, refusal = other.reserve({Unit.EVALUATIONS: 1.0})
        assert refusal is None
        refused_once = threading.Event()
        reserve = store.reserve

        def watched(*args: object, **kwargs: object) -> object:
            out = reserve(*args, **kwargs)  # type: ignore[arg-type]
            if out is not None:
                refused_once.set()
            return out

        monkeypatch.setattr(store, "reserve", watched)
        results: list[object] = []
        waiter = threading.Thread(target=lambda: results.append(run.evaluate(toy_candidate([1.0] * 4), step=0)))
        waiter.start()
        assert refused_once.wait(60)
        other.release(token)  # the other driver's evaluation ended without using it
        waiter.join(120)
        assert results and results[0].status is Status.OK  # type: ignore[attr-defined]
        assert store.get_evaluation(run.id, 0) is not None and run.used()[Unit.EVALUATIONS] == 1.0

        run2 = Run.create(store, task=ToyTask(), budget={"evaluations": 1}, executor=executor)
        other2 = Run.open(open_store(tmp_path), run2.id, resume=True)
        assert other2.reserve({Unit.EVALUATIONS: 1.0})[1] is None
        monkeypatch.setattr(run_module, "OTHERS_WAIT_S", 0.3)
        held = run2.evaluate(toy_candidate([1.0] * 4), step=0)
        assert held.status is Status.REFUSED and "held by evaluations in flight of other drivers" in held.feedback
        assert held.metrics["recorded"] is False and store.get_evaluation(run2.id, 0) is None  # not for good
        for r in (other, other2):
            r.close()
            r.store.close()


def test_a_wait_for_another_drivers_hold_is_reported_with_that_driver(tmp_path: Path, executor: LocalExecutor,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Waiting on the budget another driver's evaluation holds is never silent: notices name that driver
    (its pid) and repeat until the hold ends."""
    import os

    import reasearch.runs.run as run_module
    from reasearch.engine import waits

    monkeypatch.setattr(run_module, "_NOTICE_AFTER_S", 0.0)
    monkeypatch.setattr(run_module, "_NOTICE_EVERY_S", 0.0)  # a notice per poll: counted, not timed
    with open_store(tmp_path) as store:
        run = Run.create(store, task=ToyTask(), budget={"evaluations": 1}, executor=executor)
        other = Run.open(open_store(tmp_path), run.id, resume=True)  # a second driver, its own connection
        token, refusal = other.reserve({Unit.EVALUATIONS: 1.0})
        assert refusal is None
        notices: list[waits.WaitNotice] = []

        def seen(notice: waits.WaitNotice) -> None:
            notices.append(notice)
            if len(notices) == 3:
                other.release(token)  # the other driver's evaluation ended without using it

        remove = waits.add_wait_reporter(seen)
        try:
            result = run.evaluate(toy_candidate([1.0] * 4), step=0)
        finally:
            remove()
        assert result.status is Status.OK
        assert [n.count for n in notices] == [1, 2, 3]
        assert all(f"run {run.id}" in n.what and "evaluations budget" in n.what for n in notices)
        assert all(f"driver pid {os.getpid()}" in n.holder for n in notices)  # the other driver: this test's pid
        other.close()
        other.store.close()
