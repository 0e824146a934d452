"""Task folders through the real command: ``new-task``, ``tasks PATH --params``, ``seed``, ``eval``, ``optimize
--model demo``, and ``resume`` of a run whose folder changed; each folder mistake is exit 2, one line, no run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reasearch.cli import main
from reasearch.errors import TaskFolderError
from reasearch.evaluators.checker import check_task
from reasearch.evaluators.registry import make
from reasearch.runs import Run, RunState, open_store


@pytest.fixture
def folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    path = tmp_path / "my-task"
    assert main(["new-task", str(path)]) == 0
    out = capsys.readouterr().out
    assert "my_task/spread-v1" in out and "docs/your-own-task.md" in out
    return path


def _set(folder: Path, file: str, old: str, new: str) -> None:
    text = (folder / file).read_text()
    assert old in text
    (folder / file).write_text(text.replace(old, new, 1))


def _line(folder: Path, file: str, needle: str) -> int:
    return next(i for i, line in enumerate((folder / file).read_text().splitlines(), 1) if needle in line)


def test_new_task_writes_a_folder_that_passes_check_task(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert sorted(p.name for p in folder.iterdir()) == ["description.md", "score.py", "seed.py", "task.toml"]
    assert check_task(make(str(folder))).ok
    assert main(["new-task", str(folder)]) == 2  # never overwrites
    assert "exists; give a new folder" in capsys.readouterr().err


def test_tasks_params_seed_and_eval_take_the_folder(folder: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", str(folder), "--params", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["name"] == "n" and row["type"] == "an integer" and row["default"] == 5
    assert row["range"] == ">= 2 and <= 1000"
    assert main(["tasks", str(folder), "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert listed["id"] == "my_task/spread-v1" and listed["best_known"] == 0.25 and listed["seed_score"] == 0.1

    seed = tmp_path / "seed_copy.py"
    assert main(["seed", str(folder), "-o", str(seed)]) == 0
    assert seed.read_text() == (folder / "seed.py").read_text()
    capsys.readouterr()
    assert main(["eval", str(folder), str(seed), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "OK" and result["score"] == pytest.approx(0.1)
    assert result["provenance"]["params"]["content_hash"] == make(str(folder)).spec.params["content_hash"]

    better = tmp_path / "better.py"
    better.write_text("def solve(n):\n    return [i / (n - 1) for i in range(n)]\n")
    assert main(["eval", str(folder), str(better), "-p", "n=3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["score"] == pytest.approx(0.5)
    liar = tmp_path / "liar.py"
    liar.write_text("def solve(n):\n    print('score: 1.0')\n    return [0.5] * (n + 1)\n")
    assert main(["eval", str(folder), str(liar), "--json"]) == 1  # ran, no score
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "INVALID" and result["score"] is None and "must return a list of 5" in result["feedback"]


def test_optimize_with_the_demo_model_records_the_folders_hash(folder: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "runs"
    code = main(["optimize", str(folder), "--model", "demo", "--budget", "6", "--run-dir", str(run_dir), "--quiet"])
    err = capsys.readouterr().err
    assert code == 0, err
    (record,) = open_store(run_dir).list_runs()
    assert record.task_id == "my_task/spread-v1" and record.state is RunState.FINISHED
    spec = record.task_spec
    assert spec is not None and spec.params["content_hash"] == make(str(folder)).spec.params["content_hash"]
    assert spec.params["folder"] == str(folder.resolve())
    best = Run.open(open_store(run_dir), record.id).best()
    assert best is not None and best[1].score is not None and best[1].score >= 0.1 - 1e-12
    import shutil

    shutil.rmtree(folder)  # the report reads the store, not the folder
    report = tmp_path / "report.html"
    assert main(["report", record.id, "--run-dir", str(run_dir), "-o", str(report)]) == 0, capsys.readouterr().err
    assert "my_task/spread-v1" in report.read_text()


MISTAKES = [
    ("task.toml", "entry_point = \"solve\"", "entry_point = \"solv\"", "task.toml", "entry_point",
     "did you mean entry_point = 'solve'?"),
    ("task.toml", "type = \"int\"\n", "", "task.toml", "[params.n]", "parameter n has no type"),
    ("score.py", "    worst = min(gaps)", "    worst = min(gaps) / 0", "score.py", "/ 0",
     "score() raised ZeroDivisionError: float division by zero on the seed's output (seed.py); fix score.py"),
    ("score.py", "    return {\"score\": worst,", "    return {\"score\": float(\"nan\"),", "score.py", "def score(",
     "score() returned nan"),
    ("score.py", "    return {\"score\": worst,", "    return {\"score\": \"high\",", "score.py", "def score(",
     "score() returned 'high'"),
    ("seed.py", "    return [0.1 * i for i in range(n)]", "    return [0.1 * i for i in range(n + 1)]", "score.py",
     "must return a list of", "on the seed's output (seed.py); fix score.py, or the seed if its output is wrong"),
    ("seed.py", "    return [0.1 * i", "    import nothing_here\n    return [0.1 * i", "seed.py", "import nothing_here",
     "the seed fails its own task (CRASH"),
]


@pytest.mark.parametrize("command", ["optimize", "eval"])
@pytest.mark.parametrize(("file", "old", "new", "named", "needle", "why"), MISTAKES, ids=[m[-1][:24] for m in MISTAKES])
def test_a_broken_folder_is_exit_2_one_line_naming_file_and_line_and_no_run(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str,
    file: str, old: str, new: str, named: str, needle: str, why: str,
) -> None:
    _set(folder, file, old, new)
    run_dir = tmp_path / "runs"
    args = (["optimize", str(folder), "--model", "demo", "--budget", "3", "--run-dir", str(run_dir)]
            if command == "optimize" else ["eval", str(folder), str(folder / "seed.py")])
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("reasearch: error: "), err
    line = _line(folder, named, needle)
    assert f"{folder.resolve() / named} line {line}: " in err or f"{folder / named} line {line}: " in err, err
    assert why in err, err
    if command == "optimize":
        assert not run_dir.exists() or open_store(run_dir).list_runs() == []  # no run created


def test_resume_refuses_a_changed_folder_saying_which_files_changed(folder: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from reasearch.models.testing import FakeAnthropicServer

    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    run_dir = tmp_path / "runs"
    with FakeAnthropicServer([], fail_first=[400]) as server:
        code = main(["optimize", str(folder), "--model", "claude-haiku-4-5", "--base-url", server.url,
                     "--run-dir", str(run_dir), "--quiet"])
    assert code == 3, capsys.readouterr().err  # interrupted, resumable
    (record,) = open_store(run_dir).list_runs()
    capsys.readouterr()
    _set(folder, "score.py", "worst = min(gaps)", "worst = max(gaps)")
    (folder / "notes.md").write_text("a new file\n")
    assert main(["resume", record.id, "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"{folder.resolve()} changed since this run was stored (score.py changed, notes.md added)" in err
    (again,) = open_store(run_dir).list_runs()
    assert again.state is RunState.INTERRUPTED and again.updated_at == record.updated_at  # nothing was done
    assert main(["replay", record.id, "--run-dir", str(run_dir), "--into", str(tmp_path / "replay")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "changed since this run was stored (score.py changed, notes.md added)" in err


def test_compare_and_a_local_fleet_take_the_folder(folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(folder.parent)  # given as ./my-task: stored by its absolute path (a resume elsewhere finds it)
    store = tmp_path / "cmp"
    code = main(["compare", f"./{folder.name}", "--methods", "best-of-n", "--model", "demo", "--budget", "3",
                 "-p", f"./{folder.name}:n=5", "--run-dir", str(store), "-o", str(tmp_path / "cmp.html"), "--quiet",
                 "--id", "cmp"])
    assert code == 0, capsys.readouterr().err
    fleet_dir = tmp_path / "fleet"
    code = main(["fleet", "run", "--task", f"./{folder.name}", "--model", "demo", "--budget", "3",
                 "--run-dir", str(fleet_dir), "--quiet", "--id", "fl"])
    assert code == 0, capsys.readouterr().err
    assert open_store(store).get_fleet("cmp")["tasks"] == [str(folder.resolve())]
    assert open_store(store).get_fleet("cmp")["task_params"] == {str(folder.resolve()): {"n": 5}}
    assert open_store(fleet_dir).get_fleet("fl")["tasks"] == [str(folder.resolve())]
    content_hash = make(str(folder)).spec.params["content_hash"]
    for where in (store, fleet_dir):
        (record,) = open_store(where).list_runs()
        assert record.task_id == "my_task/spread-v1" and record.state is RunState.FINISHED
        assert record.task_spec is not None and record.task_spec.params["content_hash"] == content_hash
        best = Run.open(open_store(where), record.id).best()
        assert best is not None and best[1].score is not None


def test_export_evaluator_names_the_folder_absolutely(folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(folder.parent)
    out = tmp_path / "evaluator.py"
    assert main(["export-evaluator", f"./{folder.name}", "--for", "openevolve", "-o", str(out)]) == 0
    assert f"TASK_ID = {str(folder.resolve())!r}" in out.read_text()
    from reasearch.adapters._program import close_sandboxes
    from reasearch.adapters.openevolve import evaluate_program

    program = tmp_path / "even.py"
    program.write_text("def solve(n):\n    return [i / (n - 1) for i in range(n)]\n")
    monkeypatch.chdir(tmp_path)  # the other optimizer runs it from its own folder
    try:
        res = evaluate_program(str(folder.resolve()), str(program))
    finally:
        close_sandboxes()  # the adapters' own per-process pool
    metrics = res.metrics if hasattr(res, "metrics") else res  # a dict where OpenEvolve is not installed
    assert metrics["score"] == pytest.approx(0.25)


def test_a_missing_folder_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", str(tmp_path / "nope"), str(tmp_path / "x.py")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such task folder" in err
    (tmp_path / "empty").mkdir()
    assert main(["tasks", str(tmp_path / "empty"), "--params"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "task.toml: no such file" in err and "reasearch new-task NAME" in err


@pytest.mark.parametrize("command", ["compare", "fleet"])
def test_compare_and_fleet_refuse_a_broken_folder_before_storing_anything(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str,
) -> None:
    _set(folder, "score.py", "    worst = min(gaps)", "    worst = min(gaps) / 0")
    store = tmp_path / "store"
    args = (["compare", str(folder), "--methods", "best-of-n", "--model", "demo", "--budget", "2", "--run-dir",
             str(store), "-o", str(tmp_path / "c.html"), "--quiet"] if command == "compare"
            else ["fleet", "run", "--task", str(folder), "--model", "demo", "--budget", "2", "--run-dir", str(store),
                  "--quiet"])
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"score.py line {_line(folder, 'score.py', '/ 0')}: score() raised" in err, err
    assert not store.exists() or open_store(store).list_runs() == []


def test_a_fleet_spec_file_reads_a_relative_folder_against_its_own_folder(folder: Path, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    specs = tmp_path / "specs" / "deep"
    specs.mkdir(parents=True)
    spec = specs / "fleet.toml"
    spec.write_text(f'tasks = ["../../{folder.name}"]\nmodels = ["demo"]\nbudget = {{evaluations = 3}}\n\n'
                    f'[task_params."../../{folder.name}"]\nn = 4\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # ../../my-task from here does not exist: the spec file's folder decides
    fleet_dir = tmp_path / "fleet"
    code = main(["fleet", "run", "--spec", str(spec), "--run-dir", str(fleet_dir), "--quiet", "--id", "fs"])
    assert code == 0, capsys.readouterr().err
    stored = open_store(fleet_dir).get_fleet("fs")
    assert stored["tasks"] == [str(folder.resolve())]
    assert stored["task_params"] == {str(folder.resolve()): {"n": 4}}
    (record,) = open_store(fleet_dir).list_runs()
    assert record.state is RunState.FINISHED and record.task_spec is not None
    assert record.task_spec.params["params"] == {"n": 4}


@pytest.mark.parametrize("fmt", ["openevolve", "shinka"])
def test_an_exported_evaluator_pins_the_folders_content(folder: Path, tmp_path: Path, fmt: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import runpy
    import sys

    from reasearch.adapters._program import close_sandboxes

    out = tmp_path / "evaluator.py"
    assert main(["export-evaluator", str(folder), "--for", fmt, "-o", str(out)]) == 0
    capsys.readouterr()
    content_hash = make(str(folder)).spec.params["content_hash"]
    assert content_hash in out.read_text()
    program = tmp_path / "even.py"
    program.write_text("def solve(n):\n    return [i / (n - 1) for i in range(n)]\n")
    _set(folder, "score.py", "worst = min(gaps)", "worst = max(gaps)")  # the folder changes after the export
    try:
        if fmt == "openevolve":
            evaluate = runpy.run_path(str(out))["evaluate"]
            with pytest.raises(TaskFolderError, match=r"changed since this run was stored \(score\.py changed\)"):
                evaluate(str(program))
        else:
            with pytest.raises(SystemExit) as exit_info:
                argv, sys.argv = sys.argv, [str(out), "--program_path", str(program), "--results_dir",
                                            str(tmp_path / "results")]
                try:
                    runpy.run_path(str(out), run_name="__main__")
                finally:
                    sys.argv = argv
            assert exit_info.value.code == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and "changed since this run was stored (score.py changed)" in err, err
            assert not (tmp_path / "results" / "metrics.json").exists()
        assert main(["export-evaluator", str(folder), "--for", "openevolve", "-o", str(out)]) == 0  # exported anew
        metrics = runpy.run_path(str(out))["evaluate"](str(program))
        metrics = metrics.metrics if hasattr(metrics, "metrics") else metrics
        assert metrics["score"] == pytest.approx(0.25)  # max gap of even points (the changed score.py)
    finally:
        close_sandboxes()
