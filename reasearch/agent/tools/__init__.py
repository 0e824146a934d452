"""Typed tools: schema from signature and docstring, validated arguments, errors returned to the model."""

from __future__ import annotations

from reasearch.agent.tools.guard import BLOCKED_PATTERNS, check_command, check_python
from reasearch.agent.tools.program import CANDIDATE_FILE, ControlTools, ProgramTools, extract_code
from reasearch.agent.tools.schema import Tool, ToolArgumentError, ToolError, ToolOutput, parse_docstring, tool, tools_of
from reasearch.agent.tools.workspace import DEFAULT_PROTECTED, Workspace, WorkspaceTools

__all__ = [
    "BLOCKED_PATTERNS",
    "CANDIDATE_FILE",
    "DEFAULT_PROTECTED",
    "ControlTools",
    "ProgramTools",
    "Tool",
    "ToolArgumentError",
    "ToolError",
    "ToolOutput",
    "Workspace",
    "WorkspaceTools",
    "check_command",
    "check_python",
    "extract_code",
    "parse_docstring",
    "tool",
    "tools_of",
]
