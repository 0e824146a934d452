"""The embedded SQLite backend (a ``store.sqlite`` file in the run directory, WAL mode) and the
in-memory store built on it (tests, throw-away runs)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from reasearch.errors import StoreError
from reasearch.runs.store.paths import checked_store_path
from reasearch.runs.store.records import MEMORY_URL
from reasearch.runs.store.sql import SQLStore


class SQLiteStore(SQLStore):
    """The embedded default: one SQLite file (WAL mode), safe for one writer process at a time and
    any number of readers (``reasearch runs`` while a run writes)."""

    _types = {"bigint": "INTEGER", "float": "REAL", "serial": "INTEGER PRIMARY KEY AUTOINCREMENT"}

    def __init__(self, path: str | Path) -> None:
        # No symlinked store or run directory, no folder another user can write (see .paths).
        self.path = checked_store_path(path)
        super().__init__(f"sqlite:///{self.path.resolve()}")

    def _connect(self) -> Any:
        import sqlite3

        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
            conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: a committed transaction survives a process crash (kill -9); only an OS
            # crash or power loss can drop the last commits, never corrupt the file.
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open SQLite store {self.path}: {exc}") from None
        return conn

    @contextlib.contextmanager
    def _begin(self) -> Iterator[None]:
        # IMMEDIATE takes the write lock up front, so two writers never deadlock upgrading a read lock.
        import sqlite3

        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            # After a failed write (disk I/O error) SQLite may have rolled back already: keep the first error.
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")
            raise
        else:
            self._conn.execute("COMMIT")

    def _store_error(self, exc: BaseException) -> StoreError | None:
        import sqlite3

        if not isinstance(exc, sqlite3.OperationalError):
            return None
        text = str(exc)
        if any(s in text for s in ("disk I/O error", "database or disk is full")):
            return StoreError(f"the disk holding {self.path} is full or failing (sqlite: {text}): free space, then "
                              "`reasearch resume RUN` continues the run (the store keeps every step written so far)")
        if "locked" in text or "busy" in text:
            return StoreError(f"the SQLite store {self.path} stayed locked by another process ({text}): stop the other "
                              "writer (one driver per run), then `reasearch resume RUN` continues the run")
        return None  # anything else (a bad statement, a missing table) is a bug: raised with its traceback

    def _column_exists(self, table: str, column: str) -> bool:
        row = self._conn.execute("SELECT 1 FROM pragma_table_info(?) WHERE name = ?", (table, column)).fetchone()
        return row is not None

    def _table_exists(self, name: str) -> bool:
        return self._conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                                  (name,)).fetchone() is not None


class MemoryStore(SQLiteStore):
    """A store that lives in memory (SQLite ``:memory:``), for tests and throw-away runs.

    The same SQL code path as the other backends, so the step, budget and cache rules are never
    implemented twice; gone when closed. One process only (``open_store("memory://")``).
    """

    def __init__(self) -> None:
        self.path = Path(":memory:")
        SQLStore.__init__(self, MEMORY_URL)

    def _connect(self) -> Any:
        import sqlite3

        conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA foreign_keys=ON")
        return conn
