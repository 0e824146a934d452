"""``reasearch runs``, ``show`` and ``export`` on a real stored run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from reasearch.cli import main
from reasearch.engine import SandboxConfig, SandboxPool
from reasearch.evaluators.base import candidate_sha256
from reasearch.evaluators.testing import ToyTask, toy_candidate
from reasearch.runs.executor import LocalExecutor
from reasearch.runs.run import Run
from reasearch.runs.store import open_store

BEST = toy_candidate([3.0, 3.0, 3.0, 2.0])  # score -1


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    path = tmp_path_factory.mktemp("runs")
    with SandboxPool(SandboxConfig(workers=1)) as pool, LocalExecutor(1, pool=pool) as ex, open_store(path) as store:
        run = Run.create(store, task=ToyTask(), seed=2, budget={"evaluations": 10, "dollars": 1.5}, executor=ex)
        run.evaluate(run.task.seed_program(), step=0, note="seed")
        run.evaluate(BEST, step=1)
        run.evaluate(BEST, step=2)  # cached
        run.log_event(2, "model_turn", {"text": "done"})
        run.debit("dollars", 0.25, step=2, note="turn")
        run.finish(final_candidate=candidate_sha256(BEST), reason="test")
        other = Run.create(store, task=ToyTask(dim=2), budget={}, executor=ex)
        yield path, run.id
        assert other.id != run.id


def test_runs_table_and_json(run_dir: tuple[Path, str], capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    path, run_id = run_dir
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["runs", "--run-dir", str(path)]) == 0
    out = capsys.readouterr().out
    assert run_id in out and "toy/quadratic-d4-v1" in out and "evaluations 2/10" in out and "finished" in out
    assert " s ago" in out
    assert main(["runs", "--run-dir", str(path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["task_id"] for r in rows] == ["toy/quadratic-d4-v1", "toy/quadratic-d2-v1"]
    assert rows[0]["best_score"] == -1.0 and rows[0]["evaluations"] == 3 and rows[1]["best_score"] is None
    assert rows[0]["used"] == {"evaluations": 2.0, "dollars": 0.25}


def test_show(run_dir: tuple[Path, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    path, run_id = run_dir
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["show", run_id[:18], "--run-dir", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"run {run_id}" in out and "best: -1 " in out and "cached 1" in out
    assert "return [3.0, 3.0, 3.0, 2.0]" in out  # the best candidate's source
    assert main(["show", run_id, "--store", f"sqlite:///{path}/store.sqlite", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["best"]["candidate_id"] == candidate_sha256(BEST) and data["best"]["source"] == BEST
    assert data["ledger"] == {"evaluations": {"entries": 2, "amount": 2.0}, "dollars": {"entries": 1, "amount": 0.25}}
    assert data["status"]["left"]["evaluations"] == 8.0 and data["run"]["reason"] == "test"


def test_export(run_dir: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, run_id = run_dir
    target = tmp_path / "run.json"
    assert main(["export", run_id, "--run-dir", str(path), "--json", "-o", str(target)]) == 0
    data = json.loads(target.read_text())
    assert [e["step"] for e in data["evaluations"]] == [0, 1, 2]
    assert [e["result"]["cached"] for e in data["evaluations"]] == [False, False, True]
    assert [c["note"] for c in data["candidates"]] == ["seed", ""]
    assert [e["kind"] for e in data["events"]] == ["model_turn"]
    assert sum(e["amount"] for e in data["ledger_entries"] if e["unit"] == "evaluations") == 2.0
    assert main(["export", run_id, "--run-dir", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["run"]["id"] == run_id


def test_errors_are_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    run_dir: tuple[Path, str]) -> None:
    assert main(["runs", "--run-dir", str(tmp_path / "nothing")]) == 2
    assert "no run store at" in capsys.readouterr().err
    assert not (tmp_path / "nothing").exists()  # a reader never creates a store
    assert main(["show", "nope", "--run-dir", str(run_dir[0])]) == 2
    assert "no run 'nope'" in capsys.readouterr().err


def test_export_without_json_prints_json(run_dir: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    path, run_id = run_dir
    assert main(["export", run_id, "--run-dir", str(path)]) == 0  # JSON is the default (and only) format
    assert json.loads(capsys.readouterr().out)["run"]["id"] == run_id


def test_an_interrupted_fleet_member_is_resumed_by_a_public_command(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from reasearch.runs.fleet_link import FleetLink
    from reasearch.runs.store import RunState

    with open_store(tmp_path) as store:
        member = Run.create(store, task=ToyTask(), budget={"evaluations": 3}, run_id="fleetx-m000",
                            config={"driver": "method", "method": "evolve",
                                    "fleet": FleetLink("fleetx", 0, {}).to_dict()})
        method = Run.create(store, task=ToyTask(), budget={"evaluations": 3}, config={"driver": "method",
                                                                                      "method": "evolve"})
        for run in (member, method):
            store.set_run_state(run.id, RunState.INTERRUPTED, reason="driver died")
    assert main(["runs", "--run-dir", str(tmp_path), "--json"]) == 0
    hints = {r["id"]: r["resume"] for r in json.loads(capsys.readouterr().out)}
    assert hints[member.id] == f"reasearch fleet resume fleetx --run-dir {tmp_path}"
    assert f"open_method({method.id!r}" in hints[method.id]
    assert not any("python -m" in h or "FILE" in h for h in hints.values())  # the sweep's hint is for sweeps only
