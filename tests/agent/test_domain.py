"""The agent's domain is declared (issue 42 item 2): every toolset is an ``AgentDomain`` whose hooks the loop
calls without probing."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

from reasearch.agent import loop
from reasearch.agent.tools.domain import AgentDomain
from reasearch.agent.tools.experiments import ExperimentTools
from reasearch.agent.tools.program import ProgramTools
from reasearch.agent.tools.prompt import PromptTools
from reasearch.agent.tools.schema import tools_of
from reasearch.models.testing import call, say

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
