"""The agent's prompt tools, watched at the boundary: what the fake student server receives during a
scripted agent run holds train and validation inputs only until the trusted side's one sealed pass of the
final prompt over test, and nothing the agent model is sent holds a validation or test input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reasearch.agent import start_run
from reasearch.evaluators.prompt.testing import (
    BETTER_PROMPT,
    GOOD_PROMPT,
    FakeStudentServer,
    gsm8k_answer_key,
    write_synthetic_gsm8k,
)
from reasearch.models.testing import ScriptedModel, call, say
from tests.methods._seal import sealed_traffic_problems


def test_the_agents_student_sees_the_test_split_only_in_the_sealed_pass(tmp_path: Path) -> None:
    folder = write_synthetic_gsm8k(tmp_path / "gsm8k", n_train=60, n_test=40)
    with FakeStudentServer(gsm8k_answer_key(folder)) as srv:
        script = [
            say("", call("get_next_minibatch", size=4)),
            say("", call("call_student_model_batch", prompt=GOOD_PROMPT, example_ids=["train-0", "train-1"])),
            say("", call("validate_candidate")),  # the seed prompt
            say("", call("validate_candidate", prompt=GOOD_PROMPT)),
            say("", call("validate_candidate", prompt=BETTER_PROMPT)),
            say("Done.", call("finish", reason="best validation accuracy")),
        ]
        model = ScriptedModel(script)
        agent = start_run("gsm8k/v1", budget={"student_calls": 200}, run_dir=tmp_path / "runs",
                          models={"agent": model},
                          task_params=dict(student="openai/fake", base_url=srv.url, n_train=20, n_validation=16,
                                           n_test=24, data_dir=str(folder)))
        result = agent.optimize()
        hits = srv.hits.copy()
    run = agent.run
    assert result.final_candidate is not None and run.candidate_source(result.final_candidate) == BETTER_PROMPT
    assert sealed_traffic_problems(hits, run) == []
    task: Any = agent.task
    hidden = [ex.input for split in ("validation", "test") for ex in task.examples(split)]
    shown = json.dumps([[r.system, list(r.messages)] for r in model.requests], default=str)
    assert len(model.requests) == len(script)
    assert [q for q in hidden if q in shown] == [], "the agent model saw a validation or test input"
    assert task.examples("train")[0].input in shown  # positive control: train inputs are shown
