"""Shared fixtures. ``shared_data`` is the project's data folder beside the checkout (../shared/data).

A session-level check closes the process-wide sandbox pool and then fails the run if the test
process still has any child process (live or zombie): kills are real, nothing outlives the suite.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
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


def _children() -> list[tuple[int, str, str]]:
    """(pid, state, command line) of every direct child of this process."""
    from reasearch.engine._procs import process_table

    me = os.getpid()
    out = []
    for pid, (ppid, _sid, _uid, state) in process_table().items():
        if ppid != me:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmd = "?"
        out.append((pid, state, cmd))
    return out


@pytest.fixture(scope="session", autouse=True)
def no_leftover_children() -> Iterator[None]:
    """After the whole suite: the default sandbox pool is closed and no child process is left."""
    yield
    engine = sys.modules.get("reasearch.engine")
    if engine is not None:
        engine.close_default_pool()
    deadline = time.monotonic() + 5.0
    while (left := _children()) and time.monotonic() < deadline:
        time.sleep(0.05)  # a just-killed child may take a moment to be reaped by its Popen
    assert not left, f"the test run left child processes behind: {left}"
