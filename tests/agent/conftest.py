"""Shared helpers of the agent tests: a toy task evaluated statically (no code runs), scripted models."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from reasearch.agent import Agent, AgentConfig, ModelSpec
from reasearch.engine.testing import StaticRunner
from reasearch.evaluators.testing import ToyTask
from reasearch.models.testing import ScriptedModel
from reasearch.runs import Budget, Run
from reasearch.runs.testing import memory_run


@pytest.fixture()
def make_agent(tmp_path: Path) -> Callable[..., tuple[Agent, Run]]:
    """Builds an agent on a Run of a 2-d ToyTask (optimum: [3, 3], score 0)."""

    def build(script: list[Any], *, budget: Mapping[str, float] | None = None, run: Run | None = None,
              editor: list[Any] | None = None, summarizer: list[Any] | None = None, exec_fn: Any = None,
              lessons: str | None = None, root: str = "run", **config: Any) -> tuple[Agent, Run]:
        if run is None:
            run = memory_run(
                ToyTask(dim=2), Budget.from_dict(dict(budget or {"evaluations": 10})), runner=StaticRunner()
            )
        cfg = AgentConfig(models={"agent": ModelSpec(provider="scripted", name="unused")}, **config)
        models = {"agent": ScriptedModel(script, name="agent-model")}
        models["editor"] = ScriptedModel(editor or [], name="editor-model")
        models["summarizer"] = ScriptedModel(summarizer or [], name="summary-model")
        agent = Agent(run, tmp_path / root, config=cfg, models=models, exec_fn=exec_fn, lessons=lessons)
        return agent, run

    return build
