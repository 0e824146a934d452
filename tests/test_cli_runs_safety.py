"""``runs delete``/``runs prune``, takeovers and run/fleet ids: what must never be cut or made (issue 36).

- A driver on this host holds its run while its process lives, whatever its heartbeat's age (a driver
  that parses a long reply beats late): ``delete --force``, ``prune`` and a takeover refuse it.
- A run that paid for anything (a ledger row of any unit) is not empty: ``prune --empty`` keeps it.
- Run and fleet ids name folders: ``../../x``, an absolute path, a separator are refused with one line,
  exit status 2, and nothing is made anywhere.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from reasearch.cli import main
from reasearch.errors import ConfigError
from reasearch.evaluators.testing import ToyTask
from reasearch.runs import Run, open_store
from reasearch.runs.ledger import Unit
from reasearch.runs.run import STALE_S, driver_alive, effective_state, live_drivers, process_start
from reasearch.runs.store import RunState

ROOT = Path(__file__).resolve().parents[1]

_SLEEPER = """
import sys, time
from reasearch.evaluators.testing import ToyTask
from reasearch.runs import Run, open_store
store = open_store(sys.argv[1])
run = Run.create(store, task=ToyTask(), budget={"evaluations": 3})
print(run.id, flush=True)
time.sleep(120)
"""


def _backdate_heartbeats(run_dir: Path, seconds: float) -> None:
    """What a driver starved of the GIL looks like from outside: its last beat is old."""
    with sqlite3.connect(run_dir / "store.sqlite") as conn:
        conn.execute("UPDATE drivers SET heartbeat_at = heartbeat_at - ?", (seconds,))


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[tuple[Path, str, subprocess.Popen[str]]]:
    """A driver process on this host that holds a run and stays alive (its heartbeat made stale below)."""
    run_dir = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", _SLEEPER, str(run_dir)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        run_id = proc.stdout.readline().strip()
        assert run_id
        yield run_dir, run_id, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()


def test_delete_force_and_prune_refuse_a_live_driver_whose_heartbeat_is_stale(
        sleeper: tuple[Path, str, subprocess.Popen[str]], capsys: pytest.CaptureFixture[str]) -> None:
    run_dir, run_id, proc = sleeper
    _backdate_heartbeats(run_dir, 10 * STALE_S)  # the heartbeat says "dead"; the process is there
    d = ["--run-dir", str(run_dir)]
    assert main(["runs", "delete", run_id, "--force", *d]) == 2
    err = capsys.readouterr().err
    assert f"held by a live driver (pid {proc.pid}" in err and "nothing was deleted" in err
    assert main(["runs", "prune", "--empty", *d]) == 0  # it has no evaluation, but its driver lives
    assert "no run without" in capsys.readouterr().err
    with open_store(run_dir) as store:
        assert store.get_run(run_id).state is RunState.RUNNING
        assert effective_state(store, store.get_run(run_id)) is RunState.RUNNING  # not shown "interrupted"
        [driver] = store.drivers(run_id)
        assert driver.pid == proc.pid and driver_alive(driver) and live_drivers(store, run_id)
        with pytest.raises(ConfigError, match=f"live process \\(pid {proc.pid}"):  # no takeover under it either
            Run.open(store, run_id, resume=True, takeover=True)
        assert store.get_run(run_id).reason == "" and not store.drivers(run_id)[0].stopped
    # Once the process is gone the same stale heartbeat is a dead driver: the run may go.
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with open_store(run_dir) as store:
        assert not live_drivers(store, run_id)
    assert main(["runs", "delete", run_id, "--force", *d]) == 0
    with open_store(run_dir) as store:
        assert [r.id for r in store.list_runs()] == []


def test_a_reused_pid_with_a_stale_heartbeat_is_not_a_live_driver(tmp_path: Path) -> None:
    """The process check compares start times: this test's own pid, recorded with another start, is dead."""
    import socket

    with open_store(tmp_path / "runs") as store:
        run = Run.create(store, task=ToyTask(), budget={"evaluations": 1})
        run.close()
        store.heartbeat(run.id, "ghost", host=socket.gethostname(), pid=os.getpid(), proc_start="not-this-boot:1")
        store.heartbeat(run.id, "me", host=socket.gethostname(), pid=os.getpid(), proc_start=process_start(os.getpid()))
        _backdate_heartbeats(tmp_path / "runs", 10 * STALE_S)
        drivers = {d.driver_id: d for d in store.drivers(run.id)}
        assert not driver_alive(drivers["ghost"])  # its pid is this process, whose start time is another
        assert driver_alive(drivers["me"])  # the same pid with its own start time: alive, however stale
        store.heartbeat(run.id, "me", stopped=True)
        resumed = Run.open(store, run.id, resume=True, takeover=True)  # nothing alive: the takeover goes ahead
        resumed.close()


def test_prune_keeps_a_run_that_holds_only_paid_model_calls(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "runs"
    with open_store(run_dir) as store:
        paid = Run.create(store, task=ToyTask(), budget={"evaluations": 2, "model_calls": 4})
        for step in (1, 2, 3):  # three paid model calls, no evaluation yet (a fleet member mid-start)
            paid.debit(Unit.MODEL_CALLS, 1.0, step=step, note="evolve:propose")
        paid.close()
        tokens = Run.create(store, task=ToyTask(), budget={"evaluations": 2})
        tokens.debit(Unit.TOKENS, 120.0, step=1, note="agent")  # any unit counts
        tokens.close()
        empty = Run.create(store, task=ToyTask(), budget={"evaluations": 2})
        empty.close()
        assert not store.evaluations(paid.id) and len(store.ledger(paid.id)) == 3
    d = ["--run-dir", str(run_dir)]
    assert main(["runs", "prune", "--empty", *d]) == 0
    err = capsys.readouterr().err
    assert f"deleted run {empty.id}" in err and paid.id not in err and tokens.id not in err
    with open_store(run_dir) as store:
        assert sorted(r.id for r in store.list_runs()) == sorted([paid.id, tokens.id])
        assert store.usage(paid.id) == {Unit.MODEL_CALLS: 3.0}
    assert main(["runs", "delete", paid.id, *d]) == 2  # paid work needs --force, as evaluations do
    assert "holds 3 ledger rows of paid work; pass --force" in capsys.readouterr().err
    assert main(["runs", "delete", paid.id, "--force", *d]) == 0


_BAD_IDS = ["../../x", "../x", "a/b", "..", "x..y", ".hidden", "-flag", "a b", "a\nb", "x" * 200, ""]


@pytest.mark.parametrize("bad", _BAD_IDS)
def test_run_create_refuses_an_id_that_is_not_one_path_component(tmp_path: Path, bad: str) -> None:
    with open_store(tmp_path / "runs") as store:
        with pytest.raises(ConfigError, match="run id"):
            Run.create(store, task=ToyTask(), budget={"evaluations": 1}, run_id=bad)
        with pytest.raises(ConfigError, match="run id"):
            Run.create(store, task=ToyTask(), budget={"evaluations": 1}, run_id=str(tmp_path / "abs"))
        assert store.list_runs() == []
        ok = Run.create(store, task=ToyTask(), budget={"evaluations": 1}, run_id="my-run_1.v2")
        ok.close()
        assert [r.id for r in store.list_runs()] == ["my-run_1.v2"]


def _everything_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*"))


@pytest.mark.parametrize("command", ["fleet", "compare"])
@pytest.mark.parametrize("kind", ["dotdot", "absolute"])
def test_cli_refuses_a_fleet_id_used_as_a_path_and_makes_nothing(tmp_path: Path, command: str, kind: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "a" / "b" / "runs"
    run_dir.mkdir(parents=True)
    bad = "../../x" if kind == "dotdot" else str(tmp_path / "abs")
    before = _everything_under(tmp_path)
    if command == "fleet":
        argv = ["fleet", "run", "--task", "circle_packing/n26-v1", "--model", "demo", "--budget", "2", "--id", bad,
                "--run-dir", str(run_dir), "--quiet"]
    else:
        argv = ["compare", "circle_packing/n26-v1", "--methods", "best_of_n,evolve", "--model", "demo",
                "--budget", "2", "--id", bad, "--run-dir", str(run_dir), "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bad fleet id" in err and "no '..'" in err
    assert _everything_under(tmp_path) == before  # no store, no workspace, no git directory, anywhere
    assert not (tmp_path / "a" / "x-m000").exists() and not (tmp_path / "abs-m000").exists()


def test_run_fleet_refuses_a_bad_id_before_anything_is_stored(tmp_path: Path) -> None:
    from reasearch.fleets.fleet import FleetSpec, run_fleet

    spec = FleetSpec.from_dict({"tasks": ["circle_packing/n26-v1"], "models": ["demo"], "budget": {"evaluations": 1}})
    for bad in ("../../x", str(tmp_path / "abs"), "f/1"):
        with pytest.raises(ConfigError, match="bad fleet id"):
            run_fleet(spec, store=str(tmp_path / "runs"), run_dir=str(tmp_path / "runs"), fleet_id=bad)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "abs-m000").exists()
    with open_store(tmp_path / "other") as store:  # the store refuses one too, whoever calls it
        with pytest.raises(ConfigError, match="bad fleet id"):
            store.create_fleet("../x", {})
        assert store.list_fleets() == []
