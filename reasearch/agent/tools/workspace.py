"""The agent's workspace: confined file tools, and ``python_exec``/``bash`` in the sandbox.

Paths are relative to the workspace root. Absolute paths, ``..`` and symlinks (any symlink on the
path, wherever it points: the agent's ``bash`` can plant them while the harness runs as root) are
refused; so are the files the harness keeps private (``protected`` patterns: stores, transcripts,
evaluation logs), even though nothing secret is ever placed in the workspace in the first place.
Every read and write goes through :mod:`reasearch.hostfs.guarded_path`. ``python_exec`` and ``bash`` run
in a fresh sandbox each, with the workspace as the only writable directory, a timeout, and a
blocklist of destructive patterns as a second layer. A :class:`Quota` bounds the bytes and inodes
the workspace holds: a command that leaves it over the quota is rolled back (what it created is
removed, what it grew is cut back) and answered with a tool error.
"""

from __future__ import annotations

import fnmatch
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reasearch.agent.tools.guard import check_command, check_python
from reasearch.agent.tools.schema import ToolError, tool
from reasearch.engine.exec import exec_in_sandbox
from reasearch.engine.protocol import Limits
from reasearch.errors import ConfigError
from reasearch.hostfs.guarded_path import Root, UnsafePathError, split

__all__ = ["DEFAULT_PROTECTED", "ExecFn", "Quota", "Workspace", "WorkspaceTools"]

DEFAULT_PROTECTED: tuple[str, ...] = (
    "*.sqlite", "*.sqlite-*", "*.db", ".reasearch/*", "transcripts/*", "evaluations/*", "*.eval.json",
)
_MAX_WRITE = 2 * 1024 * 1024
_MAX_READ = 256 * 1024

ExecFn = Callable[..., Any]  # exec_in_sandbox(argv, *, workdir, limits, mode) -> ExecOutcome


@dataclass(frozen=True, slots=True)
class Quota:
    """What one workspace may hold on the host: bytes (allocated or apparent, the larger) and inodes.

    Args:
        max_bytes: bytes of all files and directories.
        max_inodes: files, directories and links (hard links counted once).
    """

    max_bytes: int = 256 * 1024 * 1024
    max_inodes: int = 20_000

    def __post_init__(self) -> None:
        if self.max_bytes < 1 << 20 or self.max_inodes < 16:
            raise ConfigError(f"a workspace quota needs at least 1 MiB and 16 inodes, not {self}")

    def describe(self) -> str:
        return f"{self.max_bytes / 2**20:g} MiB / {self.max_inodes} files"


@dataclass(frozen=True)
class Workspace:
    """A directory the agent may read and write, and nothing outside it.

    Every operation goes through :class:`~reasearch.hostfs.guarded_path.Root`: relative to the open root
    directory, never following a symlink (the agent's own ``bash`` can plant them), reading only regular
    files up to a cap, writing through fresh exclusive temporary files. The :class:`Quota` bounds what
    the workspace holds on the host.

    Args:
        root: the workspace directory (created if missing).
        protected: glob patterns (relative paths) the agent may neither read nor write.
        quota: bytes and inodes the workspace may hold.
    """

    root: Path
    protected: tuple[str, ...] = DEFAULT_PROTECTED
    quota: Quota = field(default_factory=Quota)
    fs: Root = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root).resolve())
        self.root.mkdir(parents=True, exist_ok=True)
        object.__setattr__(self, "fs", Root(self.root))

    def resolve(self, path: str) -> str:
        """``path`` normalized relative to the workspace ('' for the root); raises ToolError for a path
        that is absolute, climbs with '..', or names a protected file. Symlinks are refused when opened."""
        if not isinstance(path, str) or not path.strip():
            raise ToolError("give a path relative to the workspace, e.g. 'candidate.py'")
        try:
            rel = "/".join(split(path))
        except UnsafePathError as exc:
            raise ToolError(f"refused: {exc}") from None
        if rel and self.is_protected(rel):
            raise ToolError(f"refused: {path!r} is kept by the harness (evaluation logs and stores are not readable)")
        return rel

    def is_protected(self, rel: str) -> bool:
        return any(fnmatch.fnmatch(rel, pat) or fnmatch.fnmatch(Path(rel).name, pat) for pat in self.protected)

    def read_bytes(self, path: str, *, cap: int = _MAX_WRITE, cut: bool = False, missing: bytes | None = None) -> bytes:
        """A regular file of the workspace: refused when over ``cap`` bytes, or cut there when ``cut``.

        This is the only way the harness reads the workspace (tools, the snapshot, evaluations): a
        symlink anywhere on the path, a FIFO, a device or an oversized file is refused with a ToolError.
        ``missing`` is returned for a file that does not exist (default: a ToolError).
        """
        rel = self.resolve(path)
        try:
            return self.fs.read_bytes(rel, cap=cap, cut=cut)
        except FileNotFoundError:
            if missing is not None:
                return missing
            raise ToolError(f"no file {path!r} in the workspace (list_files shows what is there)") from None
        except UnsafePathError as exc:
            raise ToolError(f"refused: {exc}") from None

    def read_text(self, path: str, *, cap: int = _MAX_READ, cut: bool = True, missing: str | None = None) -> str:
        """A text file of the workspace (the first ``cap`` bytes by default; see :meth:`read_bytes`)."""
        data = self.read_bytes(path, cap=cap, cut=cut, missing=None if missing is None else missing.encode())
        return data.decode("utf-8", errors="replace")

    def write_text(self, path: str, content: str) -> Path:
        """Writes a file atomically (a symlink at the name is replaced, never followed), within the quota."""
        data = content.encode()
        if len(data) > _MAX_WRITE:
            raise ToolError(f"refused: content over {_MAX_WRITE // 1024} KiB")
        rel = self.resolve(path)
        if not rel:
            raise ToolError(f"{path!r} is the workspace itself, not a file")
        try:
            old = self.fs.lstat(rel)
            if old is not None and stat.S_ISDIR(old.st_mode):
                raise ToolError(f"{path!r} is a directory")
            if old is not None and stat.S_ISLNK(old.st_mode):
                raise ToolError(f"refused: {path!r} is a symlink (symlinks in the workspace are never followed "
                                "nor written through); remove it first")
            used = self.fs.usage()
            freed = max(old.st_size, old.st_blocks * 512) if old is not None and old.st_nlink == 1 else 0
            new_bytes = used.bytes - freed + len(data) + 4096
            new_inodes = used.inodes + (len(split(rel)) if old is None else 0)  # missing parents are created
            if new_bytes > self.quota.max_bytes or new_inodes > self.quota.max_inodes:
                raise ToolError(f"refused: writing {path!r} would take the workspace over its quota "
                                f"({self.quota.describe()}; it holds {used.bytes / 2**20:.1f} MiB in "
                                f"{used.inodes} files). Delete what you no longer need first")
            self.fs.write_bytes(rel, data)
        except UnsafePathError as exc:
            raise ToolError(f"refused: {exc}") from None
        return self.root / rel

    def manifest(self) -> dict[str, tuple[int, int]]:
        """``{path: (inode, size)}`` of every entry (what :meth:`enforce_quota` rolls back to)."""
        return {e.rel: (e.st.st_ino, e.st.st_size) for e in self.fs.walk()}

    def enforce_quota(self, before: Mapping[str, tuple[int, int]]) -> str | None:
        """After a command: when the workspace is over its quota, removes every entry created since
        ``before`` and cuts every file that grew back to its earlier size. Returns what was done (None
        when within the quota)."""
        used = self.fs.usage()
        if used.bytes <= self.quota.max_bytes and used.inodes <= self.quota.max_inodes:
            return None
        removed: list[str] = []
        cut = 0
        gone: tuple[str, ...] = ()
        for e in list(self.fs.walk()):
            if gone and e.rel.startswith(gone):
                continue
            was = before.get(e.rel)
            if was is None or was[0] != e.st.st_ino:
                self.fs.remove(e.rel)
                removed.append(e.rel)
                gone = (*gone, e.rel + "/")
            elif stat.S_ISREG(e.st.st_mode) and e.st.st_size > was[1]:
                self.fs.truncate(e.rel, was[1])
                cut += 1
        after = self.fs.usage()
        return (f"the workspace went over its quota ({self.quota.describe()}): the command left "
                f"{used.bytes / 2**20:.1f} MiB in {used.inodes} files. Rolled back: {len(removed)} new entries "
                f"removed, {cut} grown files cut back to their earlier size; it now holds "
                f"{after.bytes / 2**20:.1f} MiB in {after.inodes} files")


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} characters cut ...]\n{text[-half:]}"


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
        ws = self.workspace
        rel = "" if path.strip() in (".", "./") else ws.resolve(path)
        try:
            st = ws.fs.lstat(rel)
            if st is not None and stat.S_ISLNK(st.st_mode):
                raise ToolError(f"refused: {path!r} is a symlink (symlinks in the workspace are never followed)")
            if st is None or not stat.S_ISDIR(st.st_mode):
                raise ToolError(f"{path!r} is not a directory of the workspace")
            rows: list[str] = []
            hidden: tuple[str, ...] = ()
            for e in ws.fs.walk(rel):
                name = e.rel.rsplit("/", 1)[-1]
                if hidden and e.rel.startswith(hidden):
                    continue
                if e.is_dir:
                    if name.startswith((".", "__pycache__")):
                        hidden = (*hidden, e.rel + "/")
                    continue
                if ws.is_protected(e.rel) or name.startswith("."):
                    continue
                link = " -> symlink, not followed" if stat.S_ISLNK(e.st.st_mode) else ""
                rows.append(f"{e.rel}  ({e.st.st_size} B{link})")
                if len(rows) >= 500:
                    rows.append("[listing cut at 500 files]")
                    return "\n".join(rows)
        except UnsafePathError as exc:
            raise ToolError(f"refused: {exc}") from None
        return "\n".join(rows) or "[empty]"

    def _run(self, argv: list[str], timeout_s: float | None) -> str:
        limit = self.timeout_s if timeout_s is None else min(max(float(timeout_s), 1.0), self.timeout_s)
        run = self._exec or exec_in_sandbox
        before = self.workspace.manifest()
        try:
            out = run(argv, workdir=self.workspace.root, limits=Limits(wall_s=limit, memory_mb=self.memory_mb),
                      mode=self.sandbox_mode)
        except BaseException:
            self.workspace.enforce_quota(before)  # whatever went wrong, nothing over the quota stays
            raise
        over = self.workspace.enforce_quota(before)
        status = getattr(out.status, "value", out.status)
        parts = [f"[status {status}, exit code {out.exit_code}, {out.wall_s:.2f} s, sandbox={out.sandbox_mode}]"]
        if out.stdout:
            parts.append("stdout:\n" + _truncate(out.stdout, self.max_output))
        if out.stderr:
            parts.append("stderr:\n" + _truncate(out.stderr, self.max_output))
        if status == "TIMEOUT":
            parts.append(f"killed at the {limit:g} s limit")
        if over is not None:
            raise ToolError(f"refused: {over}. Keep large or numerous files in /tmp (it is emptied after each "
                            "call) and delete what you no longer need.\n" + "\n".join(parts))
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
