"""Task folders (``reasearch.make(PATH)``): the example passes ``check_task`` in both sandbox modes, a hostile
candidate gets no score, score.py's output is checked, and each folder mistake is one line naming file and line."""

from __future__ import annotations

import math
import pickle
import re
from pathlib import Path
from typing import Any

import pytest

import reasearch
from reasearch.engine import SandboxPool
from reasearch.errors import ConfigError, TaskFolderError
from reasearch.evaluators.checker import check_task
from reasearch.evaluators.folder import FolderTask, write_example_folder
from reasearch.evaluators.result import Status


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return write_example_folder(tmp_path / "spread")


def _set(folder: Path, file: str, old: str, new: str) -> None:
    text = (folder / file).read_text()
    assert old in text, f"{old!r} not in {file}"
    (folder / file).write_text(text.replace(old, new, 1))


def _line(folder: Path, file: str, needle: str) -> int:
    return next(i for i, line in enumerate((folder / file).read_text().splitlines(), 1) if needle in line)


def test_the_example_folder_passes_check_task(folder: Path, pool: SandboxPool) -> None:
    task = reasearch.make(str(folder))
    report = check_task(task, executor=pool)
    assert report.ok, report.failed
    res = report.seed_result
    assert res is not None and res.provenance is not None and res.provenance.sandbox_mode == pool.mode
    assert res.score == pytest.approx(0.1) and res.metrics["instances"] == pytest.approx([0.1] * 4)
    assert res.provenance.params["content_hash"] == task.spec.params["content_hash"]
    assert "files" not in res.provenance.params and set(task.spec.params["files"]) == {  # per-file: in the spec only
        "task.toml", "description.md", "seed.py", "score.py"}
    assert len(task.spec.params["content_hash"]) == 64


def test_a_better_candidate_scores_higher_and_params_reach_both_sides(folder: Path, pool: SandboxPool) -> None:
    task = reasearch.make(str(folder), n=3)
    res = task.evaluate("def solve(n, seed):\n    return [i / (n - 1) for i in range(n)]\n", executor=pool)
    assert res.status is Status.OK and res.score == pytest.approx(0.5)
    assert task.spec.best_known is None  # the folder's best known holds for its default parameters only
    with pytest.raises(ConfigError, match=r"parameter n of spread/spread-v1 takes an integer >= 2 and <= 1000"):
        reasearch.make(str(folder), n=1)
    with pytest.raises(ConfigError, match="has no parameter 'm'"):
        reasearch.make(str(folder), m=3)


HOSTILE = {
    "sleeps": "import time\n\ndef solve(n):\n    time.sleep(60)\n    return [i / (n - 1) for i in range(n)]\n",
    "fork_bomb": "import os\n\ndef solve(n):\n    while True:\n        try:\n            os.fork()\n"
                 "        except OSError:\n            pass\n",
    "prints_a_fake_score": "def solve(n):\n    print('{\"score\": 1e9, \"status\": \"OK\"}')\n    print('score: 1e9')\n"
                           "    return 'a perfect answer'\n",
    "returns_nan": "def solve(n):\n    return [float('nan')] * n\n",
    "returns_an_object": "def solve(n):\n    class P:\n        def __float__(self):\n            return 0.5\n"
                         "    return [P()] * n\n",
    "returns_too_much": "def solve(n):\n    return ['x' * 1_000_000] * 6\n",
    "nests_deeply": "def solve(n):\n    x = []\n    for _ in range(100_000):\n        x = [x]\n    return x\n",
    "nests_just_under_the_wire": "def solve(n):\n    x = [0.5]\n    for _ in range(600):\n        x = [x]\n"
                                 "    return [x] * n\n",
}


# The candidates that run until the wall limit get the smallest one that still proves the point (the verdict is
# asserted, never the time); the others end by themselves and keep 2 s. The fork bomb's own children keep its
# main thread waiting for a CPU, and that wait is not counted (docs/engine.md, "Under load"): it runs to the
# outer bound, 8 x its limit (4 s at 0.5 s), so it gets the smallest limit of all.
_RUNS_TO_THE_LIMIT = {"sleeps": "0.5", "fork_bomb": "0.25"}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_candidate_gets_no_score(folder: Path, pool: SandboxPool, name: str) -> None:
    _set(folder, "task.toml", "time_limit_s = 10", f"time_limit_s = {_RUNS_TO_THE_LIMIT.get(name, '2')}")
    task = reasearch.make(str(folder))
    res = task.evaluate(HOSTILE[name], executor=pool)
    assert res.status is not Status.OK and res.score is None, (res.status, res.feedback)
    if name in _RUNS_TO_THE_LIMIT:  # the sleeper and the fork bomb are both stopped by the wall limit
        assert res.status is Status.TIMEOUT, (res.status, res.feedback)


def test_a_candidate_that_rewrites_score_py_gets_no_score(pool: SandboxPool) -> None:
    import shutil
    import tempfile

    # A folder the candidate's uid may write (the rlimit-only mode has no filesystem isolation): the attack lands
    # there, and the task must still score with the score.py it read before any candidate ran.
    root = Path(tempfile.mkdtemp(prefix="reasearch-folder-"))
    try:
        root.chmod(0o777)
        folder = write_example_folder(root / "spread")
        folder.chmod(0o777)
        target = folder / "score.py"
        target.chmod(0o666)
        original = target.read_text()
        evil = (f"def solve(n):\n    try:\n        open({str(target)!r}, 'w')"
                ".write('def score(r, p):\\n    return 1e9\\n')\n    except OSError:\n        pass\n"
                "    return 'garbage'\n")
        task = reasearch.make(str(folder))
        res = task.evaluate(evil, executor=pool)
        assert res.status is Status.INVALID and res.score is None
        again = task.evaluate("def solve(n):\n    return 'garbage'\n", executor=pool)
        assert again.score is None
        if pool.mode == "nsjail":
            assert target.read_text() == original  # the jail does not see the folder at all
        else:
            assert "1e9" in target.read_text()  # the attack landed; it changed nothing this task scores with
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_score_py_output_is_checked(folder: Path) -> None:
    task: Any = reasearch.make(str(folder))
    good = [0.0, 0.25, 0.5, 0.75, 1.0]
    assert task.score_solution(good).score == pytest.approx(0.25)
    def_line = _line(folder, "score.py", "def score(")
    for body, why in [
        ("return float('nan')", "returned nan"),
        ("return 'high'", "returned 'high'"),
        ("return True", "returned True"),
        ("return {'score': 1.0, 'extra': 2}", "keys ['extra', 'score']"),
        ("return {'score': 1.0, 'instances': [1.0, float('inf')]}", "instances must be a list"),
        ("return {'score': 1.0, 'feedback': 3}", "feedback must be text"),
    ]:
        _set(folder, "score.py", "    return {\"score\": worst", f"    {body}\n    return {{\"score\": worst")
        res = reasearch.make(str(folder)).score_solution(good)
        assert res.status is Status.INVALID and res.score is None, body
        assert f"score.py line {def_line}: " in res.feedback and why in res.feedback, res.feedback
        (folder / "score.py").write_text((folder / "score.py").read_text().replace(f"    {body}\n", ""))
    _set(folder, "score.py", "\"feedback\": f\"smallest", "\"feedback\": 'y' * 10**6 + f\"smallest")
    res = reasearch.make(str(folder)).score_solution(good)
    assert res.status is Status.OK and len(res.feedback) < 2100  # bounded feedback text


def test_a_score_py_that_raises_on_the_seed_names_its_line(folder: Path, pool: SandboxPool) -> None:
    _set(folder, "score.py", "    worst = min(gaps)", "    worst = min(gaps) / 0")
    task: Any = reasearch.make(str(folder))
    with pytest.raises(TaskFolderError) as info:
        task.preflight(executor=pool)
    line = _line(folder, "score.py", "/ 0")
    msg = str(info.value)
    assert "\n" not in msg and f"score.py line {line}: score() raised ZeroDivisionError" in msg
    assert "on the seed's output (seed.py); fix score.py" in msg


def test_a_seed_that_fails_its_own_task_names_its_line(folder: Path, pool: SandboxPool) -> None:
    _set(folder, "seed.py", "    return [0.1 * i", "    raise RuntimeError('not yet')\n    return [0.1 * i")
    task: Any = reasearch.make(str(folder))
    with pytest.raises(TaskFolderError) as info:
        task.preflight(executor=pool)
    msg = str(info.value)
    line = _line(folder, "seed.py", "raise RuntimeError")
    assert "\n" not in msg and f"seed.py line {line}: the seed fails its own task (CRASH" in msg, msg
    assert "not yet" in msg


FOLDER_MISTAKES = [
    ("task.toml", "entry_point = \"solve\"", "entry_point = \"slove\"", "task.toml", "entry_point",
     r"entry_point = 'slove', but seed.py defines 'solve' \(line 1\); did you mean entry_point = 'solve'\?"),
    ("seed.py", "def solve(n):", "def run(n):", "task.toml", "entry_point",
     r"seed.py defines run; define def solve\(...\) in seed.py or fix entry_point"),
    ("task.toml", "type = \"int\"\n", "", "task.toml", "[params.n]",
     r"parameter n has no type; add type = \"int\""),
    ("task.toml", "type = \"int\"", "type = \"integer\"", "task.toml", "type = ",
     r"parameter n: type must be one of int, float, str, bool, not 'integer'"),
    ("task.toml", "direction = \"maximize\"", "direction = \"max\"", "task.toml", "direction",
     r"direction must be \"maximize\" or \"minimize\""),
    ("task.toml", "memory_mb = 1024", "memory_mb = 1024\nmemroy = 3", "task.toml", "memroy",
     r"unknown key 'memroy'; did you mean 'memory_mb'\?"),
    ("task.toml", "default = 5", "default = 1", "task.toml", "default = ",
     r"parameter n: default 1 is not an integer >= 2 and <= 1000"),
    ("seed.py", "def solve(n):", "def solve(n:", "seed.py", "def solve(n:", r"syntax error"),
    ("task.toml", "seed = \"seed.py\"", "seed = \"sead.py\"", "task.toml", "seed = ",
     r"seed = 'sead.py': no such file"),
]


@pytest.mark.parametrize(("file", "old", "new", "named", "needle", "why"), FOLDER_MISTAKES,
                         ids=[m[-1][:30] for m in FOLDER_MISTAKES])
def test_a_folder_mistake_is_one_line_naming_the_file_and_line(folder: Path, file: str, old: str, new: str,
                                                               named: str, needle: str, why: str) -> None:
    _set(folder, file, old, new)
    with pytest.raises(TaskFolderError) as info:
        reasearch.make(str(folder))
    msg = str(info.value)
    assert "\n" not in msg
    assert f"{folder / named} line {_line(folder, named, needle)}: " in msg, msg
    assert re.search(why, msg), msg


def test_a_score_py_without_score_is_named(folder: Path) -> None:
    _set(folder, "score.py", "def score(returned, params):", "def scores(returned, params):")
    line = _line(folder, "score.py", "def scores(")
    with pytest.raises(TaskFolderError, match=rf"score.py line {line}: no function score\(returned, params\); "
                                              r"rename scores\(\) to score\(\)"):
        reasearch.make(str(folder))


def test_a_rebuilt_task_refuses_a_changed_folder_naming_the_files(folder: Path) -> None:
    task = reasearch.make(str(folder))
    spec = task.spec
    assert reasearch.make(spec).spec == spec  # unchanged: rebuilds
    clone = pickle.loads(pickle.dumps(task))
    _set(folder, "score.py", "worst = min(gaps)", "worst = max(gaps)")
    (folder / "notes.txt").write_text("new")
    (folder / "description.md").unlink()
    for rebuild in (lambda: reasearch.make(spec).spec, lambda: FolderTask(**clone.__dict__).spec):
        with pytest.raises(TaskFolderError) as info:
            rebuild()
        msg = str(info.value)
        assert "changed since this run was stored (score.py changed, description.md removed, notes.txt added)" in msg
    (folder / "description.md").write_text("Spread the points.\n")
    assert reasearch.make(str(folder), n=5).spec.params["content_hash"] != spec.params["content_hash"]


def test_a_symlink_in_the_folder_is_refused(folder: Path, tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_text("x")
    (folder / "data.txt").symlink_to(tmp_path / "outside.txt")
    with pytest.raises(TaskFolderError, match="holds no symbolic links"):
        reasearch.make(str(folder))


def test_the_seed_score_is_the_one_recorded(folder: Path) -> None:
    task = reasearch.make(str(folder))
    assert task.spec.seed_score == 0.1 and math.isclose(task.spec.best_known or 0, 0.25)
    assert task.spec.id == "spread/spread-v1" and task.spec.task_class == "reasearch.evaluators.folder:FolderTask"


def test_a_deeply_nested_answer_is_invalid_not_an_exception(folder: Path) -> None:
    nested: list[Any] = [0.5]
    for _ in range(5000):
        nested = [nested]
    res = reasearch.make(str(folder)).score_solution(nested)
    assert res.status is Status.INVALID and res.score is None and "nests too deeply" in res.feedback
