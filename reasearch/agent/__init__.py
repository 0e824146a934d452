"""The agent: one model that optimizes a candidate by calling typed tools, over long horizons.

Quick use::

    from reasearch.agent import AgentConfig, ModelSpec, start_run
    agent = start_run("heilbronn/n11-v1", run_dir="runs", budget={"evaluations": 50},
                      config=AgentConfig(models={"agent": ModelSpec(name="claude-sonnet-4-6")}))
    result = agent.optimize()
"""

from __future__ import annotations

from reasearch.agent.config import ROLES, AgentConfig
from reasearch.agent.launch import open_agent, resume_run, start_run
from reasearch.agent.loop import LESSONS_FILE, TASK_FILE, Agent, AgentProgress, AgentResult
from reasearch.agent.replay import ReplayReport, replay_run
from reasearch.agent.tools import Tool, ToolError, ToolOutput, tool
from reasearch.models import (
    AnthropicModel,
    Model,
    ModelSpec,
    OpenAICompatibleModel,
    Price,
    RetryPolicy,
    ScriptedModel,
    build_model,
)
from reasearch.models.messages import ModelReply, ModelRequest, StopReason, ToolCall, ToolSchema, Usage

__all__ = [
    "LESSONS_FILE",
    "ROLES",
    "TASK_FILE",
    "Agent",
    "AgentConfig",
    "AgentProgress",
    "AgentResult",
    "AnthropicModel",
    "Model",
    "ModelReply",
    "ModelRequest",
    "ModelSpec",
    "OpenAICompatibleModel",
    "Price",
    "ReplayReport",
    "RetryPolicy",
    "ScriptedModel",
    "StopReason",
    "Tool",
    "ToolCall",
    "ToolError",
    "ToolOutput",
    "ToolSchema",
    "Usage",
    "build_model",
    "open_agent",
    "replay_run",
    "resume_run",
    "start_run",
    "tool",
]
