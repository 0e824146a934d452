"""The store is composed, not split by private cross-calls (issue 42 item 3): the store's modules and its
migrations reach only the public face of one another's objects (a ``_name`` is read on ``self`` or
``cls`` only), and the schema opens through a bare :class:`SQLConnection`, with no store object."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from reasearch.errors import StoreError
from reasearch.runs.store import SCHEMA_VERSION, MemoryConnection, SQLiteConnection, SQLiteStore
from reasearch.runs.store.migrations import open_schema

STORE = Path(__file__).resolve().parents[2] / "reasearch" / "runs" / "store"


def private_reaches(source: str) -> list[str]:
    """``obj._name`` uses in ``source`` where ``obj`` is not ``self`` or ``cls`` (dunders aside)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
            out.append(f"{ast.unparse(node)} (line {node.lineno})")
    return out


def test_the_finder_sees_a_private_cross_call() -> None:
    planted = "def migrate(store):\n    if not store._column_exists('runs', 'x'):\n        store._exec('ALTER')\n"
    assert private_reaches(planted) == ["store._column_exists (line 2)", "store._exec (line 3)"]
    assert private_reaches("class A:\n    def f(self):\n        return self._x, cls._y, self.__class__\n") == []


@pytest.mark.parametrize("module", sorted(p.name for p in STORE.glob("*.py")))
def test_no_store_module_reaches_into_another_object(module: str) -> None:
    assert private_reaches((STORE / module).read_text()) == []


def test_the_schema_opens_through_a_bare_connection(tmp_path: Path) -> None:
    db = SQLiteConnection(tmp_path / "store.sqlite")
    open_schema(db)
    open_schema(db)  # a second open changes nothing
    assert db.one("SELECT value FROM meta WHERE key = ?", ("schema_version",)) == (str(SCHEMA_VERSION),)
    assert db.column_exists("runs", "task_spec") and not db.column_exists("runs", "no_such_column")
    assert db.table_exists("reservations") and not db.table_exists("no_such_table")
    with db.transaction():
        db.execute("UPDATE meta SET value = ? WHERE key = ?", (str(SCHEMA_VERSION + 1), "schema_version"))
    db.close()
    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1}, newer"):
        SQLiteStore(tmp_path / "store.sqlite")


def test_a_failed_transaction_on_the_connection_leaves_nothing() -> None:
    db = MemoryConnection("memory://")
    open_schema(db)
    with pytest.raises(RuntimeError), db.transaction():
        db.execute("INSERT INTO meta (key, value) VALUES (?, ?)", ("planted", "1"))
        raise RuntimeError("crash inside the transaction")
    assert db.one("SELECT value FROM meta WHERE key = ?", ("planted",)) is None
    db.close()
