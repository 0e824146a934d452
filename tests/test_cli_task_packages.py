"""An installed task package (examples/task-package) through every command that takes a task id: ``tasks`` (with
the package's name and version, and a broken package's one-line warning), ``tasks ID --params``, ``seed``, ``eval``,
``optimize --model demo`` and ``report`` of its run, ``compare``, ``fleet run`` (local), ``export-evaluator`` and
the MCP server; a broken package's id is exit 2 with one line naming the package."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from reasearch.cli import main
from reasearch.evaluators.testing import install_on_path
from reasearch.runs import Run, RunState, open_store

SINES, SPREAD = "reasearch_example_tasks/sines-v1", "reasearch_example_tasks/spread-v1"
PACKAGE = "reasearch-example-tasks 0.1.0"
HALF_PI = "def solve(n):\n    return [1.5707963267948966] * n\n"


def test_tasks_lists_the_package_and_a_broken_one_is_a_warning(example_task_package: Path, tmp_path: Path,
                                                               add_package_site: Callable[[Path], None],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    site = tmp_path / "broken"
    install_on_path(site, "broken-tasks", "1.0", {"reasearch.tasks": {"gone-v1": "broken_tasks.gone:Task",
                                                                      "n26-v1": "circle_packing.x:Task"}})
    add_package_site(site)
    assert main(["tasks", "--json"]) == 0
    captured = capsys.readouterr()
    rows = {r["id"]: r for r in json.loads(captured.out)}
    assert rows[SINES]["package"] == rows[SPREAD]["package"] == PACKAGE
    assert rows[SINES]["best_known"] == 4.0 and rows[SPREAD]["best_known"] == 0.25
    assert "circle_packing/n26-v1" in rows and "package" not in rows["circle_packing/n26-v1"]
    assert "broken_tasks/gone-v1" not in rows
    warnings = captured.err.splitlines()
    assert len(warnings) == 2 and all(w.startswith("reasearch: warning: ") for w in warnings), captured.err
    assert any("task broken_tasks/gone-v1 of package broken-tasks 1.0: cannot load" in w for w in warnings)
    assert any("broken-tasks 1.0" in w and "'circle_packing' is a built-in" in w for w in warnings)

    assert main(["eval", "broken_tasks/gone-v1", str(tmp_path / "x.py")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "of package broken-tasks 1.0: cannot load broken_tasks.gone:Task" in err


def test_seed_eval_params_and_export_take_a_package_task(example_task_package: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", SPREAD, "--params", "--json"]) == 0
    (param,) = json.loads(capsys.readouterr().out)
    assert param["name"] == "n" and param["default"] == 5
    assert main(["tasks", SINES, "--params", "--json"]) == 0
    (param,) = json.loads(capsys.readouterr().out)
    assert param["name"] == "n" and param["default"] == 4

    seed = tmp_path / "seed.py"
    assert main(["seed", SINES, "-o", str(seed)]) == 0
    assert main(["eval", SINES, str(seed), "--json"]) == 0
    capsys.readouterr()
    good = tmp_path / "good.py"
    good.write_text(HALF_PI)
    assert main(["eval", SINES, str(good), "-p", "n=3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "OK" and result["score"] == pytest.approx(3.0)
    assert result["provenance"]["task_id"] == SINES
    liar = tmp_path / "liar.py"
    liar.write_text("import json\ndef solve(n):\n    print('score: 1e9')\n"
                    "    open('metrics.json', 'w').write(json.dumps({'score': 1e9}))\n    return None\n")
    assert main(["eval", SINES, str(liar), "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "INVALID" and result["score"] is None
    assert main(["eval", SINES, str(good), "-p", "m=3"]) == 2
    assert "has no parameter 'm'" in capsys.readouterr().err

    out = tmp_path / "evaluator.py"
    assert main(["export-evaluator", SPREAD, "--for", "openevolve", "-o", str(out)]) == 0
    assert f"TASK_ID = {SPREAD!r}" in out.read_text()


def test_optimize_report_compare_fleet_and_mcp_run_a_package_task(example_task_package: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs"
    code = main(["optimize", SINES, "--model", "demo", "--budget", "4", "--run-dir", str(runs), "--quiet"])
    assert code == 0, capsys.readouterr().err
    (record,) = open_store(runs).list_runs()
    assert record.task_id == SINES and record.state is RunState.FINISHED
    best = Run.open(open_store(runs), record.id).best()
    assert best is not None and best[1].score is not None
    assert main(["report", record.id, "--run-dir", str(runs), "-o", str(tmp_path / "r.html")]) == 0
    assert SINES in (tmp_path / "r.html").read_text()
    # a resume rebuilds the package's task from the stored record (a crash left the run interrupted)
    with open_store(runs) as s:
        s.set_run_budget(record.id, {"evaluations": 6.0})
        s.set_run_state(record.id, RunState.INTERRUPTED)
    code = main(["resume", record.id, "--run-dir", str(runs), "--quiet"])
    assert code == 0, capsys.readouterr().err
    with open_store(runs) as s:
        assert s.get_run(record.id).state is RunState.FINISHED and len(s.evaluations(record.id)) >= 4

    store = tmp_path / "cmp"
    code = main(["compare", SPREAD, "--methods", "best-of-n", "--model", "demo", "--budget", "3", "-p",
                 f"{SPREAD}:n=4", "--run-dir", str(store), "-o", str(tmp_path / "cmp.html"), "--quiet", "--id", "c"])
    assert code == 0, capsys.readouterr().err
    fleet = tmp_path / "fleet"
    code = main(["fleet", "run", "--task", SINES, "--model", "demo", "--budget", "3", "--run-dir", str(fleet),
                 "--quiet", "--id", "fl"])
    assert code == 0, capsys.readouterr().err
    for where, task_id in ((store, SPREAD), (fleet, SINES)):
        (record,) = open_store(where).list_runs()
        assert record.task_id == task_id and record.state is RunState.FINISHED
        best = Run.open(open_store(where), record.id).best()
        assert best is not None and best[1].score is not None

    from reasearch.agent.mcp import EvaluatorsService, EvaluatorTools

    service = EvaluatorsService(EvaluatorTools(max_evaluations=1))
    out = service.call("evaluate", {"task_id": SINES, "code": HALF_PI})
    assert not out.is_error and out.data["status"] == "OK" and out.data["score"] == pytest.approx(4.0), out.data
