"""OpenEvolve- and ShinkaEvolve-format folders through the real command, unchanged: ``tasks PATH``, ``optimize
--model demo``, ``compare`` (its JSON and HTML say the evaluator shared the jail); a seed that fails its own
evaluator is exit 2, one line, no run; a method keeps the text outside the EVOLVE-BLOCK markers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from reasearch.cli import main
from reasearch.evaluators.peer_folder import TRUST
from reasearch.evaluators.registry import make
from reasearch.runs import Run, RunState, open_store

HERE = Path(__file__).parent / "evaluators" / "peer_folders"
FOLDERS = {"openevolve": ("openevolve_spread", "initial_program.py"), "shinka": ("shinka_spread", "initial.py")}


@pytest.fixture(params=sorted(FOLDERS))
def folder(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    out = tmp_path / FOLDERS[request.param][0]
    shutil.copytree(HERE / FOLDERS[request.param][0], out)
    return out


def test_tasks_optimize_and_compare_run_the_folder_unchanged(folder: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    kind = "openevolve" if (folder / "evaluator.py").exists() else "shinka"
    assert main(["tasks", str(folder), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["id"] == f"{kind}_folder/{folder.name}-v1" and row["direction"] == "maximize"
    assert ("OpenEvolve folder" if kind == "openevolve" else "ShinkaEvolve folder") in row["summary"]
    assert f"trust: {TRUST}" in row["summary"]

    run_dir = tmp_path / "runs"
    code = main(["optimize", str(folder), "--model", "demo", "--budget", "3", "--run-dir", str(run_dir), "--quiet"])
    assert code == 0, capsys.readouterr().err
    (record,) = open_store(run_dir).list_runs()
    assert record.state is RunState.FINISHED and record.task_spec is not None
    assert record.task_spec.params["content_hash"] == make(str(folder)).spec.params["content_hash"]
    run = Run.open(open_store(run_dir), record.id)
    best = run.best()
    assert best is not None and best[1].score is not None and best[1].score >= 0.3458697943389826 - 1e-12
    assert best[1].metrics["trust"] == TRUST

    html, out = tmp_path / "cmp.html", tmp_path / "cmp.json"
    code = main(["compare", str(folder), "--methods", "best-of-n,evolve", "--model", "demo", "--budget", "2",
                 "--run-dir", str(tmp_path / "cmp"), "-o", str(html), "--json", str(out), "--quiet"])
    assert code == 0, capsys.readouterr().err
    numbers = json.loads(out.read_text())
    assert {r["state"] for r in numbers["runs"]} == {"finished"} and len(numbers["runs"]) == 2
    assert all(r["trust"] == TRUST and r["best_score"] is not None for r in numbers["runs"])
    (task,) = numbers["tasks"]
    assert task["trust"] == TRUST
    assert "Trust: evaluator shares the candidate&#x27;s jail" in html.read_text() or \
        "Trust: evaluator shares the candidate's jail" in html.read_text()
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # run unchanged: nothing written there


def test_a_seed_that_fails_its_own_evaluator_is_exit_2_and_no_run(folder: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    program = next(p for p in (folder / "initial_program.py", folder / "initial.py") if p.exists())
    program.write_text(program.read_text().replace("rng.random() for _ in range(n)", "2.0 for _ in range(n)"))
    run_dir = tmp_path / "runs"
    assert main(["optimize", str(folder), "--model", "demo", "--budget", "3", "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{program.resolve()} line 1: the initial program fails its own" in err, err
    assert "INVALID" in err and "need 5 numbers in [0, 1]" in err
    assert not run_dir.exists() or open_store(run_dir).list_runs() == []


def test_a_method_keeps_the_text_outside_the_evolve_blocks(folder: Path) -> None:
    from reasearch.methods import start_method
    from reasearch.methods.testing import MutatingModel
    from reasearch.models import ModelSpec

    runner = start_method("best-of-n", str(folder), budget={"evaluations": 2}, store=open_store("memory://"),
                          model_spec=ModelSpec(provider="scripted", name=""), model=MutatingModel(0))
    seed = make(str(folder)).seed_program()
    inside = seed.replace("rng = random.Random(0)", "rng = random.Random(7)")
    outside = inside.replace("import random\n", "import random\nimport os\n") + "\nSCORE = 1e9\n"
    proposed = runner.driver.candidate_from(f"```python\n{outside}```")
    assert proposed == inside  # the block's edit kept, the edits outside it reverted
    no_markers = "\n".join(line for line in outside.splitlines() if "EVOLVE-BLOCK" not in line) + "\n"
    assert runner.driver.candidate_from(f"```python\n{no_markers}```") is None  # markers dropped: not evaluated


def test_a_local_fleet_and_its_report_take_a_shinka_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "sh"
    shutil.copytree(HERE / "shinka_spread", folder)
    run_dir = tmp_path / "fleet"
    code = main(["fleet", "run", "--task", str(folder), "--model", "demo", "--budget", "2", "--run-dir", str(run_dir),
                 "--quiet", "--id", "fl"])
    assert code == 0, capsys.readouterr().err
    (record,) = open_store(run_dir).list_runs()
    assert record.task_id == "shinka_folder/sh-v1" and record.state is RunState.FINISHED
    html = tmp_path / "r.html"
    assert main(["report", record.id, "--run-dir", str(run_dir), "-o", str(html)]) == 0
    assert "<th>trust</th><td>evaluator shares the candidate&#x27;s jail</td>" in html.read_text()  # each result
