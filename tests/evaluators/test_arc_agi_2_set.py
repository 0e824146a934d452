"""ArcSetTask: the mean over a split, per-task results, parallel evaluation, submit, the seed on a whole split."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from reasearch.engine import SandboxConfig, SandboxPool
from reasearch.errors import ConfigError
from reasearch.evaluators import Status
from reasearch.evaluators.arc_agi_2 import SEED_PROGRAM, ArcSetTask

# Solves 67a3c6ac (mirror left-right) exactly; on 3c9b0459 (rotate 180) it solves no pair, and it
# raises on every input of 6150a2bd (known by their first rows), so that task ends CRASH and counts 0.
CANDIDATE = (
    "def transform_grid_attempt_1(grid):\n"
    "    if grid[0] in ([5, 5, 2], [3, 3, 8], [6, 3, 5]):\n"
    "        raise RuntimeError('no rule for this one')\n"
    "    return [list(row[::-1]) for row in grid]\n"
)


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    with SandboxPool(SandboxConfig(mode="auto", workers=2)) as p:
        yield p


@pytest.fixture(scope="module")
def small_split(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """Three training tasks copied into a folder's evaluation split."""
    root = tmp_path_factory.mktemp("arc_small")
    (root / "evaluation").mkdir()
    for task_id in ("67a3c6ac", "3c9b0459", "6150a2bd"):
        shutil.copy(shared_data / "arc-agi-2" / "training" / f"{task_id}.json", root / "evaluation")
    return str(root)


def test_mean_and_per_task_results(pool: SandboxPool, small_split: str) -> None:
    whole = ArcSetTask("evaluation", data_dir=small_split, workers=3, progress=False)
    report = whole.run_set(CANDIDATE, executor=pool)
    assert list(report.results) == ["3c9b0459", "6150a2bd", "67a3c6ac"]
    assert report.results["67a3c6ac"].score == 1.0
    assert report.results["3c9b0459"].status is Status.OK and report.results["3c9b0459"].score == 0.0
    assert report.results["6150a2bd"].status is Status.CRASH
    agg = report.aggregate
    assert agg.status is Status.OK and agg.score == pytest.approx(1 / 3)
    assert agg.metrics["n_tasks"] == 3 and agg.metrics["n_tasks_solved"] == 1
    assert agg.metrics["statuses"] == {"OK": 2, "CRASH": 1}
    assert agg.metrics["tasks"]["6150a2bd"]["status"] == "CRASH" and agg.metrics["tasks"]["6150a2bd"]["score"] is None
    assert agg.provenance is not None and agg.provenance.task_id == "arc_agi_2/eval-v1"
    assert "6150a2bd: CRASH" in agg.feedback
    table = whole.render_table(agg)
    assert table.row_count == 3


def test_submit_is_mean_pass_at_2(pool: SandboxPool, small_split: str) -> None:
    whole = ArcSetTask("evaluation", data_dir=small_split, progress=True)
    res = whole.submit(CANDIDATE, executor=pool)
    assert res.status is Status.OK and res.score == pytest.approx(1 / 3)
    assert res.metrics["phase"] == "test" and res.metrics["tasks"]["67a3c6ac"]["n_solved"] == 1


def test_all_failing_set_is_not_ok(pool: SandboxPool, small_split: str) -> None:
    whole = ArcSetTask("evaluation", data_dir=small_split, progress=False)
    res = whole.evaluate("def transform_grid_attempt_1(g):\n    raise ValueError('x')\n", executor=pool)
    assert res.status is Status.CRASH and res.score is None


def test_score_solution_of_set(small_split: str) -> None:
    whole = ArcSetTask("evaluation", data_dir=small_split, progress=False)
    tasks = {t.task_id: t for t in whole.tasks()}
    data = {"tasks": {i: {"attempts": [[[list(r) for r in p.output], None] for p in t.problem.train]}
                      for i, t in tasks.items()}}
    assert whole.score_solution(data).score == 1.0
    del data["tasks"]["67a3c6ac"]
    assert whole.score_solution(data).status is Status.INVALID


def test_the_seed_runs_on_every_task_of_the_eval_split(pool: SandboxPool, shared_data: Path) -> None:
    """The seed over the whole evaluation split: every one of the 120 tasks ends OK, the mean is the recorded
    seed score. ``check_task`` on this id (the seed twice, bad candidates, round trips) runs in
    test_conformance.py on a size-stratified sample of the split (smallest and largest tasks included): it ran
    here on all 120 as well, its second pass over the split only repeating what the sample proves."""
    whole = ArcSetTask("evaluation", data_dir=str(shared_data / "arc-agi-2"), progress=False)
    assert whole.spec.id == "arc_agi_2/eval-v1" and len(whole.task_ids) == 120
    seed = whole.evaluate(whole.seed_program(), seed=0, executor=pool)
    assert seed.status is Status.OK, seed.feedback[:500]
    assert seed.provenance is not None and seed.provenance.task_id == "arc_agi_2/eval-v1"
    assert seed.score == whole.spec.seed_score == 0.0
    assert seed.metrics["n_tasks"] == 120 and seed.metrics["statuses"] == {"OK": 120}


def test_bad_parameters() -> None:
    """Refused when the task is made (every kind of bad value: tests/evaluators/test_task_params.py)."""
    with pytest.raises(ConfigError, match="parameter split of arc_agi_2 takes one of 'evaluation', 'training'"):
        ArcSetTask("test")
    with pytest.raises(ConfigError, match="parameter workers of arc_agi_2 takes an integer or null >= 1"):
        ArcSetTask(workers=0)
    assert ArcSetTask("training").seed_program() == SEED_PROGRAM


def test_a_candidate_that_does_not_parse_costs_one_sandbox_run(pool: SandboxPool, small_split: str) -> None:
    class Counting:
        mode = pool.mode
        workers = 2

        def __init__(self) -> None:
            self.runs = 0

        def run(self, request):  # type: ignore[no-untyped-def]
            self.runs += 1
            return pool.run(request)

    whole = ArcSetTask("evaluation", data_dir=small_split, progress=False)
    counting = Counting()
    report = whole.run_set("def transform_grid_attempt_1(g:\n    return g\n", executor=counting)  # type: ignore[arg-type]
    assert counting.runs == 1
    assert [r.status for r in report.results.values()] == [Status.CRASH] * 3
    assert all("SyntaxError" in r.feedback for r in report.results.values())
    agg = report.aggregate
    assert agg.status is Status.CRASH and agg.score is None and agg.metrics["n_tasks"] == 3
    # A candidate that parses still runs every task, even when it fails them all.
    counting.runs = 0
    whole.run_set("def transform_grid_attempt_1(g):\n    raise ValueError('x')\n", executor=counting)  # type: ignore[arg-type]
    assert counting.runs == 3
