"""The agent's workspace: confined file tools, and ``python_exec``/``bash`` in the sandbox.

Paths are relative to the workspace root. Absolute paths, ``..`` and symlinks that lead out are
refused; so are the files the harness keeps private (``protected`` patterns: stores, transcripts,
evaluation logs), even though nothing secret is ever placed in the workspace in the first place.
``python_exec`` and ``bash`` run in a fresh sandbox each, with the workspace as the only writable
directory, a timeout, and a blocklist of destructive patterns as a second layer.
"""

from __future__ import annotations

import fnmatch
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reasearch.agent.tools.guard import check_command, check_python
from reasearch.agent.tools.schema import ToolError, tool
from reasearch.engine.protocol import Limits

__all__ = ["DEFAULT_PROTECTED", "ExecFn", "Workspace", "WorkspaceTools"]

DEFAULT_PROTECTED: tuple[str, ...] = (
    "*.sqlite", "*.sqlite-*", "*.db", ".reasearch/*", "transcripts/*", "evaluations/*", "*.eval.json",
)
_MAX_WRITE = 2 * 1024 * 1024
_MAX_READ = 256 * 1024

ExecFn = Callable[..., Any]  # exec_in_sandbox(argv, *, workdir, limits, mode) -> ExecOutcome


@dataclass(frozen=True)
class Workspace:
    """A directory the agent may read and write, and nothing outside it.

    Args:
        root: the workspace directory (created if missing).
        protected: glob patterns (relative paths) the agent may neither read nor write.
    """

    root: Path
    protected: tuple[str, ...] = DEFAULT_PROTECTED

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root).resolve())
        self.root.mkdir(parents=True, exist_ok=True)

    def resolve(self, path: str) -> Path:
        """The absolute path of ``path`` inside the workspace; raises ToolError for anything else."""
        if not isinstance(path, str) or not path.strip():
            raise ToolError("give a path relative to the workspace, e.g. 'candidate.py'")
        p = Path(path)
        if p.is_absolute():
            raise ToolError(f"refused: {path!r} is absolute; paths are relative to the workspace")
        if ".." in p.parts:
            raise ToolError(f"refused: {path!r} contains '..'; stay inside the workspace")
        full = self.root / p
        real = Path(os.path.realpath(full))
        if real != self.root and self.root not in real.parents:
            raise ToolError(f"refused: {path!r} leads outside the workspace (a symlink?)")
        rel = real.relative_to(self.root).as_posix() if real != self.root else "."
        if self.is_protected(rel) or self.is_protected(p.as_posix()):
            raise ToolError(f"refused: {path!r} is kept by the harness (evaluation logs and stores are not readable)")
        return full

    def is_protected(self, rel: str) -> bool:
        return any(fnmatch.fnmatch(rel, pat) or fnmatch.fnmatch(Path(rel).name, pat) for pat in self.protected)

    def read_text(self, path: str) -> str:
        full = self.resolve(path)
        if not full.is_file():
            raise ToolError(f"no file {path!r} in the workspace (list_files shows what is there)")
        data = full.read_bytes()[:_MAX_READ]
        return data.decode("utf-8", errors="replace")

    def write_text(self, path: str, content: str) -> Path:
        if len(content.encode()) > _MAX_WRITE:
            raise ToolError(f"refused: content over {_MAX_WRITE // 1024} KiB")
        full = self.resolve(path)
        if full.is_dir():
            raise ToolError(f"{path!r} is a directory")
        full.parent.mkdir(parents=True, exist_ok=True)
        tmp = full.with_name(f".{full.name}.tmp")
        tmp.write_text(content)
        os.replace(tmp, full)  # atomic: a kill never leaves half a file
        return full


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} characters cut ...]\n{text[-half:]}"


def _sandbox_exec() -> ExecFn:
    return importlib.import_module("reasearch.engine").exec_in_sandbox


class WorkspaceTools:
    """File tools, ``python_exec`` and ``bash`` bound to one :class:`Workspace`.

    Args:
        workspace: where the agent works.
        exec_fn: runs a command in the sandbox (default: ``reasearch.engine.exec_in_sandbox``).
        timeout_s: default (and maximum) time of one ``python_exec``/``bash`` call.
        memory_mb: address-space limit of those calls.
        sandbox_mode: ``auto``, ``nsjail`` or ``process``.
        max_output: characters of stdout/stderr returned to the model.
    """

    def __init__(self, workspace: Workspace, *, exec_fn: ExecFn | None = None, timeout_s: float = 300.0,
                 memory_mb: int = 2048, sandbox_mode: str = "auto", max_output: int = 12_000) -> None:
        self.workspace = workspace
        self._exec = exec_fn
        self.timeout_s = float(timeout_s)
        self.memory_mb = memory_mb
        self.sandbox_mode = sandbox_mode
        self.max_output = max_output

    @tool
    def read_file(self, path: str, offset: int = 1, limit: int = 500) -> str:
        """Reads a text file of the workspace, with line numbers.

        Args:
            path: file path relative to the workspace, e.g. 'candidate.py' or 'TASK.md'.
            offset: first line to show (1-based).
            limit: how many lines to show at most.
        """
        lines = self.workspace.read_text(path).splitlines()
        start = max(offset, 1)
        chunk = lines[start - 1:start - 1 + max(limit, 1)]
        body = "\n".join(f"{i:5d}  {line}" for i, line in enumerate(chunk, start))
        end = start + len(chunk) - 1
        if start > 1 or end < len(lines):
            body += f"\n[lines {start}-{end} of {len(lines)}]"
        return body or f"[{path} is empty]"

    @tool
    def write_file(self, path: str, content: str) -> str:
        """Writes (creates or replaces) a text file in the workspace.

        Args:
            path: file path relative to the workspace, e.g. 'notes.md'.
            content: the whole new content of the file.
        """
        self.workspace.write_text(path, content)
        return f"wrote {len(content.encode())} bytes to {path}"

    @tool
    def list_files(self, path: str = ".") -> str:
        """Lists the files of a workspace directory (recursively, sizes in bytes).

        Args:
            path: directory relative to the workspace.
        """
        base = self.workspace.resolve(path)
        if not base.is_dir():
            raise ToolError(f"{path!r} is not a directory of the workspace")
        rows: list[str] = []
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and not d.startswith("__pycache__"))
            for name in sorted(filenames):
                full = Path(dirpath) / name
                rel = full.relative_to(self.workspace.root).as_posix()
                if self.workspace.is_protected(rel) or name.startswith("."):
                    continue
                rows.append(f"{rel}  ({full.lstat().st_size} B)")
                if len(rows) >= 500:
                    rows.append("[listing cut at 500 files]")
                    return "\n".join(rows)
        return "\n".join(rows) or "[empty]"

    def _run(self, argv: list[str], timeout_s: float | None) -> str:
        limit = self.timeout_s if timeout_s is None else min(max(float(timeout_s), 1.0), self.timeout_s)
        run = self._exec or _sandbox_exec()
        out = run(argv, workdir=self.workspace.root, limits=Limits(wall_s=limit, memory_mb=self.memory_mb),
                  mode=self.sandbox_mode)
        status = getattr(out.status, "value", out.status)
        parts = [f"[status {status}, exit code {out.exit_code}, {out.wall_s:.2f} s, sandbox={out.sandbox_mode}]"]
        if out.stdout:
            parts.append("stdout:\n" + _truncate(out.stdout, self.max_output))
        if out.stderr:
            parts.append("stderr:\n" + _truncate(out.stderr, self.max_output))
        if status == "TIMEOUT":
            parts.append(f"killed at the {limit:g} s limit")
        return "\n".join(parts)

    @tool
    def python_exec(self, code: str, timeout_s: float | None = None) -> str:
        """Runs Python code in the sandbox (cwd = the workspace, the only writable directory).

        Use it to test ideas quickly; scores come only from `evaluate`.

        Args:
            code: a Python program; print what you want to see.
            timeout_s: seconds before it is killed (default and maximum: the harness's tool timeout).
        """
        check_python(code)
        # "python3" is the sandbox runtime's interpreter (NumPy, SciPy, numba and reasearch importable).
        return self._run(["python3", "-c", code], timeout_s)

    @tool
    def bash(self, command: str, timeout_s: float | None = None) -> str:
        """Runs a bash command in the sandbox (cwd = the workspace, the only writable directory).

        Args:
            command: the command line.
            timeout_s: seconds before it is killed (default and maximum: the harness's tool timeout).
        """
        check_command(command)
        return self._run(["/bin/bash", "-c", command], timeout_s)
