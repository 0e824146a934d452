"""One PostgreSQL schema per test, for store tests that run on SQLite and PostgreSQL alike.

SQLite always; PostgreSQL when ``REASEARCH_TEST_POSTGRES_URL`` is set (``.ci/postgres.sh`` starts one).
Under ``CI=true`` a missing URL is a failure, never a silent SQLite-only run.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_URL = os.environ.get("REASEARCH_TEST_POSTGRES_URL", "")
IN_CI = os.environ.get("CI", "").lower() == "true"
BACKENDS = ["sqlite"] + (["postgres"] if PG_URL or IN_CI else [])


def require_pg() -> str:
    """The test server's URL (a failure under CI when there is none)."""
    if not PG_URL:
        pytest.fail("CI=true but REASEARCH_TEST_POSTGRES_URL is not set: run .ci/postgres.sh and export its URL")
    return PG_URL


def pg_schema(prefix: str) -> Iterator[str]:
    """A URL to a fresh schema of the test database (``search_path``), dropped afterwards."""
    import psycopg

    url = require_pg()
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def store_location(backend: str, tmp_path: Path, prefix: str) -> Iterator[str]:
    """A fresh store of ``backend``: a run directory under ``tmp_path``, or a new PostgreSQL schema."""
    if backend == "sqlite":
        yield str(tmp_path / "runs")
        return
    yield from pg_schema(prefix)
