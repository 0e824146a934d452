"""``replay_run`` re-runs recorded replies through the current harness and reports divergences."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from agent_helpers import toy_source

from reasearch.agent import AgentConfig, ModelSpec, replay_run
from reasearch.agent.replay import recorded_replies
from reasearch.engine.testing import StaticRunner
from reasearch.evaluators.base import candidate_sha256
from reasearch.evaluators.testing import ToyTask
from reasearch.models.testing import ScriptedModel, call, say
from reasearch.runs import LocalExecutor, Run, Unit, open_store

BETTER = toy_source([2.0, 2.5])


def _recorded_toy_run(tmp_path: Path) -> tuple[str, Path, LocalExecutor]:
    executor = LocalExecutor(1, pool=StaticRunner())
    store = open_store(tmp_path / "runs")
    config = AgentConfig(models={"agent": ModelSpec(provider="scripted", name="inline")})
    run = Run.create(store, task=ToyTask(dim=2), budget={"evaluations": 5},
                     config={"driver": "agent", "agent": config.to_dict()}, executor=executor)
    from reasearch.agent import Agent

    script = [say("", call("evaluate")), say("", call("write_file", path="candidate.py", content=BETTER)),
              say("", call("evaluate"), call("get_status")), say("", call("edit_code", instruction="3, 3")),
              say("```python\n" + toy_source([3.0, 3.0]) + "```"),
              say("", call("finish", reason="best", candidate_id=candidate_sha256(BETTER)[:8]))]
    agent = Agent(run, tmp_path / "runs" / run.id, config=config, models={"agent": ScriptedModel(script)},
                  lessons="# Lessons\n- preloaded\n")
    agent.optimize()
    return run.id, tmp_path / "runs", executor


def test_replay_of_an_unchanged_harness_has_no_divergence(tmp_path: Path) -> None:
    run_id, run_dir, executor = _recorded_toy_run(tmp_path)
    report = replay_run(run_id, run_dir=run_dir, replay_dir=tmp_path / "replay", executor=executor)
    assert report.ok, report.divergences
    assert (report.tool_results_compared, report.evaluations_compared) == (6, 2)
    twin = Run.open(open_store(tmp_path / "replay"), report.replay_run_id)
    assert twin.config["replay_of"] == run_id
    assert twin.used()[Unit.EVALUATIONS] == 2  # evaluations ran again, in the replay's own store
    assert (tmp_path / "replay" / twin.id / "workspace" / "lessons.md").read_text() == "# Lessons\n- preloaded\n"


def test_replay_reports_a_changed_score(tmp_path: Path) -> None:
    run_id, run_dir, executor = _recorded_toy_run(tmp_path)
    with sqlite3.connect(run_dir / "store.sqlite") as con:  # pretend the harness once scored step 6 otherwise
        (payload,) = con.execute("SELECT payload FROM events WHERE run_id = ? AND step = 6 AND kind = 'tool_result'",
                                 (run_id,)).fetchone()
        data = json.loads(payload)
        data["data"]["evaluation"]["score"] = -1.0
        con.execute("UPDATE events SET payload = ? WHERE run_id = ? AND step = 6 AND kind = 'tool_result'",
                    (json.dumps(data), run_id))
    report = replay_run(run_id, run_dir=run_dir, replay_dir=tmp_path / "replay", executor=executor)
    assert not report.ok
    assert [(d.step, d.what) for d in report.divergences] == [(6, "tool_result evaluate")]
    d = report.divergences[0]
    assert "score=-1.0" in d.recorded and "score=-1.25" in d.replayed


def test_recorded_replies_are_grouped_by_role_in_call_order(tmp_path: Path) -> None:
    run_id, run_dir, _ = _recorded_toy_run(tmp_path)
    events = Run.open(open_store(run_dir), run_id).events()
    replies = recorded_replies(events)
    assert [len(replies[r]) for r in ("agent", "editor", "summarizer")] == [5, 1, 0]
    assert replies["editor"][0].text.startswith("```python")
    assert [c.name for r in replies["agent"] for c in r.tool_calls] == [
        "evaluate", "write_file", "evaluate", "get_status", "edit_code", "finish"]
