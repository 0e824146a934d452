"""Fixtures of the runs-layer tests: a shared LocalExecutor and a fresh SQLite store per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reasearch.engine import SandboxConfig, SandboxPool
from reasearch.runs.executor import LocalExecutor
from reasearch.runs.store import Store, open_store


@pytest.fixture(scope="module")
def executor() -> Iterator[LocalExecutor]:
    """A two-worker LocalExecutor (default isolation) shared by a test module."""
    with SandboxPool(SandboxConfig(workers=2)) as pool, LocalExecutor(2, pool=pool) as ex:
        yield ex


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A fresh SQLite store in the test's temporary folder (test_store.py overrides it per backend)."""
    with open_store(tmp_path) as s:
        yield s

