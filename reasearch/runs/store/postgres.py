"""The PostgreSQL backend, for several machines writing to one store (needs psycopg 3)."""

from __future__ import annotations

from reasearch.runs.store.connection import PostgresConnection
from reasearch.runs.store.sql import SQLStore


class PostgresStore(SQLStore):
    """PostgreSQL by URL (``postgresql://user@host:port/db``), for several machines writing to one place.

    Needs the ``postgres`` extra (psycopg 3). A ``?options=-csearch_path%3Dname`` URL parameter
    keeps several stores apart in one database (one schema each).
    """

    def __init__(self, url: str) -> None:
        super().__init__(PostgresConnection(url))
