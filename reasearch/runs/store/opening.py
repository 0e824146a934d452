"""Opening a store from a URL or a path: which backend, and whether it may be created."""

from __future__ import annotations

from pathlib import Path

from reasearch.errors import ConfigError, StoreError
from reasearch.runs.store.base import Store
from reasearch.runs.store.postgres import PostgresStore
from reasearch.runs.store.records import DEFAULT_RUN_DIR, MEMORY_URL, STORE_FILENAME
from reasearch.runs.store.sqlite import MemoryStore, SQLiteStore


def open_existing_store(url_or_path: str | Path, *, hint: str = "pass --run-dir DIR or --store URL") -> Store:
    """Opens a store that must already exist: a missing SQLite file is an error, never created.

    What readers and resumes use, so a mistyped directory never becomes a new, empty store.
    """
    text = str(url_or_path)
    if "://" not in text:
        path = Path(text)
        file = path if path.suffix in (".sqlite", ".db", ".sqlite3") else path / STORE_FILENAME
        if not file.is_file():
            raise StoreError(f"no run store at {file}; {hint}")
    elif text.startswith("sqlite:///") and not Path(text[len("sqlite:///"):]).is_file():
        raise StoreError(f"no run store at {text[len('sqlite:///'):]}; {hint}")
    return open_store(url_or_path)


def open_store(url_or_path: str | Path = DEFAULT_RUN_DIR) -> Store:
    """Opens (creating when needed) a run store.

    Args:
        url_or_path: ``postgresql://...`` for PostgreSQL; ``sqlite:///path``, a ``*.sqlite``/``*.db``
            file, or a run directory (which holds ``store.sqlite``) for SQLite; ``memory://`` for a
            store in memory (tests, throw-away runs). Default: ``./runs``.

    Raises:
        StoreError: the store cannot be opened, or was written by a newer reasearch.
    """
    text = str(url_or_path)
    if text in (MEMORY_URL, ":memory:"):
        return MemoryStore()
    if text.startswith(("postgresql://", "postgres://")):
        return PostgresStore(text)
    if text.startswith("sqlite:///"):
        # SQLAlchemy's convention: sqlite:///relative/path, sqlite:////absolute/path
        return SQLiteStore(Path(text[len("sqlite:///"):]))
    if "://" in text:
        raise ConfigError(
            f"unsupported store URL {text!r}: use postgresql://..., sqlite:///path, memory:// or a directory"
        )
    path = Path(text)
    if path.suffix in (".sqlite", ".db", ".sqlite3"):
        return SQLiteStore(path)
    return SQLiteStore(path / STORE_FILENAME)
