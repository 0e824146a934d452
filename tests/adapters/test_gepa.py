"""GEPA on gsm8k/v1 with a toy student: train split per example, validation scores only, test sealed.

The real GEPA engine (gepa 0.1.4, in the test extra) runs a short optimization with a scripted reflection
model; the validation score it records for each candidate equals what `reasearch eval` reports for it.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import reasearch
from reasearch.adapters.gepa import (
    PromptEvaluator,
    PromptGEPAAdapter,
    ValidationItem,
    gepa_datasets,
)
from reasearch.errors import ConfigError
from reasearch.evaluators.prompt.testing import (
    BETTER_PROMPT,
    GOOD_PROMPT,
    FakeStudentServer,
    gsm8k_answer_key,
    write_synthetic_gsm8k,
)

IN_CI = os.environ.get("CI", "").lower() == "true"


@pytest.fixture(scope="module")
def gsm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_synthetic_gsm8k(tmp_path_factory.mktemp("gsm8k"), n_train=60, n_test=20)


@pytest.fixture()
def server(gsm: Path) -> Iterator[FakeStudentServer]:
    with FakeStudentServer(gsm8k_answer_key(gsm)) as srv:
        yield srv


def _task(gsm: Path, srv: FakeStudentServer) -> reasearch.Task:
    return reasearch.make("gsm8k/v1", student="openai/fake", base_url=srv.url, data_dir=str(gsm), n_train=12,
                          n_validation=12, backoff_s=0.01)


def test_train_gives_side_information_validation_only_scores(gsm: Path, server: FakeStudentServer) -> None:
    task = _task(gsm, server)
    evaluator = PromptEvaluator(task)
    trainset, valset = gepa_datasets(task)
    score, info = evaluator(GOOD_PROMPT, trainset[0])
    assert score in (0.0, 1.0) and info["Input"] == trainset[0].input and "Output" in info and "Expected" in info
    val_rows = evaluator.score_batch(BETTER_PROMPT, valset)
    assert all(info == {} and out == "" for _, info, out in val_rows)  # nothing of a validation example leaks
    mean = sum(s for s, _, _ in val_rows) / len(val_rows)
    assert mean == pytest.approx(task.evaluate(BETTER_PROMPT).score)  # what `reasearch eval` reports


def test_test_split_is_sealed(gsm: Path, server: FakeStudentServer) -> None:
    task = _task(gsm, server)
    evaluator = PromptEvaluator(task)
    for item in (task.examples("test")[0], ValidationItem(10**6), "What is 2+2?"):
        with pytest.raises(ConfigError):
            evaluator(GOOD_PROMPT, item)
    assert server.requests == 0


def test_a_gepa_run_records_reasearch_scores(gsm: Path, server: FakeStudentServer) -> None:
    if importlib.util.find_spec("gepa") is None:
        if IN_CI:
            pytest.fail("CI=true but gepa is not installed (it is in the test extra)")
        pytest.skip("gepa not installed (pip install 'reasearch[gepa]')")
    import gepa

    task = _task(gsm, server)
    trainset, valset = gepa_datasets(task)
    proposals: list[str] = []

    def reflection_lm(prompt: object) -> str:  # a scripted reflection model: proposes the better prompt
        proposals.append(str(prompt))
        return f"```\n{BETTER_PROMPT}\n```"

    result = gepa.optimize(seed_candidate={"system_prompt": GOOD_PROMPT}, trainset=trainset, valset=valset,
                           adapter=PromptGEPAAdapter(task), reflection_lm=reflection_lm, max_metric_calls=60,
                           reflection_minibatch_size=3, display_progress_bar=False, seed=0)
    assert proposals and any("Expected" in p for p in proposals)  # train side information reached reflection
    assert all(str(e.input) not in "".join(proposals) for e in task.examples("validation"))
    for cand, score in zip(result.candidates, result.val_aggregate_scores, strict=True):
        assert score == pytest.approx(task.evaluate(cand["system_prompt"]).score)
    assert result.best_candidate["system_prompt"] == BETTER_PROMPT


def test_a_gepa_run_is_charged_to_the_runs_ledger_and_stops_at_its_cap(tmp_path: Path, gsm: Path,
                                                                       server: FakeStudentServer) -> None:
    if importlib.util.find_spec("gepa") is None:
        if IN_CI:
            pytest.fail("CI=true but gepa is not installed (it is in the test extra)")
        pytest.skip("gepa not installed (pip install 'reasearch[gepa]')")
    import gepa

    from reasearch.adapters.gepa_run import gepa_for_run
    from reasearch.runs import Run, Unit, open_store

    params = {"student": "openai/fake", "base_url": server.url, "data_dir": str(gsm), "n_train": 12, "n_validation": 12,
                  "backoff_s": 0.01}
    run = Run.create(open_store(str(tmp_path / "store.db")), task_id="gsm8k/v1", task_params=params,
                     budget={"student_calls": 40})
    asked: list[str] = []

    def reflection_lm(prompt: object) -> str:
        asked.append(str(prompt))
        texts = [GOOD_PROMPT, BETTER_PROMPT]
        return f"```\n{texts[len(asked) - 1] if len(asked) <= 2 else f'{BETTER_PROMPT} Variant {len(asked)}.'}\n```"

    gepa.optimize(seed_candidate={"system_prompt": "You are helpful."}, reflection_lm=reflection_lm,
                  max_metric_calls=2_000, reflection_minibatch_size=3, display_progress_bar=False, seed=0,
                  **gepa_for_run(run))
    used = run.used()[Unit.STUDENT_CALLS]
    assert used == 40 == server.paid_hits()  # every paid call is in the ledger, and the cap held
    assert run.remaining()[Unit.STUDENT_CALLS] == 0
    assert len(asked) <= 6  # GEPA's loop ended at the cap, not at its own (larger) metric-call limit


def test_a_repeated_batch_on_the_runs_ledger_is_free(tmp_path: Path, gsm: Path, server: FakeStudentServer) -> None:
    from reasearch.adapters.gepa_run import RunStudentCaller
    from reasearch.runs import Run, Unit, open_store

    params = {"student": "openai/fake", "base_url": server.url, "data_dir": str(gsm), "n_train": 12, "n_validation": 12,
              "backoff_s": 0.01}
    run = Run.create(open_store(str(tmp_path / "store.db")), task_id="gsm8k/v1", task_params=params,
                     budget={"student_calls": 40})
    task = _task(gsm, server)
    requests = task.requests(GOOD_PROMPT, task.examples("train")[:3])
    caller = RunStudentCaller(run)
    first = caller.call_batch(requests)
    again = caller.call_batch(requests)  # GEPA scores the same prompt on the same minibatch again
    assert [r.text for r in again] == [r.text for r in first] and all(r.cached for r in again)
    assert run.used()[Unit.STUDENT_CALLS] == 3 == server.paid_hits()
