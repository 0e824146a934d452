"""Fixtures of the report tests: real runs of every task family in one SQLite store, a headless
Debian chromium driven by Playwright, and a folder for screenshots (printed; also written to
``$REASEARCH_DOCS_SCREENSHOTS`` when set, which is how ``docs/reports/*.png`` are made)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from report_runs import ReportRuns, make_runs  # noqa: E402

from reasearch.engine import SandboxConfig, SandboxPool  # noqa: E402
from reasearch.runs.executor import LocalExecutor  # noqa: E402
from reasearch.runs.store import Store, open_store  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_LIB = b"/usr/lib/chromium/"
CHROMIUM_ARGS = ["--no-sandbox", "--headless=new", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="session")
def report_dir() -> Iterator[Path]:
    """A run directory the sandbox uid can reach."""
    d = Path(tempfile.mkdtemp(prefix="reasearch-reports-", dir="/var/tmp"))
    d.chmod(0o711)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def executor() -> Iterator[LocalExecutor]:
    with SandboxPool(SandboxConfig(workers=2)) as pool, LocalExecutor(2, pool=pool) as ex:
        yield ex


@pytest.fixture(scope="session")
def runs(report_dir: Path, executor: LocalExecutor) -> Iterator[tuple[Store, ReportRuns]]:
    """One store holding a run of every task family (see report_runs.py)."""
    store = open_store(report_dir)
    try:
        yield store, make_runs(report_dir, store, executor)
    finally:
        store.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Debian chromium (``.ci/run`` installs it when missing), one per test module.

    Not one per session: between calls Playwright's sync API leaves its event loop marked as running in this
    thread (on purpose: its dispatcher resumes that loop), so while a browser is open ``asyncio.run``/``anyio.run``
    refuse to start. Closed at the end of the module, the loop is unmarked and the async tests that run later in
    the session (MCP, the adapters) work (``test_browser_loop_*.py``)."""
    if not os.path.exists(CHROMIUM):
        message = f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does it)"
        if os.environ.get("CI", "").lower() == "true" or os.environ.get("REASEARCH_REQUIRE_BROWSER") == "1":
            pytest.fail(message)  # CI installs it: a browser test that cannot run there is a failure
        pytest.skip(message)  # as the PostgreSQL backend tests do outside CI
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            helpers = _browser_processes()
            b.close()
    _reap_adopted(helpers)
    assert asyncio._get_running_loop() is None, "Playwright left its event loop marked as running"


def _browser_processes() -> set[int]:
    """Every process below the Playwright driver this process started (the browser and its helpers)."""
    from reasearch.engine._procs import process_table

    table = process_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, *_rest) in table.items():
        children.setdefault(ppid, []).append(pid)
    me = os.getpid()
    drivers = []
    found: set[int] = set()
    for pid in children.get(me, []):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read()
            if b"playwright" in cmd:
                drivers.append(pid)
            elif cmd.startswith(CHROMIUM_LIB):  # helpers that detached at start-up (crashpad) were adopted already
                found.add(pid)
    stack = [c for d in drivers for c in children.get(d, [])]
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.add(pid)
            stack.extend(children.get(pid, []))
    return found


def _reap_adopted(pids: set[int], timeout_s: float = 10.0) -> None:
    """Reaps the browser's helpers that this process adopted when the browser exited.

    The sandbox pool makes the test process a child subreaper, so chromium's helpers, orphaned when the
    browser exits, are re-parented here; only those seen below the Playwright driver are reaped.
    """
    from reasearch.engine._procs import process_table

    me = os.getpid()
    deadline = time.monotonic() + timeout_s
    while True:
        table = process_table()
        alive = [pid for pid in pids if pid in table]
        for pid in alive:
            ppid, _sid, _uid, state = table[pid]
            if ppid == me and state == "Z":
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
        if not alive or time.monotonic() > deadline:
            return
        time.sleep(0.05)


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots go (``screenshots*`` under the session's temporary folder, one per xdist worker; the
    top-level conftest prints each folder in the terminal summary)."""
    return tmp_path_factory.mktemp("screenshots")
