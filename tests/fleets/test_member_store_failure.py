"""A fleet member that dies of a full disk, whose failure the full disk then keeps out of the store: the fleet shows
it interrupted (resumable), not ``running`` for as long as the fleet's process lives, and ``fleet resume`` takes
it over in that same process (the chaos soak's ``disk_full`` under a fleet found it)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from reasearch.errors import StoreError
from reasearch.evaluators.testing import ToyTask
from reasearch.fleets import fleet as fleet_module
from reasearch.fleets.fleet import FleetSpec, fleet_report, resume_fleet, run_fleet
from reasearch.runs import Run, RunState, open_store
from reasearch.runs.store.sql import SQLStore

FULL = "the disk holding STORE is full or failing (sqlite: disk I/O error): free space, then resume"


def test_a_member_whose_failure_a_full_disk_kept_from_the_store_is_interrupted_and_resumed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    full = threading.Event()  # while set, every write of the run's state and heartbeat fails, as on a full disk
    set_run_state, heartbeat = SQLStore.set_run_state, SQLStore.heartbeat

    def failing(write: Any) -> Any:
        def write_unless_full(self: Any, *args: Any, **kwargs: Any) -> Any:
            if full.is_set():
                raise StoreError(FULL)
            return write(self, *args, **kwargs)
        return write_unless_full

    monkeypatch.setattr(SQLStore, "set_run_state", failing(set_run_state))
    monkeypatch.setattr(SQLStore, "heartbeat", failing(heartbeat))
    drove: list[str] = []

    def dies_of_a_full_disk(fleet_id: str, spec: Any, member: Any, store: Any, run_id: str, run_dir: str,
                            handover_s: float = 0.0) -> None:
        run = Run.create(store, task=ToyTask(), budget={"evaluations": 3}, run_id=run_id, config={"driver": "method"})
        assert run.driver_id  # this thread drives it (its heartbeat beats)
        full.set()
        try:
            raise StoreError(FULL)  # what the run's next write raised
        finally:
            run.close()  # its heartbeat's last word ("stopped") cannot be written either

    monkeypatch.setattr(fleet_module, "_drive_member", dies_of_a_full_disk)
    spec = FleetSpec(tasks=("heilbronn/n11-v1",), seeds=(0,), models=("scripted/none.json",),
                     budget={"evaluations": 3})
    report = run_fleet(spec, store=tmp_path, run_dir=tmp_path, fleet_id="f-full")
    (member,) = report.members
    assert member.state == RunState.INTERRUPTED.value, member
    assert member.reason.startswith(f"crashed: StoreError: {FULL}") and "could not be recorded" in member.reason
    full.clear()  # the disk freed; this process (the fleet's) still lives
    assert [m.state for m in fleet_report("f-full", store=tmp_path).members] == [RunState.INTERRUPTED.value]

    def resumes(fleet_id: str, spec: Any, member: Any, store: Any, run_id: str, run_dir: str,
                            handover_s: float = 0.0) -> None:
        run = Run.open(store, run_id)
        run.resume(takeover=True)  # refused while a live process is known to drive it
        store.set_run_state(run_id, RunState.FINISHED)
        run.close()
        drove.append(run_id)

    monkeypatch.setattr(fleet_module, "_drive_member", resumes)
    again = resume_fleet("f-full", store=tmp_path, run_dir=tmp_path)
    assert drove == ["f-full-m000"] and [m.state for m in again.members] == [RunState.FINISHED.value], again.members
    with open_store(tmp_path) as store:
        assert store.get_run("f-full-m000").state is RunState.FINISHED
