"""The MCP server over the official SDK's low-level ``Server``: tools and resources from a provider.

Tool schemas are the ``@tool`` schemas themselves (:class:`~reasearch.agent.tools.schema.Tool`), so a
new toolset of the agent is offered over MCP as it is, with the same validation. Tool calls run in a
worker thread (evaluations and sandbox commands block); the provider serializes them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import anyio
import mcp.types as types
from mcp.server.lowlevel import Server

from reasearch import __version__
from reasearch.agent.tools.schema import Tool, ToolError

__all__ = ["Provider", "build_server"]


class Provider(Protocol):
    """What the server serves: :class:`~reasearch.agent.mcp.driver.McpDriver` or the evaluators' service."""

    tools: Mapping[str, Tool]

    def call(self, name: str, arguments: Mapping[str, Any] | None, *, client: str = "") -> Any: ...

    def resources(self) -> list[Any]: ...

    def read_resource(self, uri: str) -> str: ...

    def instructions(self) -> str: ...


def _client_of(ctx: Any) -> str:
    """``name/version`` the client announced when it connected ('' when it said nothing)."""
    try:
        info = ctx.session.client_params.client_info
        return f"{info.name}/{info.version}"
    except AttributeError:
        return ""


def mcp_tool(t: Tool) -> types.Tool:
    """The MCP form of a ``@tool``: name, description and the very same JSON schema."""
    return types.Tool(name=t.name, description=t.description, input_schema=dict(t.input_schema))


def build_server(provider: Provider, *, name: str = "reasearch",
                 on_call: Callable[[Any], None] | None = None) -> Server[Any]:
    """A low-level SDK ``Server`` exposing ``provider``'s tools and resources.

    Args:
        provider: the tools, resources and instructions.
        name: the server's name as clients see it.
        on_call: called with each call's result (progress lines on stderr).
    """
    tools = [mcp_tool(t) for t in provider.tools.values()]

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        client = _client_of(ctx)
        result = await anyio.to_thread.run_sync(lambda: provider.call(params.name, params.arguments, client=client))
        if on_call is not None:
            on_call(result)
        data = getattr(result, "data", None)
        return types.CallToolResult(content=[types.TextContent(text=result.text)],
                                    structured_content=dict(data) if data else None, is_error=bool(result.is_error))

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[
            types.Resource(uri=r.uri, name=r.name, description=r.description, mime_type=r.mime_type)
            for r in provider.resources()])

    async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        known = {r.uri: r for r in provider.resources()}
        res = known.get(str(params.uri))
        if res is None:
            raise ToolError(f"no resource {params.uri!r}; known: {', '.join(known)}")
        text = await anyio.to_thread.run_sync(lambda: provider.read_resource(res.uri))
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=res.uri, mime_type=res.mime_type,
                                                                             text=text)])

    return Server(name, version=__version__, instructions=provider.instructions(), on_list_tools=list_tools,
                  on_call_tool=call_tool, on_list_resources=list_resources, on_read_resource=read_resource)
