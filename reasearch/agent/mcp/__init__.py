"""An MCP server: any MCP client (Claude Code, other coding agents) drives a run as its optimizer.

The evaluation stays trusted: the same ``Run``, sandbox, cache, budget ledger and store as
``reasearch optimize``, the same typed tools as the built-in agent (their ``@tool`` schemas are the MCP
tool schemas). Built on the official ``mcp`` SDK (``pip install 'reasearch[mcp]'``).

Quick use::

    from reasearch.agent.mcp import build_server, serve_stdio, start_mcp_run
    driver = start_mcp_run("circle_packing/n26-v1", store=open_store("runs"), run_dir="runs",
                           budget={"evaluations": 50})
    serve_stdio(build_server(driver))
"""

from __future__ import annotations

from reasearch.agent.mcp._server import build_server, mcp_tool
from reasearch.agent.mcp._transport import http_app, is_loopback, serve_http, serve_stdio
from reasearch.agent.mcp.driver import HIDDEN_TOOLS, McpCallResult, McpDriver, McpResource, open_mcp_run, start_mcp_run
from reasearch.agent.mcp.evaluators import EvaluatorsService, EvaluatorTools, result_text

__all__ = [
    "HIDDEN_TOOLS",
    "EvaluatorTools",
    "EvaluatorsService",
    "McpCallResult",
    "McpDriver",
    "McpResource",
    "build_server",
    "http_app",
    "is_loopback",
    "mcp_tool",
    "open_mcp_run",
    "result_text",
    "serve_http",
    "serve_stdio",
    "start_mcp_run",
]
