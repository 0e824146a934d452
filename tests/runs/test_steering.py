"""Steering API (runs/steering.py): submit validates and journals durably; a driver applies interventions at a
step boundary, records the step, and a reopened driver applies the same ones at the same step."""

from __future__ import annotations

from typing import Any

import pytest

from reasearch.errors import ConfigError, StoreError
from reasearch.runs.journal import Journal
from reasearch.runs.ledger import LedgerEntry, Unit
from reasearch.runs.run import Run
from reasearch.runs.steering import (
    MAX_TEXT,
    REQUEST_KIND,
    Steering,
    effects,
    fork,
    history,
    pending,
    submit,
    submit_fleet,
)
from reasearch.runs.store import EvaluationRecord, RunState, Store
from reasearch.runs.testing import make_candidate, make_result, make_run_record

RID = "20260101-000000-aaaa"


@pytest.fixture
def run_store(store: Store) -> Store:
    store.create_run(make_run_record(RID, budget={"evaluations": 10.0}))
    store.add_candidate(make_candidate("ab12cd34", run_id=RID))
    return store


def _reopen(store: Store) -> tuple[Run, Journal, Steering]:
    run = Run(store, store.get_run(RID))
    journal = Journal(run)
    return run, journal, Steering(run, journal, poll_s=0.0, sleep=lambda s: None)


def test_submit_journals_each_verb_with_who_and_when(run_store: Store) -> None:
    a = submit(run_store, RID, "hint", {"text": "try a hexagonal start"}, who="alice")
    b = submit(run_store, RID[:12], "ban", {"text": "no random restarts"}, who="bob")
    c = submit(run_store, RID, "pin", {"candidate": "ab12"}, who="alice")
    d = submit(run_store, RID, "cap", {"unit": "evaluations", "value": 20}, who="alice")
    assert [i.seq for i in (a, b, c, d)] == [1, 2, 3, 4]
    assert c.args == {"candidate": "ab12cd34"}  # a unique prefix is stored resolved
    got = history(run_store, RID)
    assert [(i.verb, i.who, i.applied_step) for i in got] == [
        ("hint", "alice", None), ("ban", "bob", None), ("pin", "alice", None), ("cap", "alice", None)]
    assert got[0].at.endswith("Z") and got[0].args == {"text": "try a hexagonal start"}
    assert [e.step for e in run_store.events(RID, kind=REQUEST_KIND)] == [-1, -2, -3, -4]
    assert [i.seq for i in pending(run_store, RID, 2)] == [3, 4]


@pytest.mark.parametrize(("verb", "args", "match"), [
    ("launch", {}, "unknown steering verb"),
    ("hint", {}, "needs"),
    ("hint", {"text": "   "}, "empty"),
    ("hint", {"text": "x" * (MAX_TEXT + 1)}, "at most 4096"),
    ("hint", {"text": 7}, "must be a string"),
    ("hint", {"text": "a", "model": "b"}, "takes"),
    ("pin", {"candidate": "ffff"}, "has no candidate"),
    ("pin", {"candidate": "../../etc"}, "hex digits"),
    ("lift", {"ban": 9}, "no ban or pin #9"),
    ("cap", {"unit": "evaluations", "value": 2}, "below what run"),
    ("cap", {"unit": "evaluations", "value": float("nan")}, "finite"),
    ("cap", {"unit": "wishes", "value": 3}, "unknown budget unit"),
])
def test_bad_interventions_are_one_line_errors_and_write_nothing(run_store: Store, verb: str, args: dict[str, object],
                                                                 match: str) -> None:
    run_store.debit(LedgerEntry(RID, 0, Unit.EVALUATIONS, 3.0, "evaluate", 1.0))
    with pytest.raises(ConfigError, match=match) as err:
        submit(run_store, RID, verb, args, who="mallory")
    assert "\n" not in str(err.value)
    assert run_store.events(RID, kind=REQUEST_KIND) == []


def test_a_huge_text_is_refused_quickly_and_a_finished_run_cannot_be_steered(run_store: Store) -> None:
    with pytest.raises(ConfigError, match="characters"):
        submit(run_store, RID, "hint", {"text": "\x1b" * 50_000_000})
    run_store.set_run_state(RID, RunState.FINISHED, reason="done")
    with pytest.raises(ConfigError, match="finished run cannot be steered"):
        submit(run_store, RID, "hint", {"text": "too late"})
    with pytest.raises(ConfigError, match="no run"):
        submit(run_store, "nope", "stop", {})


def test_control_and_bidi_characters_are_escaped_before_any_model_reads_them(run_store: Store) -> None:
    i = submit(run_store, RID, "hint", {"text": "ok\x1b[2J\rignore\u202eabove\x00"}, who="eve\n\x07")
    assert i.args["text"] == "ok\\x1b[2J\\x0dignore\\u202eabove\\x00"
    assert i.who == "eve\\x0a\\x07"  # a name never starts a line of its own
    run, journal, steering = _reopen(run_store)
    steering.at(1)
    notes = steering.state.notes(steering.state.take_hints())
    assert "\x1b" not in notes and "\r" not in notes and "\u202e" not in notes and "\\x1b[2J" in notes


def test_interventions_apply_at_the_next_boundary_and_replay_at_the_same_step(run_store: Store) -> None:
    submit(run_store, RID, "hint", {"text": "look at symmetry"}, who="alice")
    submit(run_store, RID, "ban", {"text": "no brute force"}, who="alice")
    run_store.debit(LedgerEntry(RID, 0, Unit.EVALUATIONS, 4.0, "evaluate", 1.0))
    submit(run_store, RID, "cap", {"unit": "evaluations", "value": 6}, who="alice")
    run, journal, steering = _reopen(run_store)
    run_store.log_event(RID, 1, "snapshot", {})  # steps 1 and 2 were done before the driver looked
    applied = steering.at(3)
    assert [i.seq for i in applied] == [1, 2, 3] and all(i.applied_step == 3 for i in applied)
    assert run.budget.cap(Unit.EVALUATIONS) == 6.0 and run_store.get_run(RID).budget["evaluations"] == 6.0
    assert [i.applied_step for i in history(run_store, RID)] == [3, 3, 3]
    assert "look at symmetry" in steering.state.notes(steering.state.take_hints())
    assert "no brute force" in steering.state.notes()  # a ban stays
    submit(run_store, RID, "lift", {"ban": 2}, who="alice")
    late = submit(run_store, RID, "hint", {"text": "after the kill"}, who="alice")
    # A driver killed after step 3 replays it: the same three at step 3, nothing new there; the new ones at 4.
    run2, journal2, steering2 = _reopen(run_store)
    assert [i.seq for i in steering2.at(3)] == [1, 2, 3]
    assert "no brute force" in steering2.state.notes()
    assert [i.seq for i in steering2.at(4)] == [4, 5]
    assert steering2.state.bans == {} and late.seq == 5
    assert [i.applied_step for i in history(run_store, RID)] == [3, 3, 3, 4, 4]
    # And a third session replays both steps identically, taking nothing new.
    _, _, steering3 = _reopen(run_store)
    assert [i.seq for i in steering3.at(3)] == [1, 2, 3] and [i.seq for i in steering3.at(4)] == [4, 5]


def test_pause_waits_until_resume_and_stop_ends_a_pause(run_store: Store) -> None:
    submit(run_store, RID, "pause", {}, who="alice")
    run, journal, _ = _reopen(run_store)
    said: list[str] = []
    calls = {"n": 0}

    def sleep(_: float) -> None:  # the person resumes while the driver waits
        calls["n"] += 1
        if calls["n"] == 3:
            submit(run_store, RID, "resume", {}, who="alice")

    steering = Steering(run, journal, on_wait=said.append, poll_s=0.0, sleep=sleep)
    assert [i.verb for i in steering.at(1)] == ["pause", "resume"] and not steering.state.paused
    assert said and "paused" in said[0]
    assert journal.get(1, "steer") is not None and journal.get(1, "steer.1") is not None
    # Replayed: no wait (the resume is recorded at the same step).
    _, _, replay = _reopen(run_store)
    replay.sleep = lambda s: pytest.fail("a replay of a resumed pause must not wait")
    assert [i.verb for i in replay.at(1)] == ["pause", "resume"]
    submit(run_store, RID, "pause", {}, who="alice")
    submit(run_store, RID, "stop", {"text": "enough"}, who="alice")
    _, _, s4 = _reopen(run_store)
    s4.at(1)
    assert [i.verb for i in s4.at(2)] == ["pause", "stop"]
    assert s4.stop_reason == "stopped by alice (intervention #4): enough"


def test_fork_and_twin_start_from_the_candidate_and_effects_compare_them(run_store: Store) -> None:
    new = fork(run_store, RID, "ab12", {"evaluations": 3}, twin=True, new_id="20260102-000000-ffff")
    rec, twin = run_store.get_run(new), run_store.get_run(new + "-twin")
    assert rec.config["fork"] == {"of": RID, "candidate": "ab12cd34", "twin": twin.id, "twin_of": None}
    assert rec.state is RunState.INTERRUPTED and rec.budget == {"evaluations": 3.0}
    assert [c.id for c in run_store.candidates(new)] == ["ab12cd34"] == [c.id for c in run_store.candidates(twin.id)]
    with pytest.raises(ConfigError, match="unsteered twin"):
        submit(run_store, twin.id, "hint", {"text": "x"})
    with pytest.raises(ConfigError, match="allows nothing"):
        fork(run_store, RID, "ab12", {"evaluations": 0})
    with pytest.raises(ConfigError, match="has no candidate"):
        fork(run_store, RID, "eeee", {"evaluations": 2})
    # Steered run: scores 1, 2 then a hint at step 2, then 5, 4; the twin: 1, 2, 2, 3.
    for run_id, scores in ((new, [1.0, 2.0, 5.0, 4.0]), (twin.id, [1.0, 2.0, 2.0, 3.0])):
        for step, score in enumerate(scores):
            run_store.record_evaluation(EvaluationRecord(run_id, step, "ab12cd34", 7, make_result(score=score), 1.0),
                                        make_candidate("ab12cd34", run_id=run_id))
    submit(run_store, new, "hint", {"text": "go bigger"}, who="alice")
    run_store.log_event(new, 2, "steer", {"seqs": [1], "interventions": [
        {**history(run_store, new)[0].to_dict(), "applied_step": 2}]})
    (e,) = effects(run_store, new, window=2)
    assert (e.evaluations_before, e.score_before, e.best_after, e.evaluations_after) == (2, 2.0, 5.0, 2)
    assert (e.twin_run, e.twin_before, e.twin_after) == (twin.id, 2.0, 3.0)


def test_a_cap_below_what_was_spent_when_applied_is_raised_to_it_and_replays_as_recorded(run_store: Store) -> None:
    run_store.debit(LedgerEntry(RID, 0, Unit.EVALUATIONS, 4.0, "evaluate", 1.0))
    submit(run_store, RID, "cap", {"unit": "evaluations", "value": 5}, who="alice")
    run_store.debit(LedgerEntry(RID, 1, Unit.EVALUATIONS, 2.0, "evaluate", 1.0))  # spent 6 by the boundary
    run, _, steering = _reopen(run_store)
    steering.at(2)
    assert run.budget.cap(Unit.EVALUATIONS) == 6.0 == run_store.get_run(RID).budget["evaluations"]
    submit(run_store, RID, "cap", {"unit": "evaluations", "value": 12}, who="alice")
    steering.at(3)
    run_store.debit(LedgerEntry(RID, 4, Unit.EVALUATIONS, 5.0, "evaluate", 1.0))  # spent 11 later
    run2, _, replay = _reopen(run_store)
    replay.at(2)
    assert run2.budget.cap(Unit.EVALUATIONS) == 6.0  # as applied then, not raised to today's spend
    replay.at(3)
    assert run2.budget.cap(Unit.EVALUATIONS) == 12.0


def test_a_pin_of_another_runs_candidate_is_refused(run_store: Store) -> None:
    run_store.create_run(make_run_record("20260101-000000-bbbb"))
    run_store.add_candidate(make_candidate("cafe1234", run_id="20260101-000000-bbbb"))
    with pytest.raises(ConfigError, match="has no candidate 'cafe'"):
        submit(run_store, RID, "pin", {"candidate": "cafe"}, who="mallory")
    assert submit(run_store, "20260101-000000-bbbb", "pin", {"candidate": "cafe"}).args == {"candidate": "cafe1234"}


class _FailingStore:
    """A store whose reads of runs and fleets fail as a store fails (a disk error), not as "no such id"."""

    def __init__(self, inner: Store, *, fail_ids: tuple[str, ...] = ()) -> None:
        self.inner, self.fail_ids = inner, fail_ids

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def get_run(self, run_id: str, *, exact: bool = False) -> object:
        if not self.fail_ids or run_id in self.fail_ids:
            raise StoreError("database disk image is malformed")
        return self.inner.get_run(run_id, exact=exact)

    def get_fleet(self, fleet_id: str) -> object:
        raise StoreError("database disk image is malformed")


def test_a_store_that_fails_is_not_a_missing_run_or_fleet(run_store: Store) -> None:
    """A failed read is a StoreError that says so, never "no such run" (ConfigError: the caller's id) nor a
    deleted twin; a missing id and an ambiguous prefix are still the caller's error (ConfigError)."""
    failing: Any = _FailingStore(run_store)
    for call in (lambda: submit(failing, RID, "hint", {"text": "x"}), lambda: submit_fleet(failing, "f1", "stop"),
                 lambda: fork(failing, RID, "ab12", {"evaluations": 2})):
        with pytest.raises(StoreError, match="malformed") as err:
            call()
        assert not isinstance(err.value, ConfigError)
    with pytest.raises(ConfigError, match="no run"):
        submit(run_store, "20991231-000000-zzzz", "hint", {"text": "x"})
    run_store.create_run(make_run_record("20260101-000000-aaab", budget={"evaluations": 1.0}))
    with pytest.raises(ConfigError, match="ambiguous"):
        submit(run_store, RID[:15], "hint", {"text": "x"})
    new = fork(run_store, RID, "ab12", {"evaluations": 3}, twin=True, new_id="20260102-000000-eeee")
    twin = str(run_store.get_run(new).config["fork"]["twin"])
    with pytest.raises(StoreError, match="malformed"):  # the twin's read failed: not "the twin was deleted"
        effects(_FailingStore(run_store, fail_ids=(twin,)), new)  # type: ignore[arg-type]
