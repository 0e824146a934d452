"""A task folder's optional cheap first stage (``[stage1]`` in task.toml): the candidate first runs on the quick
instance; a failure there (a crash, an answer score.py rejects, a score past min_score) is the result and the full
run never happens; a pass records the stage's verdict beside the full score. The seed must pass its own stage, and
a [stage1] that names an undeclared parameter is one line naming task.toml's line."""

from __future__ import annotations

from pathlib import Path

import pytest

from reasearch.errors import TaskFolderError
from reasearch.evaluators.checker import check_task
from reasearch.evaluators.folder import write_example_folder
from reasearch.evaluators.registry import make
from reasearch.evaluators.result import Status

STAGE1 = "\n[stage1]\nparams = { n = 2 }\nmin_score = 0.05\ntime_limit_s = 5\n"
# Quick run (n = 2): a bad answer. Full run (n = 5): would sleep past every limit (a TIMEOUT, were it run).
BAD_QUICK = "import time\ndef solve(n):\n    if n != 2:\n        time.sleep(600)\n    return [0.0] * n\n"
CRASH_QUICK = "import time\ndef solve(n):\n    if n != 2:\n        time.sleep(600)\n    raise RuntimeError('boom')\n"
EVEN = "def solve(n):\n    return [i / (n - 1) for i in range(n)]\n"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    path = write_example_folder(tmp_path / "spread")
    with open(path / "task.toml", "a", encoding="utf-8") as fh:
        fh.write(STAGE1)
    return path


def test_a_candidate_failing_stage1_gets_no_score_and_no_full_run(folder: Path) -> None:
    task = make(str(folder))
    low = task.evaluate(BAD_QUICK)
    assert low.status is Status.INVALID and low.score is None  # not TIMEOUT: the full run was never started
    assert low.metrics["failure_stage"] == "stage1" and low.metrics["stage1_passed"] is False
    assert low.metrics["stage1_score"] == 0.0 and "below its min_score 0.05" in low.feedback
    crash = task.evaluate(CRASH_QUICK)
    assert crash.status is Status.CRASH and crash.score is None and "boom" in crash.feedback
    assert crash.metrics["failure_stage"] == "stage1" and crash.metrics["stage1_status"] == "CRASH"
    liar = task.evaluate("def solve(n):\n    print('score: 1.0')\n    return 'score: 1.0'\n")
    assert liar.status is Status.INVALID and liar.score is None and liar.metrics["failure_stage"] == "stage1"


def test_a_candidate_passing_stage1_is_scored_in_full_with_the_stage_recorded(folder: Path) -> None:
    task = make(str(folder))
    result = task.evaluate(EVEN)
    assert result.status is Status.OK and result.score == pytest.approx(0.25)  # the full run's n = 5
    assert result.metrics["stage1_passed"] is True and result.metrics["stage1_score"] == pytest.approx(1.0)
    assert "failure_stage" not in result.metrics
    assert "Stage 1: each candidate first runs with n = 2" in task.describe()
    assert check_task(task).ok


def test_the_seed_must_pass_its_stage1_and_a_bad_stage1_is_one_line(folder: Path) -> None:
    toml = folder / "task.toml"
    toml.write_text(toml.read_text().replace("min_score = 0.05", "min_score = 0.5"))  # the seed's n = 2 gap is 0.1
    line = next(i for i, t in enumerate(toml.read_text().splitlines(), 1) if t == "[stage1]")
    with pytest.raises(TaskFolderError) as info:
        make(str(folder)).preflight()
    assert str(info.value).startswith(f"{toml} line {line}: the seed fails its own stage 1 (n = 2): scored 0.1")
    toml.write_text(toml.read_text().replace("params = { n = 2 }", "params = { m = 2 }"))
    with pytest.raises(TaskFolderError) as info:
        make(str(folder))
    assert str(info.value) == (f"{toml} line {line + 1}: [stage1] params: 'm' is not a declared parameter "
                               "(declared: n); declare it under [params.m]")
