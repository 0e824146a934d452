"""Syntax trees built from threads (issue 39 item 5): CPython 3.11's AST constructor keeps its recursion
counter per interpreter, so two threads building trees at once fail with ``SystemError: AST constructor
recursion depth mismatch``. Every parse of the package goes through :mod:`reasearch.ast_lock`.

The race is forced, not hoped for: a finalizer that sleeps (giving up the GIL) and leaves another cycle
for the next collection runs at every garbage collection, and collections happen many times inside one
conversion (every node is a tracked allocation).
"""

from __future__ import annotations

import ast
import contextlib
import gc
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from reasearch import ast_lock

ROOT = Path(__file__).resolve().parents[1] / "reasearch"
_SOURCE = "\n".join(f"x{i} = [{', '.join(str(j) for j in range(20))}]" for i in range(50))


class _Yielder:
    """Cyclic garbage whose finalizer sleeps (another thread runs) and leaves the next one behind."""

    live = True

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        if _Yielder.live:
            time.sleep(0.0001)
            _Yielder()


@contextlib.contextmanager
def _switching_collector() -> Iterator[None]:
    before = gc.get_threshold()
    _Yielder.live = True
    _Yielder()
    gc.set_threshold(100, 10, 10)
    try:
        yield
    finally:
        _Yielder.live = False
        gc.set_threshold(*before)
        gc.collect()


def _hammer(call: Callable[[], Any], threads: int = 4, rounds: int = 20) -> list[BaseException]:
    errors: list[BaseException] = []

    def at_depth(depth: int) -> None:  # threads parse at different stack depths, as fleet members do
        if depth:
            return at_depth(depth - 1)
        try:
            for _ in range(rounds):
                call()
        except Exception as exc:  # noqa: BLE001 (the failure is the result)
            errors.append(exc)

    with _switching_collector():
        workers = [threading.Thread(target=at_depth, args=(3 * i,)) for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=120)
    assert not any(w.is_alive() for w in workers)
    return errors


def test_the_forced_interleaving_breaks_bare_parses() -> None:
    """The positive control: without the lock the same threads fail as issue 39 saw it."""
    errors = _hammer(lambda: ast.parse(_SOURCE))
    assert errors and all(isinstance(e, SystemError) and "recursion depth mismatch" in str(e) for e in errors), errors


@pytest.mark.parametrize("call", [lambda: ast_lock.parse(_SOURCE),
                                  lambda: ast_lock.literal_eval("[" + ", ".join(map(str, range(400))) + "]")],
                         ids=["parse", "literal_eval"])
def test_parses_through_the_lock_survive_the_interleaving(call: Callable[[], Any]) -> None:
    assert _hammer(call) == []


def test_the_demo_models_mutation_survives_the_interleaving() -> None:
    import random

    from reasearch.models.demo import mutate_python

    source = "A = 1.5\nB = [" + ", ".join(f"{i}.25" for i in range(300)) + "]\n"
    assert _hammer(lambda: mutate_python(source, random.Random(0))) == []


def test_a_parse_waits_while_another_thread_holds_the_lock() -> None:
    entered = threading.Event()
    with ast_lock.AST_LOCK:
        t = threading.Thread(target=lambda: (ast_lock.parse("x = 1"), entered.set()))
        t.start()
        assert not entered.wait(0.2)  # blocked: no assert on how long, only that it did not get in
    t.join(timeout=30)
    assert entered.is_set()


# Modules that format tracebacks in a process of their own (the sandbox's worker, supervisor and children,
# a scoring jail, a jailed harness): no thread of the trusted side runs there.
_OWN_PROCESS = {"engine/_child.py", "engine/_worker.py", "engine/_supervisor.py", "evaluators/_scoring_jail.py",
                "evaluators/arc_agi_2/_harness.py"}
_TRACEBACK_FORMATTERS = ("format_exc", "print_exc", "format_exception", "print_exception")


_MAY_BUILD = re.compile(r"\b(?:ast|traceback)\b")


def _bare_tree_builders(root: Path) -> list[str]:
    """``file:line`` of calls that build a syntax tree from text (or format a traceback) without the lock."""
    out = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "ast_lock.py":
            continue
        text = path.read_text(encoding="utf-8")
        if not _MAY_BUILD.search(text):  # every form below names ``ast`` or ``traceback``: no need to walk the tree
            continue
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            bare = (name in ("parse", "literal_eval") and isinstance(f, ast.Attribute)
                    and isinstance(f.value, ast.Name) and f.value.id == "ast")
            bare |= name == "compile" and "PyCF_ONLY_AST" in ast.unparse(node)
            if bare and name == "literal_eval" and node.args and isinstance(node.args[0], ast.Attribute):
                bare = False  # evaluates a node already built (engine/testing.py): builds no tree
            bare |= (name in _TRACEBACK_FORMATTERS and isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                     and f.value.id == "traceback" and str(path.relative_to(root)) not in _OWN_PROCESS)
            if bare:
                out.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return out


def test_no_module_builds_a_tree_without_the_lock(tmp_path: Path) -> None:
    assert _bare_tree_builders(ROOT) == []
    planted = tmp_path / "reasearch" / "x.py"  # the finder sees each form
    planted.parent.mkdir()
    planted.write_text("import ast\nast.parse('1')\nast.literal_eval(text)\n"
                       "compile(s, 'f', 'exec', ast.PyCF_ONLY_AST)\ntraceback.format_exc()\n")
    assert _bare_tree_builders(planted.parent) == [f"reasearch/x.py:{i}" for i in (2, 3, 4, 5)]
