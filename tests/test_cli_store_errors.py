"""A store that fails while a run is driven (the disk full, the PostgreSQL server gone) ends the command with
one line, exit 2 as every store error, and the command that continues that very run (issue 40)."""

from __future__ import annotations

import types
from typing import Any

import pytest
from rich.console import Console

from reasearch._cli.agent import _run_agent
from reasearch.errors import StoreError

_FULL = ("the disk holding /runs/store.sqlite is full or failing (sqlite: disk I/O error): free space, then "
         "`reasearch resume RUN` continues the run (the store keeps every step written so far)")


def test_a_store_failure_mid_run_is_one_line_exit_2_with_the_runs_resume(capsys: pytest.CaptureFixture[str]) -> None:
    def optimize() -> Any:
        raise StoreError(_FULL)

    agent = types.SimpleNamespace(run=types.SimpleNamespace(id="run-7f3a"), optimize=optimize)
    code = _run_agent(agent, Console(quiet=True), True, "title", "/tmp/my runs")
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("reasearch: the disk holding /runs/store.sqlite is full")
    assert "`reasearch resume run-7f3a --run-dir '/tmp/my runs'` continues the run" in err
    assert "RUN`" not in err and "Traceback" not in err
