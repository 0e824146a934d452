"""Active wall time (issue 27 item 8): one definition for the report, ``reasearch runs`` and the run's
summary, and a resumed run's time excludes the hours it sat interrupted between driver sessions."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from reasearch.evaluators.testing import ToyTask
from reasearch.reports import _model
from reasearch.runs.run import Run, active_seconds
from reasearch.runs.store import RunState, open_store


class Clock:
    """The wall clock every module reads (``time.time``), moved by the test."""

    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_a_resumed_runs_wall_time_leaves_out_the_time_it_sat_interrupted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(1_000_000.0)
    monkeypatch.setattr(time, "time", clock)
    with open_store(str(tmp_path / "runs")) as store:
        run = Run.create(store, task=ToyTask(), budget={"evaluations": 5})
        assert run.driver_id  # the first session starts driving
        clock.t += 30.0
        run.finish(state=RunState.INTERRUPTED, reason="Ctrl-C")  # 30 s of work, then the run sits for a day
        clock.t += 86_400.0
        again = Run.open(store, run.id, resume=True)  # the second session
        clock.t += 20.0
        again.finish(state=RunState.FINISHED, reason="done")
        record = store.get_run(run.id)
        view = _model.load_run(store, run.id)
        assert active_seconds(store, record) == pytest.approx(50.0)
        assert view.wall_s == pytest.approx(50.0)  # the report's figure is the same number


def test_two_drivers_at_once_count_their_overlap_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(2_000_000.0)
    monkeypatch.setattr(time, "time", clock)
    with open_store(str(tmp_path / "runs")) as store:
        run = Run.create(store, task=ToyTask(), budget={"evaluations": 5})
        assert run.driver_id
        clock.t += 10.0
        other = Run.open(store, run.id, resume=True)  # a second process joins for 10 s
        clock.t += 10.0
        other.close()
        clock.t += 5.0
        run.finish(state=RunState.FINISHED, reason="done")
        assert active_seconds(store, store.get_run(run.id)) == pytest.approx(25.0)
        assert _model.load_run(store, run.id).wall_s == pytest.approx(25.0)


def test_show_prints_the_same_active_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    from reasearch.cli import main
    from reasearch.runs.display import duration_text

    clock = Clock(3_000_000.0)
    monkeypatch.setattr(time, "time", clock)
    with open_store(str(tmp_path)) as store:
        run = Run.create(store, task=ToyTask(), budget={"evaluations": 5})
        assert run.driver_id
        clock.t += 125.0
        run.finish(state=RunState.INTERRUPTED, reason="Ctrl-C")
        clock.t += 7200.0
        Run.open(store, run.id, resume=True).finish(state=RunState.FINISHED, reason="done")
        rid = run.id
    assert main(["show", rid, "--run-dir", str(tmp_path)]) == 0
    assert "active wall time 2 min 05 s" in capsys.readouterr().out
    assert main(["show", rid, "--run-dir", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["run"]["active_s"] == pytest.approx(125.0)
    assert duration_text(125.0) == "2 min 05 s"
