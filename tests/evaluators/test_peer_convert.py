"""``reasearch convert-task``: an OpenEvolve folder of the common shape becomes the split form (check_task passes,
the seed scores as the folder's own evaluator scores it, and a candidate that wins by patching its evaluator in the
shared jail gets its honest score); any other shape is exit 2 with one line saying why, and nothing is written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import reasearch
from reasearch.cli import main
from reasearch.evaluators.checker import check_task
from reasearch.evaluators.folder import FolderTask
from reasearch.evaluators.peer_folder import TRUST

HERE = Path(__file__).parent / "peer_folders"
PATCHER = ("import sys\nev = sys.modules.get('evaluation_module')\nif ev is not None:\n    ev.min = lambda *a: 1.0\n\n"
           "def run_spread():\n    return [0.0, 0.1, 0.2, 0.3, 0.4]\n")

# The shape of OpenEvolve's function-minimization example, written here: the function is handed to a timeout
# helper, called in a loop of trials, returns a tuple, and the evaluator imports OpenEvolve's result type.
TRIALS_EVALUATOR = '''"""Trials of a search: the closer to (1, 2), the better."""
import concurrent.futures
import importlib.util

from openevolve.evaluation_result import EvaluationResult


def run_with_timeout(func, timeout_seconds=5):
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(func).result(timeout=timeout_seconds)


def evaluate(program_path):
    spec = importlib.util.spec_from_file_location("program", program_path)
    program = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(program)
    if not hasattr(program, "run_search"):
        return {"combined_score": 0.0, "error": "no run_search"}
    distances = []
    for _ in range(3):
        result = run_with_timeout(program.run_search, timeout_seconds=5)
        if not isinstance(result, tuple) or len(result) != 2:
            return EvaluationResult(metrics={"combined_score": 0.0, "error": "want a tuple (x, y)"})
        x, y = result
        distances.append(((x - 1.0) ** 2 + (y - 2.0) ** 2) ** 0.5)
    return EvaluationResult(metrics={"combined_score": 1.0 / (1.0 + max(distances))}, artifacts={"n": "3"})
'''
TRIALS_PROGRAM = "# EVOLVE-BLOCK-START\ndef run_search():\n    x, y = 0.0, 0.0\n    return x, y\n# EVOLVE-BLOCK-END\n"


def _copy(tmp_path: Path) -> Path:
    out = tmp_path / "oe"
    shutil.copytree(HERE / "openevolve_spread", out)
    return out


def test_the_openevolve_example_converts_and_its_candidate_cannot_touch_its_score(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _copy(tmp_path)
    out = tmp_path / "split"
    assert main(["convert-task", str(folder), str(out)]) == 0, capsys.readouterr().err
    assert "oe/split-v1" in capsys.readouterr().out
    split = reasearch.make(str(out))
    assert isinstance(split, FolderTask) and check_task(split).ok
    shared = reasearch.make(str(folder))
    seed = shared.seed_program()
    assert split.evaluate(seed, seed=0).score == pytest.approx(shared.evaluate(seed, seed=0).score)
    assert split.describe().startswith("Place 5 numbers in [0, 1]")  # config.yaml's system message

    cheat = shared.evaluate(PATCHER, seed=0)  # in the shared jail the patch wins, and the result says so
    assert cheat.score == pytest.approx(4.0) and cheat.metrics["trust"] == TRUST
    honest = split.evaluate(PATCHER, seed=0)  # split: the evaluator's code runs where the candidate is not
    assert honest.ok and honest.score == pytest.approx(0.1 / 0.25) and "trust" not in honest.metrics


def test_a_function_handed_to_a_helper_in_a_loop_converts(tmp_path: Path) -> None:
    folder = tmp_path / "trials"
    folder.mkdir()
    (folder / "evaluator.py").write_text(TRIALS_EVALUATOR)
    (folder / "initial_program.py").write_text(TRIALS_PROGRAM)
    shared = reasearch.make(str(folder))
    from reasearch.evaluators.peer_convert import convert_peer_folder

    split = reasearch.make(str(convert_peer_folder(folder, tmp_path / "split")))
    assert check_task(split).ok
    for program in (TRIALS_PROGRAM, TRIALS_PROGRAM.replace("0.0, 0.0", "1.0, 1.5")):
        a, b = shared.evaluate(program, seed=0), split.evaluate(program, seed=0)
        assert a.ok and b.ok and a.score == pytest.approx(b.score), (a, b)  # a tuple again on the trusted side
    wrong = split.evaluate(TRIALS_PROGRAM.replace("return x, y", "return [x, y, 0.0]"), seed=0)
    assert wrong.status.value == "INVALID" and "want a tuple (x, y)" in wrong.feedback


NOT_COMMON = {
    "subprocess": ("import subprocess\n\ndef evaluate(program_path):\n"
                   "    out = subprocess.run(['python', program_path], capture_output=True)\n"
                   "    return {'combined_score': float(out.stdout)}\n", "does not load the program as one module"),
    "two functions": ("import importlib\n\ndef evaluate(program_path):\n    p = importlib.import_module('x')\n"
                      "    return {'combined_score': p.run_spread() + p.spread_points(3)[0]}\n",
                      "uses 2 names of the program"),
    "computed args": ("import importlib, random\n\ndef evaluate(program_path):\n"
                      "    p = importlib.import_module('x')\n"
                      "    return {'combined_score': p.spread_points(random.randint(2, 9))[0]}\n",
                      "calls spread_points() with computed arguments"),
    "path reused": ("import importlib\n\ndef evaluate(program_path):\n    p = importlib.import_module('x')\n"
                    "    n = len(open(program_path).read())\n    return {'combined_score': p.run_spread()[0] / n}\n",
                    "uses 'program_path' at line 5"),
}


@pytest.mark.parametrize("case", sorted(NOT_COMMON))
def test_another_shape_is_refused_with_one_line(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _copy(tmp_path)
    evaluator, why = NOT_COMMON[case]
    (folder / "evaluator.py").write_text(evaluator)
    out = tmp_path / "split"
    assert main(["convert-task", str(folder), str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{folder / 'evaluator.py'}: not the common shape" in err and why in err, err
    assert not out.exists()


def test_a_shinka_folder_or_an_existing_target_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["convert-task", str(HERE / "shinka_spread"), str(tmp_path / "a")]) == 2
    assert "a ShinkaEvolve folder; convert-task converts an OpenEvolve folder" in capsys.readouterr().err
    (tmp_path / "b").mkdir()
    assert main(["convert-task", str(_copy(tmp_path)), str(tmp_path / "b")]) == 2
    assert "exists; give a new folder" in capsys.readouterr().err
