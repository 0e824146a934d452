"""A member whose run cannot be read because the store failed (a locked SQLite file, a lost PostgreSQL
connection) is not a member "not stored yet": it is never created a second time, and the member ends with the
store's reason, not with ``already exists``."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from reasearch.errors import RunNotFoundError, StoreError
from reasearch.fleets import fleet as fleet_module
from reasearch.fleets.fleet import FleetMember, FleetSpec, run_fleet
from reasearch.runs import RunState, open_store
from reasearch.runs.store.sql import SQLStore

LOCKED = "the SQLite store STORE stayed locked by another process (database is locked): stop the other writer"


class _LockedReads:
    """A store whose every ``get_run`` fails as a locked or lost store does (a plain StoreError)."""

    def get_run(self, run_id: str, **kw: Any) -> Any:
        raise StoreError(LOCKED)

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the member touched the store ({name}) after it failed to read its run")


def test_drive_member_raises_the_store_failure_and_creates_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    created: list[str] = []
    monkeypatch.setattr(fleet_module, "start_run", lambda *a, **kw: created.append("agent run"))
    monkeypatch.setattr(fleet_module, "_run_method", lambda *a, **kw: created.append("method run"))
    monkeypatch.setattr(fleet_module, "build_model", lambda *a, **kw: None)
    spec = FleetSpec(tasks=("heilbronn/n11-v1",), seeds=(0,), models=("scripted/none.json",), budget={"evaluations": 3})
    for method in ("agent", "best-of-n"):
        member = FleetMember(0, "heilbronn/n11-v1", 0, "scripted/none.json", method=method)
        with pytest.raises(StoreError, match="stayed locked") as raised:
            fleet_module._drive_member("f", spec, member, _LockedReads(), "f-m000", "/nonexistent", 0.0)  # type: ignore[arg-type]
        assert not isinstance(raised.value, RunNotFoundError)
    assert created == []


def test_a_member_whose_run_the_store_cannot_read_ends_with_the_stores_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    get_run = SQLStore.get_run

    def locked_for_members(self: Any, run_id: str, **kw: Any) -> Any:
        # in the member's thread only: the fleet reads fine
        if run_id.startswith("f-locked-m") and threading.current_thread().name.startswith("fleet"):
            raise StoreError(LOCKED)
        return get_run(self, run_id, **kw)

    monkeypatch.setattr(SQLStore, "get_run", locked_for_members)
    spec = FleetSpec(tasks=("heilbronn/n11-v1",), seeds=(0,), models=("scripted/none.json",), budget={"evaluations": 3},
                     methods=("best-of-n",))
    report = run_fleet(spec, store=tmp_path, run_dir=tmp_path, fleet_id="f-locked")
    (member,) = report.members
    assert member.state in (RunState.INTERRUPTED.value, RunState.FAILED.value), member
    assert "stayed locked" in member.reason and "already exists" not in member.reason, member.reason
    monkeypatch.setattr(SQLStore, "get_run", get_run)
    with open_store(tmp_path) as store:
        assert [r.id for r in store.list_runs()] == []  # no run was created behind the failed read


def test_a_member_run_is_looked_up_by_its_exact_id_never_by_prefix(tmp_path: Path) -> None:
    """Member ``f-m100`` of a fleet of over 1,000 members must not find ``f-m1000`` by prefix (the store's
    prefix lookup is for people typing ids): it is not stored yet, so the member starts its own run."""
    from reasearch.evaluators.testing import ToyTask
    from reasearch.runs import Run

    with open_store(tmp_path) as store:
        Run.create(store, task=ToyTask(), budget={"evaluations": 1}, run_id="f-m1000", config={"driver": "method"})
        assert store.get_run("f-m100").id == "f-m1000"  # what a person gets from a unique prefix
        with pytest.raises(RunNotFoundError):
            store.get_run("f-m100", exact=True)
        member = FleetMember(100, "heilbronn/n11-v1", 0, "scripted/none.json", method="best-of-n")
        assert fleet_module._member_result(store, member, "f-m100").state == "pending"
        assert fleet_module._member_result(store, member, "f-m1000").run_id == "f-m1000"
