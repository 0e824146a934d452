"""A failing database (a full disk, a PostgreSQL server restarted) surfaces as a ``StoreError`` that says
what to do, never as a raw driver exception; a connection dropped between transactions is replaced once.

Found by the chaos soak (issue 40): its ``disk_full`` and ``store_restart`` faults killed drivers with a
raw ``sqlite3.OperationalError: disk I/O error`` and ``psycopg.OperationalError: the connection is lost``.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reasearch.errors import StoreError
from reasearch.runs.store import PostgresStore, SQLiteStore
from reasearch.runs.store import core as store_core
from reasearch.runs.store.connection import PostgresConnection
from reasearch.runs.testing import make_run_record

# A child process: a store whose file size limit is cut (the soak's disk_full, `prlimit RLIMIT_FSIZE`),
# then a write far past it. Python ignores SIGXFSZ, so the write fails with EFBIG inside SQLite.
_DISK_FULL = """
import json, resource, sys
from reasearch.runs.store import SQLiteStore
from reasearch.runs.testing import make_run_record
store = SQLiteStore(sys.argv[1])
store.create_run(make_run_record("r1"))
resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.RLIM_INFINITY))
try:
    for i in range(64):
        store.log_event("r1", i, "note", {"text": "x" * 200_000})
except Exception as exc:
    print(json.dumps({"type": f"{type(exc).__module__}.{type(exc).__name__}", "message": str(exc)}))
"""


def test_a_full_disk_is_a_store_error_that_says_free_space_then_resume(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", _DISK_FULL, str(tmp_path / "run-dir")], capture_output=True,
                         text=True, timeout=120, check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["type"] == "reasearch.errors.StoreError", seen
    assert "full" in seen["message"] and "free space" in seen["message"], seen
    assert "`reasearch resume RUN`" in seen["message"] and "\n" not in seen["message"]
    # What was committed before the disk filled is still there, and the store opens again (the resume).
    store = SQLiteStore(tmp_path / "run-dir")
    assert store.get_run("r1").id == "r1"
    store.close()


def test_a_locked_sqlite_store_is_a_store_error_naming_the_other_writer(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "run-dir")
    store.create_run(make_run_record("r1"))
    store.db.execute("PRAGMA busy_timeout = 50")
    import sqlite3

    other = sqlite3.connect(store.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreError, match="locked by another process.*reasearch resume RUN"):
            store.log_event("r1", 0, "note", {})
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert store.log_event("r1", 0, "note", {})  # the lock gone, the store works again
    with pytest.raises(sqlite3.OperationalError, match="no such table"):  # a bug keeps its own traceback
        store.db.one("SELECT * FROM no_such_table")
    store.close()


# -- PostgreSQL: psycopg's behaviour on a lost server, played by a fake connection (no server here)
class _Lost(Exception):
    """psycopg.OperationalError's stand-in."""


class _FakeConn:
    """An autocommit connection: ``execute`` runs on SQLite; ``lose()`` plays a server restart."""

    def __init__(self, log: list[str]) -> None:
        self.closed = False
        self._lost = False
        self.log = log

    def lose(self) -> None:
        self._lost = True

    def _check(self, what: str) -> None:
        self.log.append(what)
        if self._lost:
            self.closed = True  # psycopg: a connection whose server went away reads closed (libpq BAD)
            raise _Lost("consuming input failed: server closed the connection unexpectedly")

    def execute(self, sql: str, params: Any = ()) -> Any:
        self._check(sql.split()[0])
        return types.SimpleNamespace(fetchone=lambda: (1,), fetchall=lambda: [(1,)], rowcount=1)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        self._check("BEGIN")
        yield
        self._check("COMMIT")

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def pg(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[PostgresStore, list[Any], list[str]]]:
    fake = types.ModuleType("psycopg")
    fake.OperationalError = _Lost  # type: ignore[attr-defined]
    fake.Error = Exception  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "psycopg", fake)
    conns: list[Any] = []
    log: list[str] = []

    def connect(self: PostgresConnection) -> _FakeConn:
        conns.append(_FakeConn(log))
        return conns[-1]

    monkeypatch.setattr(PostgresConnection, "_connect", connect)
    monkeypatch.setattr(store_core, "open_schema", lambda db: None)
    yield PostgresStore("postgresql://chaos:secret@127.0.0.1:1/db"), conns, log


def test_postgres_reconnects_once_when_the_connection_dropped_between_transactions(pg: Any) -> None:
    store, conns, log = pg
    conns[0].lose()  # the server restarted while the store was idle
    with store.db.transaction():
        store.db.execute("INSERT INTO events VALUES (?)", (1,))
    assert len(conns) == 2 and log == ["BEGIN", "BEGIN", "INSERT", "COMMIT"]  # nothing written twice
    conns[1].lose()
    assert store.db.one("SELECT 1") == (1,)  # a read outside a transaction: retried on a fresh connection
    assert len(conns) == 3


def test_postgres_never_retries_a_write_whose_transaction_had_begun(pg: Any) -> None:
    store, conns, log = pg
    with pytest.raises(StoreError) as info:
        with store.db.transaction():
            store.db.execute("INSERT INTO events VALUES (?)", (1,))
            conns[0].lose()  # lost mid-transaction: its commit may or may not have happened
            store.db.execute("INSERT INTO events VALUES (?)", (2,))
    message = str(info.value)
    assert message.startswith("lost the connection to postgresql://chaos:***@127.0.0.1:1/db")
    assert "secret" not in message and "`reasearch resume RUN` continues it" in message
    assert log.count("INSERT") == 2 and len(conns) == 1  # no second connection, no replayed write


def test_postgres_errors_of_a_live_connection_are_not_a_lost_connection(pg: Any) -> None:
    store, conns, _ = pg

    def timed_out(sql: str, params: Any = ()) -> Any:
        raise _Lost("canceling statement due to lock timeout")  # the server answered: the connection lives

    conns[0].execute = timed_out
    with pytest.raises(_Lost, match="lock timeout"):
        store.db.one("SELECT 1")
    assert len(conns) == 1


def test_postgres_gives_up_after_one_reconnect(pg: Any) -> None:
    store, conns, _ = pg
    real = PostgresConnection._connect

    def lost_again(self: PostgresConnection) -> Any:
        conn = real(self)
        conn.lose()
        return conn

    conns[0].lose()
    PostgresConnection._connect = lost_again  # type: ignore[method-assign]  # the server is still down
    with pytest.raises(StoreError, match="lost the connection"):
        store.db.one("SELECT 1")
    assert len(conns) == 2


def test_stores_opened_at_once_on_a_new_file_all_open(tmp_path: Path) -> None:
    """Opening a new SQLite store from several threads at once (``compare --track``: the fleet and the tracker)
    races to switch the file to WAL, and SQLite tells the loser "database is locked" at once, without waiting:
    every opener must get its store."""
    import threading

    errors: list[str] = []
    for round_ in range(40):
        path = tmp_path / f"race{round_}.sqlite"
        gate = threading.Barrier(8)

        def open_it(path: Path = path, gate: threading.Barrier = gate) -> None:
            gate.wait()
            try:
                SQLiteStore(path).close()
            except StoreError as exc:
                errors.append(str(exc))

        threads = [threading.Thread(target=open_it) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
