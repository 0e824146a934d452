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


def test_the_store_holds_its_parts_instead_of_inheriting_them() -> None:
    from reasearch.runs.store.fleets import Fleets
    from reasearch.runs.store.metered import MeteredCalls
    from reasearch.runs.store.reservations import Reservations
    from reasearch.runs.store.sql import SQLStore

    for part in (Reservations, Fleets, MeteredCalls):
        assert part.__mro__ == (part, object) and part not in SQLStore.__mro__
    store = SQLiteStore.__mro__  # the backends are the store and its dialect's connection, nothing more
    assert [c.__name__ for c in store] == ["SQLiteStore", "SQLStore", "SQLCore", "Store", "ABC", "object"]


def test_each_part_works_on_a_bare_connection() -> None:
    from reasearch.runs.ledger import LedgerEntry, Unit
    from reasearch.runs.store.fleets import Fleets
    from reasearch.runs.store.metered import MeteredCalls
    from reasearch.runs.store.reservations import Reservations
    from reasearch.runs.store.sql import SQLStore
    from reasearch.runs.testing import make_run_record

    store = SQLStore(MemoryConnection("memory://"))
    store.create_run(make_run_record("r1"))
    db = store.db
    fleets, reservations = Fleets(db), Reservations(db)
    assert fleets.create_fleet("f1", {"k": 1}) and fleets.get_fleet("f1") == {"k": 1}
    assert fleets.add_fleet_member("f1", 0, "r1") == "r1" and store.fleet_members("f1") == {0: "r1"}
    caps = {Unit.EVALUATIONS: 1.0}
    assert reservations.reserve("r1", "t1", {Unit.EVALUATIONS: 1.0}, caps, driver_id="d") is None
    refusal = reservations.reserve("r1", "t2", {Unit.EVALUATIONS: 1.0}, caps, driver_id="e")
    assert refusal is not None and refusal[0] is Unit.EVALUATIONS and refusal.held_by_others == 1.0  # the first hold
    metered = MeteredCalls(db, reservations)
    debit = LedgerEntry("r1", 0, Unit.EVALUATIONS, 1.0, "call", 1.0)
    reply, new = metered.record_student_call("r1", 0, "key", "m", {"status": "OK", "text": "hi"}, [debit], "t1")
    assert new and reply["text"] == "hi" and store.usage("r1") == {Unit.EVALUATIONS: 1.0}
    assert reservations.reserved("r1") == {}  # the call's hold was released with its debit
    store.close()
