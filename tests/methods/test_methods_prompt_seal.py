"""The sealed test split of a prompt task, watched at the boundary: for every method that optimizes a
prompt, the fake student server counts what it receives (system prompt, input) and the proposal model's
requests are recorded. During the run the student sees train and validation inputs only; the test
inputs reach it once each, with the final prompt only (the trusted side's sealed pass); the proposal
model never sees a validation or test input. A method whose validation scored the test split fails here
(its call count can stay the same)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import pytest

from reasearch.evaluators.prompt.testing import FakeStudentServer, gsm8k_answer_key, write_synthetic_gsm8k
from reasearch.methods import METHODS, start_method
from reasearch.methods.peers import KINDS, PACKAGES
from reasearch.methods.testing import MutatingModel
from reasearch.models import ModelSpec
from reasearch.models.messages import ModelReply, ModelRequest
from reasearch.runs import Run, open_store
from tests.methods._seal import sealed_traffic_problems

DEMO = ModelSpec.parse("demo")
SMALL: dict[str, dict[str, Any]] = {"evolve": {"num_islands": 2, "migration_interval": 3},
                                    "reflect": {"use_merge": True}}
PROMPT_METHODS = sorted((set(METHODS) - set(PACKAGES)) | {m for m, kind in KINDS.items() if kind == "prompt"})


class _Recording:
    """The proposal model, with every request it is shown kept as text."""

    def __init__(self, inner: MutatingModel) -> None:
        self.inner = inner
        self.seen: list[str] = []

    @property
    def name(self) -> str:
        return self.inner.name

    def complete(self, request: ModelRequest) -> ModelReply:
        self.seen.append(json.dumps([request.system, list(request.messages)], default=str))
        return self.inner.complete(request)


def test_every_prompt_method_is_listed() -> None:
    assert {"best-of-n", "evolve", "reflect", "gepa"} <= set(PROMPT_METHODS)


@pytest.mark.parametrize("method", PROMPT_METHODS)
def test_a_methods_student_sees_the_test_split_only_in_the_sealed_pass(method: str, tmp_path: Path) -> None:
    if method in PACKAGES and importlib.util.find_spec(PACKAGES[method][0]) is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {PACKAGES[method][0]} is not installed (it is in the test extra)")
        pytest.skip(f"{PACKAGES[method][0]} not installed (pip install 'reasearch[{PACKAGES[method][1]}]')")
    folder = write_synthetic_gsm8k(tmp_path / "gsm8k", n_train=60, n_test=40)
    store = open_store("memory://")
    model = _Recording(MutatingModel(0))
    with FakeStudentServer(gsm8k_answer_key(folder)) as srv:
        # n_test differs from n_validation: a validation that scored test would change the counts too
        params = dict(student="openai/fake", base_url=srv.url, n_train=20, n_validation=16, n_test=24,
                      data_dir=str(folder), backoff_s=0.01)
        runner = start_method(method, "gsm8k/v1", budget={"student_calls": 120}, store=store, model_spec=DEMO,
                              model=model, task_params=params, config=SMALL.get(method))
        runner.optimize()
        hits = srv.hits.copy()
    run = Run.open(store, runner.run.id)
    task: Any = run.task
    assert sealed_traffic_problems(hits, run, scores_validation_elsewhere=method == "gepa") == []
    assert model.seen, "the proposal model was never asked"
    hidden = [ex.input for split in ("validation", "test") for ex in task.examples(split)]
    shown = "\n".join(model.seen)
    assert [q for q in hidden if q in shown] == [], "the proposal model saw a validation or test input"
