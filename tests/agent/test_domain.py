"""The agent's domain is declared and its parts are held (issue 42 item 2): every toolset is an ``AgentDomain``
whose hooks the loop calls without probing; the agent holds its model calls and its clock instead of inheriting
them and sharing their attributes."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

from reasearch.agent import loop
from reasearch.agent.loop import Agent
from reasearch.agent.model_calls import ActiveClock, ModelCalls
from reasearch.agent.tools.domain import AgentDomain
from reasearch.agent.tools.experiments import ExperimentTools
from reasearch.agent.tools.program import ProgramTools
from reasearch.agent.tools.prompt import PromptTools
from reasearch.agent.tools.schema import tools_of
from reasearch.models.testing import ScriptedModel, call, say

HOOKS = ("setup_workspace", "current_text", "snapshot_lines", "collect", "settle", "on_finish")


def test_every_toolset_is_a_domain_and_no_hook_is_a_tool_the_model_can_call(make_agent: Any) -> None:
    assert all(issubclass(cls, AgentDomain) for cls in (ProgramTools, PromptTools, ExperimentTools))
    agent, _ = make_agent([say("", call("finish", reason="done"))])
    assert isinstance(agent.domain, ProgramTools)
    assert not set(HOOKS) & set(agent.tools), sorted(agent.tools)
    assert not set(HOOKS) & set(tools_of(agent.domain))


def test_the_loop_never_probes_its_domain_with_getattr() -> None:
    tree = ast.parse(inspect.getsource(loop))
    probes = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
              and n.func.id in ("getattr", "hasattr") and n.args and ast.unparse(n.args[0]) == "self.domain"]
    assert probes == [], f"loop.py probes its domain at lines {probes}: declare the hook on AgentDomain"


def test_a_domain_that_overrides_the_hooks_is_called_through_them(make_agent: Any, tmp_path: Path) -> None:
    calls: list[str] = []

    class Recording(ProgramTools):
        start_message = "BEGIN HERE"

        def setup_workspace(self) -> None:
            calls.append("setup")
            super().setup_workspace()

        def snapshot_lines(self) -> list[str]:
            calls.append("snapshot")
            return ["DOMAIN LINE"]

        def settle(self, *, stop: bool = False) -> None:
            calls.append(f"settle stop={stop}")

        def on_finish(self, final: dict[str, Any]) -> None:
            calls.append(f"finish {final['chosen_by']}")

    agent, _ = make_agent([say("", call("evaluate")), say("", call("finish", reason="done"))])
    agent.domain = Recording(agent.domain.ctx)
    result = agent.optimize()
    assert result.chosen_by == "agent"
    assert calls[0] == "setup" and "snapshot" in calls and "settle stop=False" in calls
    assert calls[-1] == "finish agent"
    first = agent.models["agent"].requests[0].messages[0]["content"]
    assert first[0]["text"] == "BEGIN HERE" and "DOMAIN LINE" in first[-1]["text"]


def test_the_agent_holds_its_model_calls_and_clock_and_shares_no_attribute_with_them(make_agent: Any) -> None:
    assert ModelCalls not in Agent.__mro__ and Agent.__mro__ == (Agent, object)
    agent, _ = make_agent([say("", call("evaluate")), say("", call("finish", reason="done"))])
    agent.optimize()
    assert isinstance(agent.calls, ModelCalls) and isinstance(agent.clock, ActiveClock)
    assert agent.calls.clock is agent.clock and agent.calls.models is agent.models
    stand_in = ScriptedModel([], name="stand-in")
    agent.models["editor"] = stand_in  # tests and resumes replace a role's client: one dict, held by both
    assert agent.calls.models["editor"] is stand_in
    # No attribute written by one part and read by the other: the model calls' state lives on their object.
    assert not {"_t0", "_elapsed_base", "_last_usage", "_exec_fn"} & set(vars(agent))
    assert not {"step", "turn", "history", "domain"} & set(vars(agent.calls))


def test_the_held_clock_goes_on_from_a_restored_time() -> None:
    t = {"now": 100.0}
    clock = ActiveClock(lambda: t["now"])
    t["now"] += 7.0
    assert clock.elapsed() == 7.0
    clock.restore(40.0)  # what a replayed reply recorded
    t["now"] += 2.0
    assert clock.elapsed() == 42.0
