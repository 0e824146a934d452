"""``submit`` on ``tabular/csv-v2``: a scripted agent scores an experiment's submission on the private test
period, is charged one ``submissions`` unit each time, and is refused past the task's cap; experiments
themselves never show a private-test score."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from reasearch.agent import AgentConfig, ModelSpec, start_run
from reasearch.models.messages import ModelReply, ModelRequest
from reasearch.models.testing import ScriptedModel, call, say
from reasearch.runs import Unit

BETTER_TRAIN = Path(__file__).with_name("tabular_seasonal_train.py.txt").read_text()


def _last_results(request: ModelRequest) -> str:
    last = request.messages[-1]["content"]
    return " ".join(b.get("content", "") if isinstance(b.get("content"), str) else json.dumps(b.get("content"))
                    for b in last if isinstance(b, dict) and b.get("type") == "tool_result")


def test_submit_scores_the_private_split_charges_a_submission_and_stops_at_the_cap(experiment_root: Path) -> None:
    seen: dict[str, Any] = {}

    def submit_it(request: ModelRequest) -> ModelReply:
        step = int(re.search(r"experiment (\d+) \(", _last_results(request)).group(1))  # type: ignore[union-attr]
        seen["step"] = step
        return say("", call("submit", step=step))

    def submit_again(request: ModelRequest) -> ModelReply:
        seen.setdefault("replies", []).append(_last_results(request))
        return say("", call("submit", step=seen["step"]))

    def finish(request: ModelRequest) -> ModelReply:
        seen["replies"].append(_last_results(request))
        return say("Done.", call("finish", reason="seed"))

    script: list[Any] = [
        say("", call("run_experiment", description="seed", wait_s=60)),
        submit_it,
        submit_again,
        submit_again,  # over the cap of 2: refused, nothing scored
        finish,
    ]
    config = AgentConfig(models={"agent": ModelSpec(provider="scripted", name="inline")})
    params = {"time_budget_s": 30.0, "grace_s": 10.0, "max_submissions": 2}
    agent = start_run("tabular/csv-v2", task_params=params, budget={"experiments": 3}, config=config,
                      run_dir=experiment_root, models={"agent": ScriptedModel(script)})
    agent.optimize()
    run = agent.run
    subs = [e.payload for e in run.events(kind="submission")]
    assert [s["status"] for s in subs] == ["OK", "OK"] and subs[0]["score"] == subs[1]["score"]
    assert run.used()[Unit.SUBMISSIONS] == 2 and run.used()[Unit.EXPERIMENTS] == 1
    first, second, capped = seen["replies"]
    assert "private test score" in first and "1/2 submissions used" in first and "2/2 submissions used" in second
    assert "submission budget spent: 2/2 used; nothing was scored" in capped
    # the private score is what the task computes from the kept file, and no experiment result carries it
    task = run.task
    kept = (experiment_root / run.id / "experiments" / f"step-{seen['step']:05d}" / "submission.csv").read_bytes()
    assert task.score_submission(kept).score == subs[0]["score"]  # type: ignore[attr-defined]
    exp = next(e.payload for e in run.events(kind="experiment"))
    assert str(subs[0]["score"])[:8] not in json.dumps(exp) and "test_rmse" not in json.dumps(exp)
    assert "Submissions: 2/2 used" in agent.snapshot_text()


def test_a_scripted_agent_improves_on_the_seed_and_submits_its_best(experiment_root: Path) -> None:
    """Seed, then a seasonal linear model (weekday, yearly terms, trend): a new best on validation, then
    one submission of it; the private score is far better than the seed's would be."""
    script: list[Any] = [
        say("", call("run_experiment", description="seed: linear on raw columns", wait_s=60)),
        say("", call("write_file", path="train.py", content=BETTER_TRAIN)),
        say("", call("git", command='commit -am "seasonal linear model"')),
        say("", call("run_experiment", description="weekday one-hot, yearly Fourier terms, trend", wait_s=60)),
        lambda request: say("", call("submit", step=int(re.search(r"experiment (\d+) \(",  # type: ignore[union-attr]
                                                                          _last_results(request)).group(1)))),
        say("Done.", call("finish", reason="the seasonal model")),
    ]
    config = AgentConfig(models={"agent": ModelSpec(provider="scripted", name="inline")})
    agent = start_run("tabular/csv-v2", task_params={"time_budget_s": 30.0, "grace_s": 10.0},
                      budget={"experiments": 3}, config=config, run_dir=experiment_root,
                      models={"agent": ScriptedModel(script)})
    result = agent.optimize()
    seed, better = [e.payload for e in agent.run.events(kind="experiment")]
    assert seed["status"] == better["status"] == "OK", (seed.get("feedback"), better.get("feedback"))
    assert better["score"] < 0.5 * seed["score"]  # rmse: lower is better
    assert result.final_score == better["score"]
    sub = [e.payload for e in agent.run.events(kind="submission")]
    assert len(sub) == 1 and sub[0]["status"] == "OK" and sub[0]["candidate"] == better["candidate"]
    assert agent.run.used()[Unit.SUBMISSIONS] == 1
