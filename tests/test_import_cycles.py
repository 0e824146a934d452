"""No import circle between the package's modules (issue 31): read from the source with ``ast``, counting
imports inside functions too (a lazy import that closes a circle still ties the two modules together),
and imports under ``if TYPE_CHECKING:`` too (a module typed against another's class, calling its methods,
depends on it as much as one that imports it at run time: ``store/migrations`` <-> ``store/core`` was such a
circle). One kind of type-only import is left out: a package ``__init__`` declaring its own submodules'
names for the type checker while it resolves them lazily (PEP 562); that points into its own subtree only.

The circles still open are listed with the branch that removes them; a new one fails the suite.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "reasearch"

# Circles allowed for now, each with the branch that removes it (issue 31 removed the last three run-time ones).
KNOWN: dict[frozenset[str], str] = {}  # none left (issue 42 item 3 broke store.core <-> store.migrations)


def import_graph(root: Path) -> dict[str, set[str]]:
    """``module -> modules of the package it imports`` (``from a import b`` counts ``a`` and ``a.b``); type-only
    imports count, except a package ``__init__``'s type-only imports of its own submodules."""
    files = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                       and ast.unparse(block.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
                       for stmt in block.body for n in ast.walk(stmt)}
        lazy_init = path.name == "__init__.py"
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            if lazy_init and id(node) in typing_only:  # the package's lazy public names, for the type checker
                names = [n for n in names if not n.startswith(module + ".")]
            graph[module] |= {n for n in names if n in files and n != module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return out


def test_the_finder_sees_a_planted_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [frozenset({"a", "b", "c"})]


def test_the_finder_sees_a_circle_closed_by_a_type_only_import(tmp_path: Path) -> None:
    pkg = tmp_path / "reasearch"
    (pkg / "store").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "store" / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from reasearch.store.core import Core\n")
    (pkg / "store" / "core.py").write_text("from reasearch.store.migrations import migrate\n")
    (pkg / "store" / "migrations.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from reasearch.store.core import Core\n"
        "def migrate(core: 'Core') -> None:\n    core._exec('ALTER TABLE t')\n")
    (pkg / "store" / "view.py").write_text("import reasearch.store\n")  # imports its package: no circle
    assert circles(import_graph(pkg)) == [frozenset({"reasearch.store.core", "reasearch.store.migrations"})]


def test_no_import_circle_beyond_the_known_ones() -> None:
    new = [sorted(c) for c in circles(import_graph(ROOT)) if c not in KNOWN]
    assert not new, f"import circles (break them with a module both sides import): {new}"
