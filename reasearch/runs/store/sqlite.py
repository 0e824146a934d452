"""The embedded SQLite backend (a ``store.sqlite`` file in the run directory, WAL mode) and the
in-memory store built on it (tests, throw-away runs)."""

from __future__ import annotations

from pathlib import Path

from reasearch.runs.store.connection import MemoryConnection, SQLiteConnection
from reasearch.runs.store.paths import checked_store_path
from reasearch.runs.store.records import MEMORY_URL
from reasearch.runs.store.sql import SQLStore


class SQLiteStore(SQLStore):
    """The embedded default: one SQLite file (WAL mode), safe for one writer process at a time and
    any number of readers (``reasearch runs`` while a run writes)."""

    def __init__(self, path: str | Path) -> None:
        # No symlinked store or run directory, no folder another user can write (see .paths).
        self.path = checked_store_path(path)
        super().__init__(SQLiteConnection(self.path))


class MemoryStore(SQLiteStore):
    """A store that lives in memory (SQLite ``:memory:``), for tests and throw-away runs.

    The same SQL code path as the other backends, so the step, budget and cache rules are never
    implemented twice; gone when closed. One process only (``open_store("memory://")``).
    """

    def __init__(self) -> None:
        self.path = Path(":memory:")
        SQLStore.__init__(self, MemoryConnection(MEMORY_URL))  # no file, so none of SQLiteStore's path checks
