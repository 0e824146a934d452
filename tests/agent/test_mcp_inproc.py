"""The MCP server in-process (the SDK's ``Client`` on a ``Server`` object): schemas are the ``@tool`` schemas,
a new toolset plugs in as it is, hidden answers stay hidden, and the driver's journal survives a reconnect."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reasearch.agent.mcp import EvaluatorsService, EvaluatorTools, McpDriver, build_server, open_mcp_run, start_mcp_run
from reasearch.agent.tools import ToolError, tool, tools_of
from reasearch.evaluators import make
from reasearch.evaluators.result import EvalResult
from reasearch.runs import Unit, open_store
from reasearch.runs.testing import make_result
from tests.agent.mcp_helpers import drive, fresh_dir, text

pytestmark = pytest.mark.timeout(600)


@pytest.fixture()
def run_dir() -> Iterator[Path]:
    yield from fresh_dir()


class _Experiments:
    """A domain toolset as another helper would add it to the agent."""

    def __init__(self) -> None:
        self.ran: list[int] = []

    @tool
    def run_experiment(self, steps: int, note: str | None = None) -> str:
        """Runs a training experiment.

        Args:
            steps: how many optimizer steps.
            note: what the experiment tests.
        """
        if steps > 100:
            raise ToolError("at most 100 steps")
        self.ran.append(steps)
        return f"ran {steps} steps"


def test_a_new_toolset_of_the_agent_is_served_with_its_own_schema_and_validation(run_dir: Path) -> None:
    driver = start_mcp_run("circle_packing/n26-v1", store=open_store(run_dir), run_dir=run_dir,
                           budget={"evaluations": 1})
    exp = _Experiments()
    driver.agent.tools.update(tools_of(exp))
    driver = McpDriver(driver.agent, max_calls=100)  # rebuilt over the agent's (grown) toolsets
    listed, ok, too_many, wrong_type, unknown = drive(build_server(driver), [
        ("run_experiment", {"steps": 3, "note": "baseline"}), ("run_experiment", {"steps": 500}),
        ("run_experiment", {"steps": "three"}), ("edit_code", {"instruction": "x"})])
    schemas = {t.name: t.input_schema for t in listed.tools}
    assert schemas["run_experiment"] == dict(tools_of(exp)["run_experiment"].input_schema)
    assert schemas["run_experiment"]["properties"]["steps"] == {
        "type": "integer",
        "description": "how many optimizer steps.",
    }
    assert "edit_code" not in schemas and "compact" not in schemas
    assert not ok.is_error and text(ok) == "ran 3 steps"
    assert too_many.is_error and "at most 100 steps" in text(too_many)
    assert wrong_type.is_error and "must be an integer" in text(wrong_type)
    assert unknown.is_error and "no tool named 'edit_code'" in text(unknown)
    assert exp.ran == [3]
    names = [e.payload["name"] for e in driver.run.events() if e.kind == "mcp_call"]
    assert names == ["run_experiment"] * 3 + ["edit_code"]
    driver.close()


def _hidden_forms(grid: Any) -> list[str]:
    rows = [list(map(int, r)) for r in grid]
    return ["\n".join("".join(map(str, r)) for r in rows), json.dumps(rows), str(rows),
            json.dumps(rows, separators=(",", ":")), "\n".join(" ".join(map(str, r)) for r in rows)]


@pytest.mark.slow
def test_hidden_answers_stay_hidden_over_mcp(run_dir: Path) -> None:
    task_id = "arc_agi_2/007bbfb7-v1"
    task = make(task_id)
    hidden = [f for pair in task.problem.test for f in _hidden_forms(pair.output)]
    assert hidden
    assert not any(h in task.describe() for h in hidden)  # the statement itself must not hold them
    driver = start_mcp_run(task_id, store=open_store(run_dir), run_dir=run_dir, budget={"evaluations": 2})
    answers = drive(build_server(driver), [
        ("read_file", {"path": "TASK.md"}), ("list_files", {}), ("get_current_code", {}), ("evaluate", {}),
        ("get_status", {}), ("evaluate", {"code": "def transform_grid_attempt_1(g):\n    return g\n"}),
        ("finish", {"reason": "done"})],
        ["reasearch://task", "reasearch://status", "reasearch://best", "reasearch://lessons"])
    service = EvaluatorsService(EvaluatorTools(max_evaluations=1))
    answers += drive(build_server(service), [("describe_task", {"task_id": task_id}),
                                              ("evaluate", {"task_id": task_id, "code": task.seed_program()})])
    seen = [a if isinstance(a, str) else text(a) + json.dumps(a.structured_content or {}) for a in answers[1:]
            if not hasattr(a, "tools")]
    assert len(driver.run.evaluations()) == 2 and sum("status: " in s for s in seen) >= 3  # two here, one stateless
    for h in hidden:
        assert not any(h in s for s in seen), "a hidden test output reached the client"
    events = json.dumps([e.payload for e in driver.run.events()])
    assert not any(json.dumps(h)[1:-1] in events for h in hidden[:1])


def test_a_reconnect_replays_the_journal_and_closes_a_dangling_call(run_dir: Path) -> None:
    store = open_store(run_dir)
    calls: list[str] = []

    class Fake:
        def submit(self, request: Any) -> Any:
            calls.append(request.source)
            from concurrent.futures import Future

            f: Future[EvalResult] = Future()
            f.set_result(make_result(float(len(request.source))))
            return f

        def close(self) -> None:
            pass

    driver = start_mcp_run("circle_packing/n26-v1", store=store, run_dir=run_dir, budget={"evaluations": 3},
                           executor=Fake())
    first = driver.call("evaluate", {"code": "a = 1\n"})
    assert not first.is_error and first.data["evaluation"]["score"] == 6.0
    # A call recorded, then the server died before its result: the store holds its evaluation.
    step = driver.run.last_step() + 1
    driver.run.log_event(step, "mcp_call", {"name": "evaluate", "arguments": {"code": "bb = 22\n"}})
    driver.run.evaluate("bb = 22\n", step=step)
    driver.run._heartbeat._beat(stopped=True)  # type: ignore[union-attr]  # as if it died
    driver.run._heartbeat = None  # type: ignore[attr-defined]
    again = open_mcp_run(driver.run.id, store=store, run_dir=run_dir, executor=Fake())
    assert [r.score for r in again.agent.history] == [6.0, 8.0]
    assert again.calls == 2
    repeat = again.call("evaluate", {"code": "bb = 22\n"})
    assert repeat.data["evaluation"]["cached"] is True
    assert again.run.used()[Unit.EVALUATIONS] == 2 and len(calls) == 2
    assert "NEW BEST" not in repeat.text  # the history came back: 8.0 is already the best
    status = again.call("get_status", {})
    assert "evaluations: 1 left" in status.text
    closed = [e for e in again.run.events() if e.kind == "mcp_result" and e.step == step]
    assert closed[0].payload["interrupted"] is True and "evaluation was recorded" in closed[0].payload["text"]
    done = again.call("finish", {"reason": "r"})
    assert not done.is_error
    with pytest.raises(Exception, match="not MCP"):
        from reasearch.runs import Run

        other = Run.create(store, task_id="circle_packing/n26-v1", budget={"evaluations": 1},
                           config={"driver": "agent"})
        other.close()
        open_mcp_run(other.id, store=store, run_dir=run_dir)
    from reasearch.agent import open_agent
    from reasearch.errors import ConfigError

    with pytest.raises(ConfigError, match="reasearch mcp --run"):  # `reasearch resume` has no model to resume with
        open_agent(driver.run.id, run_dir=run_dir, store=store)
    finished = open_mcp_run(driver.run.id, store=store, run_dir=run_dir, executor=Fake())
    late = finished.call("evaluate", {"code": "ccc = 333\n"})
    assert late.is_error and "finished" in late.text and len(calls) == 2
