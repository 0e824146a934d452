"""Every registered task passes ``check_task`` in the real sandbox (one test per id).

Families with many ids (ARC: one id per task) contribute their first few ids, so the suite stays fast
while every task class and registration is still exercised; the training families (Atari games, MuJoCo
environments) contribute their first id only (see ``FAMILY_SAMPLE_OF``). The ARC set tasks (one program over a split's
1,000 training or 120 evaluation tasks) are checked on a fixed sample of ``ARC_SAMPLE`` tasks of their split
stratified by size (the smallest and the largest included); every task file of both splits is loaded and
validated by ``test_every_arc_task_file_parses`` (issue 27 item 5: the whole training split, twice, cost
~15 s of the suite; 100 training and all 120 evaluation tasks still ~5 s).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import reasearch
from reasearch.evaluators.arc_agi_2 import SET_IDS
from reasearch.evaluators.prompt import PromptTask
from reasearch.evaluators.prompt.testing import FakeStudentServer, conformance_data
from reasearch.evaluators.registry import registered_entry

FAMILY_SAMPLE = 3
# Training families contribute one id: each of their ids is the same task class, seed files and scoring path on
# another game or environment, and each leg costs a training jail and a scoring jail (3-6 s loaded). Two more
# games and two more environments (~16 s of a loaded suite) proved the same code path again; a second game and
# a second environment are trained and scored end to end in test_atari.py (qbert) and test_rl.py
# (InvertedPendulum).
FAMILY_SAMPLE_OF = {"atari/{game}-v1": 1, "rl/{env}-v2": 1}
ARC_SAMPLE = 40  # tasks of its split that each ARC set task (arc_agi_2/training-v1, eval-v1) is checked on

# Known slow checks, with the reason (they still run by default; `-m "not slow"` leaves them out).
SLOW: dict[str, str] = {
    "arc_agi_2/training-v1": f"evaluates {ARC_SAMPLE} of the 1,000 training tasks, seed program twice",
    "arc_agi_2/eval-v1": f"evaluates {ARC_SAMPLE} of the 120 evaluation tasks, seed program twice",
}


# Parameters that keep a check fast without changing the task's id (training tasks: seconds of budget; the RL
# and Atari seeds still train some iterations in 1 s, then save and are scored: issue 27 item 5 cut them from 3 s).
_RL_TEST_PARAMS = {"time_budget_s": 1.0, "grace_s": 20.0, "episodes": 2, "max_episode_steps": 100,
                   "eval_time_limit_s": 90.0}
_ATARI_TEST_PARAMS = {"time_budget_s": 1.0, "grace_s": 20.0, "episodes": 2, "max_frames": 400,
                      "eval_time_limit_s": 90.0}
TEST_PARAMS: dict[str, dict[str, object]] = {
    "nanogpt/v2": {"time_budget_s": 3.0, "grace_s": 20.0, "eval_tokens": 1024, "eval_time_limit_s": 90.0},
}


def _test_params(task_id: str) -> dict[str, object]:
    if task_id.startswith("atari/"):
        return _ATARI_TEST_PARAMS
    return _RL_TEST_PARAMS if task_id.startswith("rl/") else TEST_PARAMS.get(task_id, {})


def _ids_to_check() -> list[str]:
    by_entry: dict[str, list[str]] = defaultdict(list)
    for task_id in reasearch.list_tasks(include_families=False, expand=True):
        entry, _ = registered_entry(task_id)
        by_entry[entry.id].append(task_id)
    ids: list[str] = []
    for pattern, members in by_entry.items():
        ids.extend(members[:FAMILY_SAMPLE_OF.get(pattern, FAMILY_SAMPLE)] if "{" in pattern else members)
    return sorted(ids)


IDS = _ids_to_check()
PARAMS = [pytest.param(i, marks=pytest.mark.slow) if i in SLOW else i for i in IDS]


def test_the_sample_covers_every_registration() -> None:
    patterns = {registered_entry(i)[0].id for i in IDS}
    registered = set(reasearch.list_tasks(include_families=True, expand=False))
    assert patterns == registered
    assert "circle_packing/n26-v1" in IDS and "heilbronn/n15-v1" in IDS
    assert set(FAMILY_SAMPLE_OF) <= registered  # a renamed family would silently get the default sample
    assert sum(i.startswith("atari/") for i in IDS) == sum(i.startswith("rl/") for i in IDS) == 1


@pytest.fixture(scope="module")
def prompt_student(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, Any]]]:
    """Prompt tasks are checked against a local fake student (offline), on the shared GSM8K data and a
    small JSONL file: the parameters to build each prompt task with."""
    params, answers = conformance_data(shared_data / "gsm8k", tmp_path_factory.mktemp("prompt-data"))
    with FakeStudentServer(answers) as server:
        student = {"student": "openai/fake-student", "base_url": server.url}
        yield {task_id: {**p, **student} for task_id, p in params.items()}


def _cells(raw: Any) -> int:
    """Cells of every grid of an ARC task's JSON: how much its evaluation has to read and compare."""
    pairs = [*raw["train"], *raw["test"]]
    return sum(len(row) for pair in pairs for key in ("input", "output") if key in pair for row in pair[key])


def stratified_sample(ids_by_size: list[tuple[int, str]], n: int) -> list[str]:
    """``n`` ids spread evenly over the ids sorted by size (first and last included)."""
    ordered = [i for _, i in sorted(ids_by_size)]
    if n >= len(ordered):
        return ordered
    return [ordered[round(k * (len(ordered) - 1) / (n - 1))] for k in range(n)]


def test_the_arc_sample_spans_the_sizes() -> None:
    ids = [(size, f"t{size:04d}") for size in range(1000, 0, -1)]
    sample = stratified_sample(ids, 100)
    assert len(set(sample)) == 100 and sample[0] == "t0001" and sample[-1] == "t1000"
    assert stratified_sample(ids[:5], 100) == ["t0996", "t0997", "t0998", "t0999", "t1000"]


def arc_sample(split: str, root: Path) -> Path:
    """``root``, now a data folder holding ``ARC_SAMPLE`` tasks of ``split``, stratified by size."""
    from reasearch.evaluators.arc_agi_2._data import resolve_source

    source = resolve_source(None)
    raws = {i: source.raw(i, split)[0] for i in source.ids(split)}
    (root / split).mkdir()
    for task_id in stratified_sample([(_cells(raw), i) for i, raw in raws.items()], ARC_SAMPLE):
        (root / split / f"{task_id}.json").write_text(json.dumps(raws[task_id]))
    return root


def test_every_arc_task_file_parses() -> None:
    """Every task of both splits loads and validates (every grid of every pair), as the set tasks load them."""
    from reasearch.evaluators.arc_agi_2._data import load_problem, task_ids

    for split in SET_IDS:
        ids = task_ids(split)
        assert len(ids) == {"training": 1000, "evaluation": 120}[split]
        for task_id in ids:
            problem = load_problem(task_id, split=split)
            assert problem.train and problem.test and all(p.output is not None for p in problem.train)


@pytest.mark.parametrize("task_id", PARAMS)
def test_task_conforms(task_id: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    params: dict[str, Any] = dict(_test_params(task_id))
    if issubclass(registered_entry(task_id)[0].load(), PromptTask):
        params = request.getfixturevalue("prompt_student")[task_id]
    split = {v: k for k, v in SET_IDS.items()}.get(task_id)
    if split is not None:
        params = {"data_dir": str(arc_sample(split, tmp_path))}
    report = reasearch.check_task(reasearch.make(task_id, **params), raise_on_failure=False)
    assert report.failed == {}, f"{task_id} failed: {report.failed}"
    assert report.seed_result is not None and report.seed_result.ok
