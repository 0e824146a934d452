"""Engine doubles for tests and benchmarks of the layers above, shipped so other packages can use them.

:class:`StaticRunner` is a ``SandboxRunner`` that never executes code: it reads the literal a
candidate's entry point returns (``return [1.0, 2.0]``) from the syntax tree. For harness tests and
benchmarks that must exclude evaluation time; real evaluations go through the engine's sandbox.
Trust boundary: the candidate's source is only parsed (``ast``), never run.

:class:`CpuBurner` starts busy processes beside the engine (a machine a user has is never idle) and
always stops them: at the end of its block, on Ctrl-C, and, should this process die without its
clean-up, on their own (each one checks that its parent is still the one that started it).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from types import TracebackType
from typing import Any

from reasearch.ast_lock import parse as parse_locked
from reasearch.engine.protocol import RunOutcome, RunRequest, Status
from reasearch.errors import ConfigError

__all__ = ["CpuBurner", "StaticRunner"]

# A busy loop that ends when its parent is gone (checked every ~10 ms of spinning).
_BURN = ("import os, sys\n"
         "parent = os.getppid()\n"
         "if sys.argv[1]:\n"
         "    os.sched_setaffinity(0, {int(c) for c in sys.argv[1].split(',')})\n"
         "while os.getppid() == parent:\n"
         "    for _ in range(100000):\n"
         "        pass\n")


class CpuBurner:
    """``n`` busy processes (``with CpuBurner(4): ...``), each in its own session (its own scheduling
    group where the kernel groups by session), at this process's niceness, on ``cpus`` when given.

    They start at ``__enter__`` and are killed and reaped at ``__exit__``, whatever ended the block.
    """

    def __init__(self, n: int, cpus: set[int] | None = None) -> None:
        if n < 0:
            raise ConfigError(f"CpuBurner needs n >= 0 processes; got {n}")
        self.n = n
        self.cpus = ",".join(str(c) for c in sorted(cpus)) if cpus else ""
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> CpuBurner:
        try:
            for _ in range(self.n):
                self.procs.append(subprocess.Popen([sys.executable, "-S", "-c", _BURN, self.cpus],
                                                   stdin=subprocess.DEVNULL, start_new_session=True))
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def stop(self) -> None:
        """Kills and reaps every burner (each by its own pid)."""
        procs, self.procs = self.procs, []
        for p in procs:
            if p.poll() is None:
                try:
                    os.kill(p.pid, 9)
                except ProcessLookupError:
                    pass
        for p in procs:
            p.wait()


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
