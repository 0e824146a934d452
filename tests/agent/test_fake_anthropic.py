"""A full multi-turn agent run with tool use through the real ``anthropic`` SDK, against a local fake
of the Messages API (127.0.0.1; no network)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent_helpers import toy_source

from reasearch.agent import Agent, AgentConfig, AnthropicModel, ModelSpec, RetryPolicy
from reasearch.engine.testing import StaticRunner
from reasearch.evaluators.base import candidate_sha256
from reasearch.evaluators.testing import ToyTask
from reasearch.models.messages import ModelReply, StopReason, Usage
from reasearch.models.testing import FakeAnthropicServer, call, say
from reasearch.runs import Budget, Unit
from reasearch.runs.testing import memory_run

BEST = toy_source([3.0, 3.0])


def _with_usage(reply: ModelReply, inp: int, out: int) -> ModelReply:
    return ModelReply(reply.content, reply.stop_reason, Usage(inp, out, cache_read_tokens=100, cache_write_tokens=50))


def test_multi_turn_run_through_the_sdk(tmp_path: Path) -> None:
    first = _with_usage(say("Reading the task.", call("read_file", path="TASK.md"), call("evaluate")), 1200, 60)

    def second(body: dict[str, Any]) -> ModelReply:
        # The harness answered both tool calls of the first reply, in order, then re-emitted the snapshot.
        content = body["messages"][-1]["content"]
        assert [b["type"] for b in content] == ["tool_result", "tool_result", "text"]
        assert [b["tool_use_id"] for b in content[:2]] == [b["id"] for b in first.content if b["type"] == "tool_use"]
        assert "status: OK" in content[1]["content"] and content[2]["text"].startswith("## State snapshot")
        return _with_usage(say("", call("edit_code", instruction="return [3, 3]")), 1500, 40)

    def editor(body: dict[str, Any]) -> ModelReply:
        assert body["model"] == "claude-haiku-4-5" and "tools" not in body
        return _with_usage(say("```python\n" + BEST + "```"), 900, 30)

    third = _with_usage(say("", call("evaluate")), 1700, 20)
    fourth = _with_usage(say("Optimum reached.", call("finish", reason="score 0 is the optimum",
                                                        candidate_id=candidate_sha256(BEST)[:12])), 1900, 30)
    run = memory_run(ToyTask(dim=2), Budget.from_dict({"evaluations": 5, "dollars": 1.0}), runner=StaticRunner())
    sleeps: list[float] = []
    with FakeAnthropicServer([first, second, editor, third, fourth], fail_first=[529]) as server:
        retry = RetryPolicy(sleep=sleeps.append)
        specs = {"agent": ModelSpec(name="claude-sonnet-4-6", base_url=server.url),
                 "editor": ModelSpec(name="claude-haiku-4-5", base_url=server.url)}
        models = {role: AnthropicModel(spec, api_key="sk-fake", retry=retry) for role, spec in specs.items()}
        agent = Agent(run, tmp_path / "run", config=AgentConfig(models=specs), models=models)
        result = agent.optimize()

    assert sleeps == [0.0]  # the overloaded answer was retried once
    assert (result.final_candidate, result.final_score, result.chosen_by) == (candidate_sha256(BEST), 0.0, "agent")
    assert len(server.requests) == 6  # 1 overloaded + 4 agent turns + 1 edit
    assert all(h["authorization"] == "Bearer sk-fake" for h in server.headers)
    agent_bodies = [b for b in server.requests if b["model"] == "claude-sonnet-4-6"]
    tool_names = [t["name"] for t in agent_bodies[0]["tools"]]
    assert tool_names == ["bash", "list_files", "python_exec", "read_file", "write_file",  # workspace
                          "edit_code", "evaluate", "get_current_code",  # program evolution
                          "compact", "finish", "get_status"]  # control
    assert agent_bodies[0]["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert agent_bodies[0]["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert "# The task\nDefine run() returning a list of 2 numbers" in agent_bodies[0]["system"][0]["text"]
    # Dollars and tokens from the reported usage: sonnet $3/$15, haiku $1/$5 per million; cache reads
    # at 0.1x and writes at 1.25x the input price.
    def cost(inp: int, out: int, p_in: float, p_out: float) -> float:
        return (inp * p_in + out * p_out + 100 * 0.1 * p_in + 50 * 1.25 * p_in) / 1e6

    agent_turns = [(1200, 60), (1500, 40), (1700, 20), (1900, 30)]
    expected = sum(cost(i, o, 3.0, 15.0) for i, o in agent_turns) + cost(900, 30, 1.0, 5.0)
    used = run.used()
    assert abs(used[Unit.DOLLARS] - expected) < 1e-12
    assert used[Unit.TOKENS] == sum(i + o + 150 for i, o in agent_turns + [(900, 30)])
    assert used[Unit.MODEL_CALLS] == 5 and used[Unit.EVALUATIONS] == 2
    assert [e.payload["model"] for e in run.events() if e.kind in ("model_reply", "edit_reply")] == [
        "claude-sonnet-4-6", "claude-sonnet-4-6", "claude-haiku-4-5", "claude-sonnet-4-6", "claude-sonnet-4-6"]
    last = next(e for e in run.events() if e.kind == "model_reply" and e.step == max(
        x.step for x in run.events() if x.kind == "model_reply"))
    assert ModelReply.from_dict(last.payload["reply"]).stop_reason is StopReason.TOOL_USE
