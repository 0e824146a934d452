"""The agent's ablations (``agent:no-snapshot``, ``agent:no-lessons``, ``agent:no-compaction``): each
switch removes exactly its mechanism from what the model sees, and the default keeps all three."""

from __future__ import annotations

from typing import Any

import pytest

from reasearch.agent.config import AgentConfig
from reasearch.errors import ConfigError
from reasearch.models.messages import ModelReply, Usage
from reasearch.models.testing import call, say


def _texts(request: Any) -> str:
    return "\n".join(b.get("text", "") for m in request.messages if m["role"] == "user"
                     for b in m["content"] if isinstance(b, dict))


def _used(reply: ModelReply) -> ModelReply:
    return ModelReply(reply.content, reply.stop_reason, Usage(1000, 10))


def _script() -> list[Any]:
    big = "x" * 6000  # pushes the context past a threshold of 2500 tokens
    return [_used(say("", call("write_file", path="notes.md", content=big))),
            _used(say("", call("read_file", path="notes.md"))), _used(say("", call("evaluate"))),
            _used(say("", call("finish", reason="done")))]


@pytest.mark.parametrize("flags", [{}, {"use_snapshot": False}, {"use_lessons": False}, {"use_compaction": False}])
def test_each_ablation_removes_only_its_mechanism(make_agent: Any, flags: dict[str, bool]) -> None:
    agent, run = make_agent(_script(), compact_threshold_tokens=2500, lessons="# Lessons\n- keep notes\n",
                            summarizer=[say("SUMMARY")], **flags)
    agent.optimize()
    seen = "\n".join(_texts(r) for r in agent.models["agent"].requests)
    assert ("## State snapshot" in seen) is flags.get("use_snapshot", True)
    assert ("keep notes" in seen) is flags.get("use_lessons", True)
    assert (agent.workspace.root / "lessons.md").exists() is flags.get("use_lessons", True)
    compactions = [e for e in run.events() if e.kind == "compaction"]
    assert (len(compactions) == 1) is flags.get("use_compaction", True)
    tools = {t.name for t in agent.models["agent"].requests[0].tools}
    assert ("compact" in tools) is flags.get("use_compaction", True)


def test_ablation_flags_map_to_config_switches() -> None:
    assert AgentConfig.ablation("no-snapshot") == {"use_snapshot": False}
    assert AgentConfig.from_dict({"use_lessons": False}).use_lessons is False
    with pytest.raises(ConfigError, match="unknown agent ablation"):
        AgentConfig.ablation("no-tools")
