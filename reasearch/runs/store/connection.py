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
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from reasearch.errors import StoreError
from reasearch.runs.store.records import _redact

_SQLITE_BUSY_S = 30.0  # how long a SQLite store waits for another writer (and for its file to open)


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
        self._in_tx = False  # inside transaction(): a failure there is translated by the outermost level only
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
        """Every row of one query, under the lock (a read outside a transaction is repeated once on a fresh
        connection when the old one was lost)."""
        with self._lock, self._translated():
            try:
                return list(self.execute(sql, params).fetchall())
            except Exception as exc:
                if self._in_tx or not self._reconnected(exc):
                    raise
                return list(self.execute(sql, params).fetchall())

    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        """The first row of one query (or None), under the lock (repeated once as :meth:`all` is)."""
        with self._lock, self._translated():
            try:
                return self.execute(sql, params).fetchone()
            except Exception as exc:
                if self._in_tx or not self._reconnected(exc):
                    raise
                return self.execute(sql, params).fetchone()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """One write transaction under the lock: commits on success, rolls back on any exception. A connection
        lost before the transaction began (nothing written) is replaced once; a failure after BEGIN is never
        retried here (its commit may have happened). A failure of the database itself (disk full, connection
        lost) is a :class:`StoreError` saying what to do."""
        with self._lock, self._translated(), contextlib.ExitStack() as stack:
            try:
                stack.enter_context(self._begin())
            except Exception as exc:
                if self._in_tx or not self._reconnected(exc):
                    raise
                stack.enter_context(self._begin())
            outer, self._in_tx = self._in_tx, True
            try:
                yield
            finally:
                self._in_tx = outer

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

    # -- failures of the database itself, as StoreError with what to do
    @contextlib.contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except StoreError:
            raise
        except Exception as exc:
            error = None if self._in_tx else self._store_error(exc)
            if error is None:
                raise
            raise error from exc

    def _store_error(self, exc: BaseException) -> StoreError | None:
        """The dialect's :class:`StoreError` for a failure of the database (disk full, connection lost), or None."""
        return None

    def _reconnected(self, exc: BaseException) -> bool:
        """True when ``exc`` is a dropped connection and a fresh one replaced it (the dialect says)."""
        return False

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

        # Two processes or threads opening a new file at once race to switch it to WAL, and SQLite answers the
        # loser "database is locked" at once, without its busy handler: retried here, within the same 30 s.
        deadline, pause = time.monotonic() + _SQLITE_BUSY_S, 0.01
        while True:
            conn = None
            try:
                conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                       timeout=_SQLITE_BUSY_S)
                conn.execute("PRAGMA journal_mode=WAL")
                # NORMAL in WAL mode: a committed transaction survives a process crash (kill -9); only an OS
                # crash or power loss can drop the last commits, never corrupt the file.
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute("PRAGMA foreign_keys=ON")
                return conn
            except sqlite3.DatabaseError as exc:
                if conn is not None:
                    conn.close()
                busy = isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))
                if not busy or time.monotonic() >= deadline:
                    raise StoreError(f"cannot open SQLite store {self.path}: {exc}") from None
            time.sleep(pause)
            pause = min(pause * 2, 0.25)

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

    def _store_error(self, exc: BaseException) -> StoreError | None:
        import psycopg

        if not isinstance(exc, psycopg.OperationalError) or not self._conn.closed:
            return None  # the server answered (a lock or statement timeout): not a lost connection
        text = " ".join(str(exc).split())
        return StoreError(f"lost the connection to {_redact(self.url)} ({text}): the run is interrupted; "
                          "`reasearch resume RUN` continues it once the server is back")

    def _reconnected(self, exc: BaseException) -> bool:
        import psycopg

        # psycopg marks a connection whose server went away as closed (its libpq status BAD); only then
        # is a fresh connection the fix (a query error or a lock timeout leaves the connection open).
        if not isinstance(exc, psycopg.OperationalError) or not self._conn.closed:
            return False
        with contextlib.suppress(psycopg.Error):
            self._conn.close()
        self._conn = self._connect()
        return True

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
