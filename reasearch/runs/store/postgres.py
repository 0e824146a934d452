"""The PostgreSQL backend, for several machines writing to one store (needs psycopg 3)."""

from __future__ import annotations

import contextlib
from typing import Any

from reasearch.errors import StoreError
from reasearch.runs.store.records import _redact
from reasearch.runs.store.sql import SQLStore


class PostgresStore(SQLStore):
    """PostgreSQL by URL (``postgresql://user@host:port/db``), for several machines writing to one place.

    Needs the ``postgres`` extra (psycopg 3). A ``?options=-csearch_path%3Dname`` URL parameter
    keeps several stores apart in one database (one schema each).
    """

    _placeholder = "%s"
    _types = {"bigint": "BIGINT", "float": "DOUBLE PRECISION", "serial": "BIGSERIAL PRIMARY KEY"}

    def _connect(self) -> Any:
        try:
            import psycopg
        except ImportError:
            raise StoreError("a PostgreSQL store needs psycopg 3: pip install 'reasearch[postgres]'") from None
        try:
            return psycopg.connect(self.url, autocommit=True)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to PostgreSQL at {_redact(self.url)}: {exc}".strip()) from None

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

    def _begin(self) -> contextlib.AbstractContextManager[Any]:
        return self._conn.transaction()

    def _lock_schema(self) -> None:
        # Two processes opening a fresh database at once would race on CREATE TABLE IF NOT EXISTS.
        self._conn.execute("SELECT pg_advisory_xact_lock(7236451966013107001)")

    def _lock_run(self, run_id: str) -> None:
        # Row lock on the run: two drivers checking the same run's caps take turns (READ COMMITTED
        # alone would let both see the same usage and both reserve the last unit).
        self._exec("SELECT id FROM runs WHERE id = ? FOR UPDATE", (run_id,))

    def _lock_fleet(self, fleet_id: str) -> None:
        # Members of one fleet are different runs (different row locks): a transaction-scoped advisory
        # lock per fleet makes their fleet-wide checks take turns. Taken after the run's row lock, always.
        self._exec("SELECT pg_advisory_xact_lock(hashtextextended(?, 7236451966013107002))", (fleet_id,))

    def _column_exists(self, table: str, column: str) -> bool:
        row = self._conn.execute("SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
                                 "AND table_name = %s AND column_name = %s", (table, column)).fetchone()
        return row is not None

    def _table_exists(self, name: str) -> bool:
        row = self._conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()
        return row is not None and row[0] is not None
