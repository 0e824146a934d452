"""One process-wide lock around building Python syntax-tree objects: every trusted-side parse goes through here.

CPython 3.11 keeps the AST constructor's recursion counter in per-interpreter state (``PyAST_mod2obj``
sets it on entry and checks it on exit). A conversion can give up the GIL midway (an allocation runs the
garbage collector, which runs a Python finalizer), so two threads building trees at once (``ast.parse``,
``compile(..., ast.PyCF_ONLY_AST)``, ``ast.literal_eval`` of a string) can interleave and one of them
fails with ``SystemError: AST constructor recursion depth mismatch``. Formatting a traceback parses too
(3.11's ``traceback`` module parses each shown line to place its ``^~~`` markers): :func:`format_exc`.
Fleet members are threads of one process (the demo model, the agent's routing,
the pool's import scan, task checks all parse), so such a call is made here, under :data:`AST_LOCK`,
never directly.

The lock is re-entrant: a finalizer that parses while its own thread holds it goes on (a plain lock would
deadlock that thread; such a nested parse is the one case a lock cannot cover).
What is parsed is often hostile text; parsing never runs it.

Imports nothing of the package: every layer (the engine and the model clients included) may import it,
and the jail's code copy holds it. Import its functions (``from reasearch.ast_lock import parse as
parse_locked``), not the module through the package root (``from reasearch import ast_lock`` makes the
engine depend on ``reasearch/__init__.py``, whose type-checking imports reach the evaluators: mypy then
reports ``Name "spec" already defined``).
"""

from __future__ import annotations

import ast
import threading
import traceback

__all__ = ["AST_LOCK", "format_exc", "literal_eval", "parse"]

AST_LOCK = threading.RLock()


def parse(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source, filename)`` (a module) under :data:`AST_LOCK` (same result, same exceptions)."""
    with AST_LOCK:
        return ast.parse(source, filename)


def literal_eval(text: str | ast.AST) -> object:
    """``ast.literal_eval(text)`` under :data:`AST_LOCK` (literals only: never evaluates code; a node already
    built is evaluated as it is)."""
    with AST_LOCK:
        return ast.literal_eval(text)


def format_exc(limit: int | None = None) -> str:
    """``traceback.format_exc(limit)`` under :data:`AST_LOCK` (the formatting parses the lines it shows)."""
    with AST_LOCK:
        return traceback.format_exc(limit)
