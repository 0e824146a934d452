"""The SQL connection of a store: one DB-API connection, the lock that serializes it, and its dialect
(placeholders, column types, transactions, schema and row locks, catalogue queries).

The store (:class:`~.core.SQLCore` and its parts) and the schema migrations (:mod:`.migrations`) both
hold one and use only its public face; neither reaches into the other. Dialects: :class:`SQLiteConnection`
(WAL file), :class:`MemoryConnection` (SQLite ``:memory:``), :class:`PostgresConnection` (psycopg 3).

Trust boundary: the SQL text is reasearch's own; every value travels as a bound parameter.
"""

from __future__ import annotations

import contextlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from reasearch.errors import StoreError
from reasearch.runs.store.records import _redact


class SQLConnection(ABC):
    """One connection per store object, serialized by a re-entrant lock.

    SQL is written with ``?`` placeholders (rewritten to the dialect's) and portable statements
    (``INSERT ... ON CONFLICT DO NOTHING`` works in SQLite >= 3.24 and PostgreSQL).
    """

    placeholder = "?"
    types: Mapping[str, str] = {}

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.RLock()
        self._sql_cache: dict[str, str] = {}
        self._conn = self._connect()

    @property
    def display_url(self) -> str:
        """The URL with any password replaced, for messages."""
        return _redact(self.url)

    # -- the public face
    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Runs one statement (``?`` placeholders) and returns its cursor; the caller holds the lock
        (inside :meth:`transaction`) or reads one row set at once through :meth:`one`/:meth:`all`."""
        out = self._sql_cache.get(sql)
        if out is None:
            out = sql if self.placeholder == "?" else sql.replace("?", self.placeholder)
            self._sql_cache[sql] = out
        return self._conn.execute(out, tuple(params))

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Every row of one query, under the lock."""
        with self._lock:
            return list(self.execute(sql, params).fetchall())

    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        """The first row of one query (or None), under the lock."""
        with self._lock:
            return self.execute(sql, params).fetchone()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """One write transaction under the lock: commits on success, rolls back on any exception."""
        with self._lock, self._begin():
            yield

    @abstractmethod
    def table_exists(self, name: str) -> bool:
        """True when a table of that name exists."""

    @abstractmethod
    def column_exists(self, table: str, column: str) -> bool:
        """True when ``table`` has a column named ``column``."""

    @abstractmethod
    def lock_schema(self) -> None:
        """Serializes schema creation between processes (inside :meth:`transaction`)."""

    @abstractmethod
    def lock_run(self, run_id: str) -> None:
        """Serializes budget checks of one run between connections (inside :meth:`transaction`)."""

    @abstractmethod
    def lock_fleet(self, fleet_id: str) -> None:
        """Serializes budget checks of one fleet's members between connections (inside :meth:`transaction`)."""

    def close(self) -> None:
        """Closes the connection (after any call in flight)."""
        with self._lock:
            self._conn.close()

    # -- the dialect's own
    @abstractmethod
    def _connect(self) -> Any:
        """A DB-API connection in autocommit mode (transactions are opened explicitly)."""

    @abstractmethod
    def _begin(self) -> contextlib.AbstractContextManager[Any]:
        """A write transaction: commits on success, rolls back on any exception."""


class SQLiteConnection(SQLConnection):
    """One SQLite file in WAL mode: one writer process at a time, any number of readers."""

    types = {"bigint": "INTEGER", "float": "REAL", "serial": "INTEGER PRIMARY KEY AUTOINCREMENT"}

    def __init__(self, path: Path, url: str | None = None) -> None:
        self.path = path
        super().__init__(url or f"sqlite:///{path.resolve()}")

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
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        else:
            self._conn.execute("COMMIT")

    # BEGIN IMMEDIATE already holds the one write lock of the file: schema, run and fleet checks take turns.
    def lock_schema(self) -> None:
        pass

    def lock_run(self, run_id: str) -> None:
        pass

    def lock_fleet(self, fleet_id: str) -> None:
        pass

    def column_exists(self, table: str, column: str) -> bool:
        row = self._conn.execute("SELECT 1 FROM pragma_table_info(?) WHERE name = ?", (table, column)).fetchone()
        return row is not None

    def table_exists(self, name: str) -> bool:
        return self._conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                                  (name,)).fetchone() is not None


class MemoryConnection(SQLiteConnection):
    """SQLite ``:memory:``: one process, gone when closed."""

    def __init__(self, url: str) -> None:
        super().__init__(Path(":memory:"), url)

    def _connect(self) -> Any:
        import sqlite3

        conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA foreign_keys=ON")
        return conn


class PostgresConnection(SQLConnection):
    """PostgreSQL by URL through psycopg 3 (the ``postgres`` extra)."""

    placeholder = "%s"
    types = {"bigint": "BIGINT", "float": "DOUBLE PRECISION", "serial": "BIGSERIAL PRIMARY KEY"}

    def _connect(self) -> Any:
        try:
            import psycopg
        except ImportError:
            raise StoreError("a PostgreSQL store needs psycopg 3: pip install 'reasearch[postgres]'") from None
        try:
            return psycopg.connect(self.url, autocommit=True)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to PostgreSQL at {_redact(self.url)}: {exc}".strip()) from None

    def _begin(self) -> contextlib.AbstractContextManager[Any]:
        return self._conn.transaction()

    def lock_schema(self) -> None:
        # Two processes opening a fresh database at once would race on CREATE TABLE IF NOT EXISTS.
        self.execute("SELECT pg_advisory_xact_lock(7236451966013107001)")

    def lock_run(self, run_id: str) -> None:
        # Row lock on the run: two drivers checking the same run's caps take turns (READ COMMITTED
        # alone would let both see the same usage and both reserve the last unit).
        self.execute("SELECT id FROM runs WHERE id = ? FOR UPDATE", (run_id,))

    def lock_fleet(self, fleet_id: str) -> None:
        # Members of one fleet are different runs (different row locks): a transaction-scoped advisory
        # lock per fleet makes their fleet-wide checks take turns. Taken after the run's row lock, always.
        self.execute("SELECT pg_advisory_xact_lock(hashtextextended(?, 7236451966013107002))", (fleet_id,))

    def column_exists(self, table: str, column: str) -> bool:
        row = self.execute("SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
                           "AND table_name = ? AND column_name = ?", (table, column)).fetchone()
        return row is not None

    def table_exists(self, name: str) -> bool:
        row = self.execute("SELECT to_regclass(?)", (name,)).fetchone()
        return row is not None and row[0] is not None
