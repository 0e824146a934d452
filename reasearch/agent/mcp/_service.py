"""A provider of one toolset's tools and no resources: the stateless MCP servers (the evaluators, steering).

Each call answers with the tool's text and data, or with the error as text (a tool's own ``ToolError``, or
any other failure as ``NAME failed: TYPE: MESSAGE``): the server goes on either way.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from reasearch.agent.tools.schema import Tool, ToolError, ToolOutput, tools_of

__all__ = ["Answer", "ToolsetService"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Answer:
    step: int
    name: str
    text: str
    is_error: bool
    data: Mapping[str, Any] | None = None


class ToolsetService(Generic[T]):
    """The tools of ``toolset`` (its ``@tool`` methods), numbered in the order they are called.

    ``serial``: calls run one at a time (a toolset that keeps per-call state, such as who is calling, sets
    it in :meth:`bind`); otherwise they run concurrently (evaluations block in the sandbox).
    """

    serial = False

    def __init__(self, toolset: T) -> None:
        self.toolset = toolset
        self.tools: Mapping[str, Tool] = tools_of(toolset)
        self._count = 0
        self._lock = threading.Lock()

    def bind(self, client: str) -> None:
        """Called before each call with the client's ``name/version`` ('' when it said nothing)."""

    def call(self, name: str, arguments: Mapping[str, Any] | None, *, client: str = "") -> Answer:
        with self._lock:
            self._count += 1
            n = self._count
            if self.serial:
                return self._answer(n, name, arguments, client)
        return self._answer(n, name, arguments, client)

    def _answer(self, n: int, name: str, arguments: Mapping[str, Any] | None, client: str) -> Answer:
        t = self.tools.get(name)
        if t is None:
            return Answer(n, name, f"no tool named {name!r}; available: {', '.join(sorted(self.tools))}", True)
        self.bind(client)
        try:
            out = t(dict(arguments or {}))
        except ToolError as exc:
            return Answer(n, name, str(exc), True)
        except Exception as exc:  # a failure answers with an error; the server goes on
            return Answer(n, name, f"{name} failed: {type(exc).__name__}: {exc}", True)
        out = out if isinstance(out, ToolOutput) else ToolOutput(str(out))
        return Answer(n, name, out.text, False, dict(out.data) if out.data else None)

    def resources(self) -> list[Any]:
        return []

    def read_resource(self, uri: str) -> str:
        raise ToolError(f"no resource {uri!r}")
