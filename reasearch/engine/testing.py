"""Engine doubles for tests and benchmarks of the layers above, shipped so other packages can use them.

:class:`StaticRunner` is a ``SandboxRunner`` that never executes code: it reads the literal a
candidate's entry point returns (``return [1.0, 2.0]``) from the syntax tree. For harness tests and
benchmarks that must exclude evaluation time; real evaluations go through the engine's sandbox.
Trust boundary: the candidate's source is only parsed (``ast``), never run.
"""

from __future__ import annotations

import ast
from typing import Any

from reasearch.ast_lock import parse as parse_locked
from reasearch.engine.protocol import RunOutcome, RunRequest, Status
from reasearch.errors import ConfigError

__all__ = ["StaticRunner"]


class StaticRunner:
    """A ``SandboxRunner`` that executes nothing: it reads the literal the entry point returns.

    ``def run(): return [1.0, 2.0]`` gives ``[1.0, 2.0]``; anything it cannot read statically is a
    ``CRASH``. Only for tests and benchmarks of the harness (no candidate code ever runs).

    Attributes:
        requests: the requests received, in order.
    """

    mode = "static"

    def __init__(self) -> None:
        self.requests: list[RunRequest] = []

    def run(self, request: RunRequest) -> RunOutcome:
        self.requests.append(request)
        try:
            tree = parse_locked(request.source)
        except SyntaxError as exc:
            return RunOutcome(Status.CRASH, None, 0.0, 0.0, error=f"SyntaxError: {exc}", sandbox_mode=self.mode)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in tuple(request.entry):
                for stmt in ast.walk(node):
                    if isinstance(stmt, ast.Return) and stmt.value is not None:
                        try:
                            return RunOutcome(Status.OK, ast.literal_eval(stmt.value), 0.0, 0.0, sandbox_mode=self.mode)
                        except ValueError as exc:
                            return RunOutcome(Status.CRASH, None, 0.0, 0.0, error=f"not a literal: {exc}",
                                              sandbox_mode=self.mode)
        return RunOutcome(Status.CRASH, None, 0.0, 0.0, error=f"no function named {request.entry[0]!r}",
                          sandbox_mode=self.mode)

    def session(self, request: RunRequest) -> Any:
        raise ConfigError("StaticRunner has no sessions")
