"""Shared fixtures. ``shared_data`` is the project's data folder beside the checkout (../shared/data)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _shared_data_dir() -> Path:
    env = os.environ.get("REASEARCH_SHARED_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The data sets the tests may use; a missing folder is an error, never a skip."""
    path = _shared_data_dir()
    if not path.is_dir():
        raise FileNotFoundError(f"shared data folder not found at {path}; set REASEARCH_SHARED_DATA")
    return path
