"""Tables and figures at 80 columns (issue 27 items 8 and 9), driven through the CLI as a user does.

Every full id and every number a table shows appears intact on one line of the output; columns that do
not fit drop by priority; ``eval`` prints "-" for a missing value and a readable UTC time, never epoch
seconds; the fleet table's ``node`` column names the host that ran each member.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from reasearch.cli import main
from reasearch.evaluators.testing import ToyTask
from reasearch.fleets.fleet import FleetSpec, run_fleet
from reasearch.models.testing import call, say
from reasearch.runs.run import Run
from reasearch.runs.store import open_store


def _lines(text: str) -> list[str]:
    return text.splitlines()


def _on_one_line(text: str, token: str) -> bool:
    return any(token in line for line in _lines(text))


@pytest.fixture()
def narrow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("LINES", raising=False)


def test_runs_at_80_columns_shows_every_run_id_whole(tmp_path: Path, narrow: None, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    with open_store(tmp_path) as store:
        ids = []
        for seed in range(3):
            run = Run.create(store, task=ToyTask(), seed=seed,
                             budget={"evaluations": 1000, "dollars": 12.5, "tokens": 2_000_000})
            run.evaluate(run.task.seed_program(), step=0)
            run.finish(reason="done")
            ids.append(run.id)
    assert main(["runs", "--run-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert all(len(line) <= 80 for line in _lines(out)), out
    for rid in ids:
        assert _on_one_line(out, rid), f"run id {rid} is cut:\n{out}"
    assert "not shown at 80 columns: seed, budget used/cap, last write" in out  # dropped by priority, and said
    assert sum(1 for line in _lines(out) if re.search(r"│ -36\s+│ 1\s+│", line)) == 3  # best and evals whole
    monkeypatch.setenv("COLUMNS", "160")
    assert main(["runs", "--run-dir", str(tmp_path)]) == 0
    wide = capsys.readouterr().out
    for token in ("evaluations 1/1000,", "dollars 0/12.5,", "tokens 0/2e+06"):  # a wider terminal shows the budget
        assert _on_one_line(wide, token), wide


def test_tasks_at_80_columns_keeps_every_number_whole(narrow: None, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    assert all(len(line) <= 80 for line in _lines(out)), out
    for r in rows:
        assert _on_one_line(out, r["id"]), r["id"]
        if r.get("best_known") is not None:
            assert _on_one_line(out, f"{r['best_known']:.12g}"), f"{r['best_known']} is split across lines:\n{out}"
    assert "not shown at 80 columns: direction, seed score" in out  # the lowest priorities go first
    assert re.search(r"│ 26 circles in the unit square", out)  # what a task is stays
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["tasks"]) == 0
    wide = capsys.readouterr().out
    numbers = [f"{r[k]:.12g}" for r in rows for k in ("best_known", "seed_score") if r.get(k) is not None]
    assert len(numbers) > 20 and "not shown" not in wide
    for n in numbers:
        assert _on_one_line(wide, n), f"{n} is split across lines:\n{wide}"


def test_eval_prints_a_dash_for_missing_values_and_a_readable_started_at(
        tmp_path: Path, narrow: None, capsys: pytest.CaptureFixture[str]) -> None:
    seed = Path(__file__).resolve().parents[1] / "reasearch/evaluators/tabular/seed/train.py.txt"
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(seed, repo / "train.py")
    assert main(["eval", "tabular/csv-v2", str(repo), "-p", "sandbox_mode=process", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    missing = [k for k, v in result["metrics"].items() if v is None]
    assert missing and "started_at" in result["metrics"]
    assert main(["eval", "tabular/csv-v2", str(repo), "-p", "sandbox_mode=process"]) == 0
    out = capsys.readouterr().out
    assert "None" not in out
    for key in missing:
        assert re.search(rf"{key}\s+│ -\s", out), f"{key} should read '-':\n{out}"
    started = next(line for line in _lines(out) if "started_at" in line)
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", started), started
    assert f"{result['metrics']['started_at']}" not in out
    sha = result["metrics"]["submission_sha256"]  # a 64-character hash: whole, on one line
    assert len(sha) == 64 and _on_one_line(out, sha), out


@pytest.fixture
def fleet_dir() -> Iterator[Path]:
    """Under /var/tmp: the sandbox uid must reach the workspaces."""
    d = Path(tempfile.mkdtemp(prefix="reasearch-fleet-", dir="/var/tmp"))
    d.chmod(0o711)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_fleet_table_at_80_columns_keeps_ids_and_numbers_and_names_the_node(
        fleet_dir: Path, narrow: None, capsys: pytest.CaptureFixture[str]) -> None:
    script = fleet_dir / "script.json"  # evaluate the seed, then finish (a scripted model: no API key)
    script.write_text(json.dumps([r.to_dict() for r in (say("Baseline.", call("evaluate")),
                                                          say("Done.", call("finish", reason="the seed")))]))
    spec = FleetSpec(tasks=("circle_packing/n26-v1",), seeds=(0, 1), models=(f"scripted/{script}",),
                     budget={"evaluations": 5}, agent={"sandbox_mode": "process"}, parallelism=2)
    run_fleet(spec, store=fleet_dir, run_dir=fleet_dir, fleet_id="f-narrow-20261203")
    capsys.readouterr()
    assert main(["fleet", "show", "f-narrow-20261203", "--run-dir", str(fleet_dir), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [m["node"] for m in report["members"]] == [socket.gethostname()] * 2  # read back from the store
    assert main(["fleet", "show", "f-narrow-20261203", "--run-dir", str(fleet_dir)]) == 0
    out = capsys.readouterr().out
    assert all(len(line) <= 80 for line in _lines(out)), out
    for m in report["members"]:
        assert _on_one_line(out, m["run_id"]), out
        assert _on_one_line(out, f"{m['best_score']:.6g}"), out


@pytest.mark.parametrize("width", [40, 60, 80, 120])
def test_fitted_table_keeps_ids_and_numbers_whole_and_drops_by_priority(width: int) -> None:
    import io

    from rich.console import Console

    from reasearch._cli._tables import Column, fitted_table

    cols = [Column("run", 9), Column("score", 8), Column("note", 5, prose=True), Column("seed", 1)]
    rows = [("20261203-101711-248a0637", "2.63598308492", "a long note " * 6, "7"),
            ("20261203-101712-13617f90", "-0.0000123456789", "short", "12345678901")]
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None).print(fitted_table("t", cols, rows, width))
    out = buf.getvalue()
    assert all(len(line) <= width for line in _lines(out)), out
    for rid in ("20261203-101711-248a0637", "20261203-101712-13617f90"):
        assert _on_one_line(out, rid), out
    if width >= 60:  # room for the score: numbers whole
        assert _on_one_line(out, "2.63598308492") and _on_one_line(out, "-0.0000123456789"), out
    if width < 120:  # the lowest priority goes first
        assert "seed" in out.split("not shown at", 1)[-1], out
    else:
        assert "not shown" not in out and "12345678901" in out


def test_the_fleet_table_marks_a_best_score_on_public_held_out_data(experiment_root: Path) -> None:
    """Issue 36 item 1: a fleet member whose task scores public held-out data (``img`` with ``data=digits``)
    says so beside its best score, in the table and in ``--json`` (read back whole); others say nothing."""
    import io

    from rich.console import Console

    from reasearch._cli.fleet import members_table
    from reasearch.evaluators import make
    from reasearch.evaluators.training import heldout_public_of as heldout_public
    from reasearch.fleets.fleet import FleetMember, MemberResult, _result_from

    assert heldout_public(make("img/folder-v2", data="digits")) is True
    assert heldout_public(make("img/folder-v2")) is False and heldout_public(ToyTask()) is None
    rows = [MemberResult(FleetMember(i, "img/folder-v2", 0, "demo"), f"run-{i}", "finished", 0.91, None, 3, {},
                         heldout_public=public) for i, public in enumerate((True, False, None))]
    assert [_result_from(r.to_dict()).heldout_public for r in rows] == [True, False, None]
    console = Console(file=io.StringIO(), width=160)
    console.print(members_table(rows, "fleet"))
    lines = [line for line in console.file.getvalue().splitlines() if "run-" in line]  # type: ignore[attr-defined]
    assert ["public held-out" in line for line in lines] == [True, False, False], lines


def test_runs_and_show_say_when_a_run_scores_public_held_out_data(experiment_root: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """``reasearch runs`` marks the best score of a run on public held-out data (``img`` with ``data=digits``)
    and ``reasearch show`` says it beside the best; a run of the default glyphs is not marked public."""
    from reasearch.evaluators import make

    monkeypatch.setenv("COLUMNS", "200")
    with open_store(tmp_path) as store:
        public = Run.create(store, task=make("img/folder-v2", data="digits", time_budget_s=30.0), budget={})
        public.evaluate(public.task.seed_program(), step=0)
        private = Run.create(store, task=make("img/folder-v2"), budget={})  # nothing evaluated: no best score
        ids = public.id, private.id
    assert main(["runs", "--run-dir", str(tmp_path)]) == 0
    rows = {rid: line for line in _lines(capsys.readouterr().out) for rid in ids if rid in line}
    assert "(public held-out)" in rows[ids[0]] and "(public held-out)" not in rows[ids[1]], rows
    assert main(["show", ids[0], "--run-dir", str(tmp_path)]) == 0
    shown = capsys.readouterr().out
    best = next(line for line in _lines(shown) if line.startswith("best: "))
    assert "PUBLIC held-out data" in best and "not sealed" in best, shown[:2000]
