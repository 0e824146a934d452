"""Cheap model first: the checks that send a role's work to its fallback (stronger) model."""

from __future__ import annotations

import ast
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from reasearch.agent.tools.program import extract_code
from reasearch.ast_lock import parse as parse_locked
from reasearch.engine.protocol import Limits

__all__ = ["FALLBACK", "edit_problem", "fallback_role"]

FALLBACK = ":fallback"  # models[role + FALLBACK] is the role's fallback client
_CHECK_PREFIX = ".edit-check-"  # hidden from list_files; removed after the check
_IMPORT_CHECK = (
    "import runpy, sys\n"
    "ns = runpy.run_path({path!r}, run_name='candidate')\n"
    "names = {names!r}\n"
    "if not any(callable(ns.get(n)) for n in names):\n"
    "    sys.exit('no callable ' + ' or '.join(names) + ' after import')\n"
)


def fallback_role(role: str) -> str:
    return role + FALLBACK


def edit_problem(text: str, entries: Sequence[str], *, workspace: Path | None = None,
                 exec_fn: Callable[..., Any] | None = None, timeout_s: float = 30.0,
                 memory_mb: int = 2048, sandbox_mode: str = "auto") -> str | None:
    """Why an editor reply is unusable (None when it is fine).

    Checks, cheapest first: a fenced code block, that it compiles, that it defines the entry point
    (one of ``entries``) at module level, and, when ``workspace`` is given, that it imports in the
    sandbox (``exec_fn``, default the engine's) with the entry callable afterwards: its top level runs,
    the entry point is not called.
    """
    code = extract_code(text)
    if code is None:
        return "the reply has no ```python block"
    try:
        tree = parse_locked(code)
    except SyntaxError as exc:
        return f"the code does not compile (line {exc.lineno}: {exc.msg})"
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    defined |= {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    defined |= {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    if entries and not defined & set(entries):
        return f"the code defines no {' or '.join(entries)}()"
    if workspace is None:
        return None
    if exec_fn is None:
        from reasearch.engine import exec_in_sandbox  # lazy: the engine is not needed before

        exec_fn = exec_in_sandbox
    # An exclusive new file: a name the agent planted (a symlink out of the workspace) is never followed.
    fd, name = tempfile.mkstemp(dir=workspace, prefix=_CHECK_PREFIX, suffix=".py")
    path = Path(name)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(code)
        out = exec_fn(["python3", "-c", _IMPORT_CHECK.format(path=str(path), names=list(entries))], workdir=workspace,
                      limits=Limits(wall_s=timeout_s, memory_mb=memory_mb), mode=sandbox_mode)
    finally:
        path.unlink(missing_ok=True)
    status = str(getattr(out.status, "value", out.status))
    if status != "OK":
        tail = " ".join((out.stderr or out.stdout or "").split())[-300:]
        return f"the code does not import ({status}, exit code {out.exit_code}): {tail or json.dumps(status)}"
    return None
