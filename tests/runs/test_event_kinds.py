"""``EventKind``: one vocabulary of event kinds for writers and readers, stored as the plain strings of old."""

from __future__ import annotations

import ast
from pathlib import Path

from reasearch.runs.events import REPLY_KINDS, EventKind, attempt_kind, base_kind
from reasearch.runs.store import Store
from reasearch.runs.testing import make_run_record

PACKAGE = Path(__file__).resolve().parents[2] / "reasearch"
_WRITERS = {"log_event", "record", "get"}
# Readers that compare a local ``kind``/``base`` (elsewhere those names mean other things: dtype kinds, tool kinds).
_READERS = {
    "agent/console.py",
    "agent/replay.py",
    "runs/journal.py",
    "agent/loop.py",
    "reports/_sections.py",
    "reports/_model.py",
    "reports/serve.py",
    "agent/lessons.py",
}  # Run/Store.log_event, Journal.record/get (kind is the 2nd argument)


def test_a_kind_is_stored_and_read_as_its_string(store: Store) -> None:
    store.create_run(make_run_record("r1"))
    assert store.log_event("r1", 0, EventKind.START, {"a": 1})
    assert not store.log_event("r1", 0, "start", {"a": 2})  # the same (step, kind): idempotent
    assert store.log_event("r1", 1, "tool_result", {})  # as an older version wrote it
    got = store.events("r1")
    assert [(e.kind, type(e.kind)) for e in got] == [("start", str), ("tool_result", str)]
    assert [e.step for e in store.events("r1", kind=EventKind.TOOL_RESULT)] == [1]
    assert got[0].kind == EventKind.START and got[0].payload == {"a": 1}


def test_suffixes() -> None:
    assert attempt_kind(EventKind.MODEL_REPLY, 0) == "model_reply"
    assert attempt_kind(EventKind.MODEL_REPLY, 2) == "model_reply.2"
    assert base_kind("model_reply.2") in REPLY_KINDS and base_kind("fallback.model_reply") == EventKind.FALLBACK
    assert base_kind("tool_call") not in REPLY_KINDS


def _literal_kinds() -> dict[str, str]:
    """Every event kind the package writes or reads as a string literal: ``kind -> where``."""
    found: dict[str, str] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name == "testing.py":  # test kits write made-up kinds on purpose
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            lits: list[ast.expr] = []
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                name = node.func.attr
                if name == "log_event" and len(node.args) >= 2:
                    lits.append(node.args[-2])
                elif name in _WRITERS and len(node.args) >= 2 and "journal" in ast.unparse(node.func.value):
                    lits.append(node.args[1])
                lits += [k.value for k in node.keywords if k.arg == "kind" and name == "events"]
            elif isinstance(node, ast.Compare) and (ast.unparse(node.left) in ("e.kind", "ev.kind", "event.kind") or (
                    ast.unparse(node.left) in ("kind", "base") and str(path.relative_to(PACKAGE)) in _READERS)):
                for c in node.comparators:
                    lits += list(c.elts) if isinstance(c, ast.Tuple) else [c]
            for lit in lits:
                if isinstance(lit, ast.Constant) and isinstance(lit.value, str):
                    found.setdefault(lit.value, f"{path.relative_to(PACKAGE.parent)}:{lit.lineno}")
    return found


def test_every_kind_the_package_uses_is_an_event_kind() -> None:
    found = _literal_kinds()
    assert {"start", "final", "tool_result"} <= set(found)  # the scan sees the agent loop's literal kinds
    unknown = {k: where for k, where in found.items() if k not in {m.value for m in EventKind}}
    assert not unknown, f"add these to reasearch.runs.events.EventKind (writers and readers share it): {unknown}"
