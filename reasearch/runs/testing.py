"""The store backend test case, shipped with the package (Optuna's ``StorageTestCase`` pattern).

Every backend runs the same checks: subclass :class:`StoreTestCase` in a pytest module and provide a
``store`` fixture that yields a fresh, empty store of your backend::

    import pytest
    from reasearch.runs.store import open_store
    from reasearch.runs.testing import StoreTestCase

    @pytest.fixture
    def store():
        with open_store("memory://") as s:
            yield s

    class TestMyBackend(StoreTestCase):
        pass

``tests/runs/test_store.py`` runs it against the in-memory, SQLite and PostgreSQL backends.

Run doubles for tests and benchmarks of the drivers (the agent, the methods): :func:`memory_run` is a
real ``Run`` on the in-memory store (``memory://``) evaluating with a task instance on a given runner
(:class:`InstanceExecutor`); :func:`ledger_map` and :func:`executed` for assertions. They work without
pytest (``reasearch bench`` uses them on a plain install); :class:`StoreTestCase` needs it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

try:
    import pytest
except ModuleNotFoundError:  # a plain install: the run doubles work; StoreTestCase runs under pytest only
    pytest = None  # type: ignore[assignment]

from reasearch.engine.protocol import SandboxRunner
from reasearch.errors import FleetNotFoundError, RunNotFoundError, StoreError
from reasearch.evaluators.base import Task
from reasearch.evaluators.result import EvalResult, Provenance, Status
from reasearch.evaluators.testing import ToyTask
from reasearch.runs.executor import EvalRequest, Executor, evaluate_with
from reasearch.runs.ledger import Budget, LedgerEntry, Unit
from reasearch.runs.run import Run
from reasearch.runs.store import MEMORY_URL, CandidateRecord, EvaluationRecord, RunRecord, RunState, Store, open_store

__all__ = ["StoreTestCase", "make_run_record", "make_result", "make_candidate", "InstanceExecutor", "executed",
           "ledger_map", "memory_run"]


def make_run_record(run_id: str = "r1", **kw: object) -> RunRecord:
    """A run record of the toy task (``ToyTask(dim=4)``, outside the registry), with its spec."""
    base = dict(id=run_id, task_id="toy/quadratic-d4-v1", task_params={"dim": 4}, seed=7, config={"model": "x"},
                budget={"evaluations": 5.0}, state=RunState.RUNNING, created_at=1.0, updated_at=1.0,
                task_entry="reasearch.evaluators.testing:ToyTask", task_spec=ToyTask(dim=4).spec)
    base.update(kw)
    return RunRecord(**base)  # type: ignore[arg-type]


def make_result(score: float | None, status: Status = Status.OK, cand: str = "c" * 64) -> EvalResult:
    prov = Provenance("toy/quadratic-d4-v1", 1, "eh", cand, 7, "nsjail", {"python": "3.11"}, {"dim": 4})
    if status is Status.OK:
        return EvalResult(Status.OK, score, None, {"distance": 1.5, "arr": [1, 2]}, "fine", 0.01, 0.02, prov,
                          {"x": [1.0, 2.0]})
    return EvalResult.failure(status, "boom", wall_s=0.5, provenance=prov)


def make_candidate(cid: str, run_id: str = "r1", source: str | None = None) -> CandidateRecord:
    return CandidateRecord(run_id, cid, source or f"# {cid}\n", None, "note", 2.0)












_run, _result, _cand = make_run_record, make_result, make_candidate


class StoreTestCase:
    """The behaviour every :class:`~reasearch.runs.store.Store` backend must have (needs a ``store`` fixture)."""

    def test_runs_roundtrip_prefix_and_state(self, store: Store) -> None:
        store.create_run(_run("20260101-000000-aaaa"))
        store.create_run(_run("20260101-000000-bbbb", seed=9))
        got = store.get_run("20260101-000000-aaaa")
        assert got == _run("20260101-000000-aaaa") and got.task_spec == ToyTask(dim=4).spec
        store.create_run(_run("20250101-000000-cccc", task_spec=None))  # a run stored before specs
        assert store.get_run("20250101-000000-cccc").task_spec is None
        store.delete_run("20250101-000000-cccc")
        assert store.get_run("20260101-000000-b").seed == 9  # unique prefix
        with pytest.raises(StoreError, match="ambiguous"):
            store.get_run("20260101")
        with pytest.raises(StoreError, match="no run"):
            store.get_run("nope")
        with pytest.raises(StoreError, match="no run"):
            store.get_run("2026%")  # a LIKE wildcard is a literal character
        with pytest.raises(StoreError, match="already exists"):
            store.create_run(_run("20260101-000000-aaaa"))
        store.set_run_state("20260101-000000-aaaa", RunState.FINISHED, final_candidate="abc", reason="budget spent")
        done = store.get_run("20260101-000000-aaaa")
        assert (done.state, done.final_candidate, done.reason) == (RunState.FINISHED, "abc", "budget spent")
        assert [r.id for r in store.list_runs()] == ["20260101-000000-aaaa", "20260101-000000-bbbb"]

    def test_set_run_budget_replaces_the_caps(self, store: Store) -> None:
        store.create_run(_run())
        store.set_run_budget("r1", {"evaluations": 7.0, "dollars": 1.5})
        assert store.get_run("r1").budget == {"evaluations": 7.0, "dollars": 1.5}
        with pytest.raises(StoreError, match="no run"):
            store.set_run_budget("nope", {"evaluations": 1.0})

    def test_candidates_dedup_and_order(self, store: Store) -> None:
        store.create_run(_run())
        assert store.add_candidate(_cand("b")) is True
        assert store.add_candidate(_cand("a")) is True
        assert store.add_candidate(CandidateRecord("r1", "b", "# other\n", "a", "second", 3.0)) is False
        assert [c.id for c in store.candidates("r1")] == ["b", "a"]
        assert store.get_candidate("r1", "b") == _cand("b")  # the first write stands
        assert store.get_candidate("r1", "zzz") is None

    def test_record_evaluation_is_one_idempotent_transaction(self, store: Store) -> None:
        store.create_run(_run())
        ev = EvaluationRecord("r1", 3, "c1", 7, _result(-2.5), 5.0)
        debit = LedgerEntry("r1", 3, Unit.EVALUATIONS, 1.0, "evaluate", 5.0)
        rec, new = store.record_evaluation(ev, _cand("c1"), debit=debit, cache_key="k1")
        assert new and rec == ev
        # the same step again (a replay, even with another result): nothing changes, no second debit
        again, new2 = store.record_evaluation(EvaluationRecord("r1", 3, "c1", 7, _result(-1.0), 6.0), _cand("c1"),
                                              debit=LedgerEntry("r1", 3, Unit.EVALUATIONS, 1.0, "evaluate", 6.0))
        assert not new2 and again.result.score == -2.5
        assert store.usage("r1") == {Unit.EVALUATIONS: 1.0}
        assert store.get_evaluation("r1", 3) == ev
        assert store.get_evaluation("r1", 4) is None
        # the full EvalResult survives as plain JSON
        assert store.get_evaluation("r1", 3).result.to_dict() == _result(-2.5).to_dict()  # type: ignore[union-attr]
        assert store.cache_get("k1").to_dict() == _result(-2.5).to_dict()  # type: ignore[union-attr]
        assert store.cache_get("k2") is None
        assert [c.id for c in store.candidates("r1")] == ["c1"]

    def test_ledger_idempotent_per_step_unit_note(self, store: Store) -> None:
        store.create_run(_run())
        assert store.debit(LedgerEntry("r1", 1, Unit.TOKENS, 1200, "turn", 1.0))
        assert not store.debit(LedgerEntry("r1", 1, Unit.TOKENS, 1200, "turn", 2.0))
        assert store.debit(LedgerEntry("r1", 1, Unit.TOKENS, 300, "compaction", 2.0))
        assert store.debit(LedgerEntry("r1", 2, Unit.TOKENS, 100, "turn", 3.0))
        assert store.debit(LedgerEntry("r1", 2, Unit.DOLLARS, 0.125, "turn", 3.0))
        assert store.usage("r1") == {Unit.TOKENS: 1600.0, Unit.DOLLARS: 0.125}
        assert [(e.step, e.unit, e.amount, e.note) for e in store.ledger("r1")] == [
            (1, Unit.TOKENS, 1200.0, "turn"), (1, Unit.TOKENS, 300.0, "compaction"),
            (2, Unit.TOKENS, 100.0, "turn"), (2, Unit.DOLLARS, 0.125, "turn")]

    def test_events_append_only_idempotent_and_last_step(self, store: Store) -> None:
        store.create_run(_run())
        store.create_run(_run("r2"))
        assert store.last_step("r1") == -1
        assert store.log_event("r1", 0, "model_turn", {"text": "hi", "nan": float("nan"), "t": (1, 2)})
        assert not store.log_event("r1", 0, "model_turn", {"text": "changed"})
        assert store.log_event("r1", 0, "tool_call", {"name": "evaluate"})
        assert store.log_event("r1", 1, "model_turn", {"text": "again"})
        assert store.log_event("r2", 9, "model_turn", {})
        evs = store.events("r1")
        assert [(e.step, e.kind) for e in evs] == [(0, "model_turn"), (0, "tool_call"), (1, "model_turn")]
        assert evs[0].payload == {"text": "hi", "nan": None, "t": [1, 2]}
        assert [e.step for e in store.events("r1", kind="model_turn")] == [0, 1]
        assert store.last_step("r1") == 1
        store.debit(LedgerEntry("r1", 4, Unit.TOKENS, 1, "turn", 1.0))
        assert store.last_step("r1") == 4
        store.record_evaluation(EvaluationRecord("r1", 6, "c", 0, _result(1.0), 1.0), _cand("c"))
        assert store.last_step("r1") == 6
        with pytest.raises(StoreError, match="plain data"):
            store.log_event("r1", 7, "bad", {"obj": object()})

    def test_reservations_hold_budget_across_drivers_until_recorded(self, store: Store) -> None:
        store.create_run(_run())
        caps = {Unit.EVALUATIONS: 3.0}
        assert store.reserve("r1", "t1", {Unit.EVALUATIONS: 1.0}, caps, driver_id="d1") is None
        assert store.reserve("r1", "t2", {Unit.EVALUATIONS: 1.0}, caps, driver_id="d2") is None
        assert store.reserved("r1") == {Unit.EVALUATIONS: 2.0}
        store.debit(LedgerEntry("r1", 0, Unit.EVALUATIONS, 1.0, "evaluate", 1.0))
        # 1 spent + 2 held = 3: a fourth request (any driver) is refused with what it saw
        assert store.reserve("r1", "t3", {Unit.EVALUATIONS: 1.0}, caps, driver_id="d3") == (Unit.EVALUATIONS, 3.0, 3.0)
        assert store.reserved("r1") == {Unit.EVALUATIONS: 2.0}  # a refusal holds nothing
        # recording an evaluation drops its reservation in the same transaction
        store.record_evaluation(EvaluationRecord("r1", 1, "c1", 7, _result(1.0), 1.0), _cand("c1"),
                                debit=LedgerEntry("r1", 1, Unit.EVALUATIONS, 1.0, "evaluate", 1.0), release="t1")
        assert store.reserved("r1") == {Unit.EVALUATIONS: 1.0}
        store.release("t2")
        store.release("t2")  # idempotent
        assert store.reserved("r1") == {}
        assert store.reserve("r1", "t4", {Unit.EVALUATIONS: 1.0}, caps) is None  # 2 spent + 1 = 3 fits

    def test_expired_reservations_of_a_dead_driver_free_the_budget(self, store: Store) -> None:
        store.create_run(_run())
        caps = {Unit.EVALUATIONS: 1.0}
        assert store.reserve("r1", "dead", {Unit.EVALUATIONS: 1.0}, caps, driver_id="gone", ttl_s=0.2) is None
        assert store.reserve("r1", "x", {Unit.EVALUATIONS: 1.0}, caps) is not None
        time.sleep(0.3)
        assert store.reserved("r1") == {}
        assert store.reserve("r1", "x", {Unit.EVALUATIONS: 1.0}, caps) is None

    def test_heartbeat_extends_the_drivers_reservations(self, store: Store) -> None:
        store.create_run(_run())
        caps = {Unit.EVALUATIONS: 1.0}
        assert store.reserve("r1", "t", {Unit.EVALUATIONS: 1.0}, caps, driver_id="d1", ttl_s=0.2) is None
        store.heartbeat("r1", "d1", host="h", pid=42, ttl_s=60.0)
        time.sleep(0.3)
        assert store.reserved("r1") == {Unit.EVALUATIONS: 1.0}  # still held: its driver is alive

    def test_drivers_record_liveness(self, store: Store) -> None:
        store.create_run(_run())
        assert store.drivers("r1") == []
        store.heartbeat("r1", "d1", host="node-a", pid=11)
        first = store.drivers("r1")[0]
        time.sleep(0.01)
        store.heartbeat("r1", "d1", host="node-a", pid=11)
        again = store.drivers("r1")[0]
        assert (again.host, again.pid, again.stopped) == ("node-a", 11, False)
        assert again.started_at == first.started_at and again.heartbeat_at > first.heartbeat_at
        store.heartbeat("r1", "d1", stopped=True)
        assert store.drivers("r1")[0].stopped

    def test_paid_for_counts_only_reusable_evaluations_of_the_run(self, store: Store) -> None:
        store.create_run(_run())
        store.create_run(_run("r2"))
        store.record_evaluation(EvaluationRecord("r1", 0, "c1", 7, _result(None, Status.CRASH), 1.0), _cand("c1"))
        assert not store.paid_for("r1", "c1", 7)  # a crash may not repeat: never a free repeat
        store.record_evaluation(EvaluationRecord("r1", 1, "c1", 7, _result(1.0), 1.0), _cand("c1"))
        assert store.paid_for("r1", "c1", 7)
        assert not store.paid_for("r1", "c1", 8)  # another seed
        assert not store.paid_for("r2", "c1", 7)  # another run

    def test_concurrent_reservations_never_exceed_a_cap(self, store: Store) -> None:
        store.create_run(_run())
        caps = {Unit.EVALUATIONS: 5.0}
        granted: list[str] = []
        lock = threading.Lock()

        def driver(name: str) -> None:
            for i in range(10):
                token = f"{name}-{i}"
                if store.reserve("r1", token, {Unit.EVALUATIONS: 1.0}, caps, driver_id=name) is None:
                    with lock:
                        granted.append(token)

        threads = [threading.Thread(target=driver, args=(f"d{k}",)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(granted) == 5
        assert store.reserved("r1") == {Unit.EVALUATIONS: 5.0}

    def test_a_dead_drivers_holds_are_charged_once_unless_answered(self, store: Store) -> None:
        """Work in flight when its driver died may have been done and paid for (an answered model call,
        an evaluation the sandbox ran): reclaim and takeover debit each hold at its reserved amounts,
        marked, once; a hold whose answer event is logged is left to the replay's own debit."""
        store.create_run(_run())
        caps = {Unit.MODEL_CALLS: 10.0, Unit.EVALUATIONS: 10.0}
        store.heartbeat("r1", "dead")
        call = {Unit.MODEL_CALLS: 1.0, Unit.TOKENS: 900.0, Unit.DOLLARS: 0.0}
        assert store.reserve("r1", "call", call, caps, driver_id="dead", step=4, what="model call",
                             answer_kind="reply") is None
        assert store.reserve("r1", "answered", call, caps, driver_id="dead", step=3, what="model call",
                             answer_kind="reply") is None
        store.log_event("r1", 3, "reply", {"text": "stored before the kill"})
        assert store.reserve("r1", "eval", {Unit.EVALUATIONS: 1.0}, caps, driver_id="dead", step=5,
                             what="evaluation") is None
        assert store.reclaim("r1", ["dead"]) == 7  # every row of the three holds ends
        assert store.reserved("r1") == {}
        charged = {(e.step, e.unit): e for e in store.ledger("r1")}
        assert {k: e.amount for k, e in charged.items()} == {
            (4, Unit.MODEL_CALLS): 1.0, (4, Unit.TOKENS): 900.0, (5, Unit.EVALUATIONS): 1.0}  # no zero, no step 3
        assert charged[(4, Unit.MODEL_CALLS)].note.startswith("charged at reservation: the driver died while the "
                                                              "model call was in flight")
        assert "evaluation was in flight" in charged[(5, Unit.EVALUATIONS)].note
        assert store.reclaim("r1", ["dead"]) == 0 and store.takeover("r1", "new") == 0  # nothing charged twice
        assert store.usage("r1") == {Unit.MODEL_CALLS: 1.0, Unit.TOKENS: 900.0, Unit.EVALUATIONS: 1.0}
        # the caps count it
        assert store.reserve("r1", "x", {Unit.EVALUATIONS: 10.0}, caps) == (Unit.EVALUATIONS, 1.0, 10.0)

    def test_takeover_drops_other_drivers_holds(self, store: Store) -> None:
        store.create_run(_run())
        caps = {Unit.EVALUATIONS: 1.0}
        store.heartbeat("r1", "dead")
        assert store.reserve("r1", "t", {Unit.EVALUATIONS: 1.0}, caps, driver_id="dead") is None
        store.heartbeat("r1", "new")
        assert store.takeover("r1", "new") == 1
        assert store.reserved("r1") == {}
        assert [(e.unit, e.amount) for e in store.ledger("r1")] == [(Unit.EVALUATIONS, 1.0)]  # charged, at step -1
        assert store.takeover("r1", "new") == 0 and store.usage("r1") == {Unit.EVALUATIONS: 1.0}
        assert {d.driver_id: d.stopped for d in store.drivers("r1")} == {"dead": True, "new": False}

    def test_fleets_members_and_usage(self, store: Store) -> None:
        store.create_run(_run())
        store.create_run(_run("r2"))
        store.create_run(_run("r3"))
        assert store.create_fleet("f1", {"tasks": ["a"], "caps": {"dollars": 2}})
        assert not store.create_fleet("f1", {"other": True})  # the first spec stands
        assert store.get_fleet("f1") == {"tasks": ["a"], "caps": {"dollars": 2}}
        assert store.add_fleet_member("f1", 0, "r1") == "r1"
        assert store.add_fleet_member("f1", 1, "r2") == "r2"
        assert store.add_fleet_member("f1", 1, "r3") == "r2"  # idempotent: a retried launcher finds its run
        assert store.fleet_members("f1") == {0: "r1", 1: "r2"}
        store.debit(LedgerEntry("r1", 0, Unit.DOLLARS, 0.5, "turn", 1.0))
        store.debit(LedgerEntry("r2", 0, Unit.DOLLARS, 0.25, "turn", 1.0))
        store.debit(LedgerEntry("r3", 0, Unit.DOLLARS, 9.0, "turn", 1.0))  # not a member
        assert store.fleet_usage("f1") == {Unit.DOLLARS: 0.75}
        assert [f for f, _ in store.list_fleets()] == ["f1"]
        with pytest.raises(StoreError, match="no fleet"):
            store.get_fleet("nope")

    def test_fleet_caps_are_reserved_across_members_and_settled(self, store: Store) -> None:
        for rid in ("r1", "r2", "r3"):
            store.create_run(_run(rid))
        store.create_fleet("f1", {})
        store.add_fleet_member("f1", 0, "r1")
        store.add_fleet_member("f1", 1, "r2")
        fleet = ("f1", {Unit.MODEL_CALLS: 2.0, Unit.DOLLARS: 1.0})
        call = {Unit.MODEL_CALLS: 1.0, Unit.DOLLARS: 0.4}
        assert store.reserve("r1", "a", call, {}, fleet=fleet) is None
        assert store.reserve("r2", "b", call, {}, fleet=fleet) is None
        refused = store.reserve("r2", "c", call, {}, fleet=fleet)  # the members' holds count: 2 calls held
        assert refused == (Unit.MODEL_CALLS, 2.0, 2.0) and refused is not None and refused.fleet_id == "f1"
        assert store.reserve("r3", "d", call, {}, fleet=None) is None  # not a member: its own caps only
        # settling writes the actual cost and returns the unused part of the hold in one write
        assert store.settle("a", [LedgerEntry("r1", 0, Unit.MODEL_CALLS, 1.0, "call", 1.0),
                                  LedgerEntry("r1", 0, Unit.DOLLARS, 0.1, "call", 1.0)])
        assert not store.settle(None, [LedgerEntry("r1", 0, Unit.MODEL_CALLS, 1.0, "call", 1.0)])  # a replay
        assert store.reserved("r1") == {} and store.fleet_usage("f1") == {Unit.MODEL_CALLS: 1.0, Unit.DOLLARS: 0.1}
        refused = store.reserve("r1", "e", call, {}, fleet=fleet)  # 1 paid + 1 held by r2
        assert refused is not None and refused[0] is Unit.MODEL_CALLS
        store.release("b")
        assert store.reserve("r1", "e", {Unit.MODEL_CALLS: 1.0, Unit.DOLLARS: 0.9}, {}, fleet=fleet) is None

    def test_a_dead_members_call_in_flight_counts_against_the_fleet_caps(self, store: Store) -> None:
        """A fleet member's driver dies with a call in flight: the charge of its hold is a debit of that
        member, so the fleet-wide caps count it after the takeover as they counted the hold before."""
        for rid in ("r1", "r2"):
            store.create_run(_run(rid))
        store.create_fleet("f1", {})
        store.add_fleet_member("f1", 0, "r1")
        store.add_fleet_member("f1", 1, "r2")
        fleet = ("f1", {Unit.MODEL_CALLS: 2.0})
        call = {Unit.MODEL_CALLS: 1.0, Unit.DOLLARS: 0.4}
        assert store.reserve("r1", "a", call, {}, fleet=fleet, driver_id="dead", step=2, what="model call") is None
        store.takeover("r1", "new")
        assert store.fleet_usage("f1") == {Unit.MODEL_CALLS: 1.0, Unit.DOLLARS: 0.4}
        assert store.reserve("r2", "b", call, {}, fleet=fleet) is None
        refused = store.reserve("r2", "c", call, {}, fleet=fleet)  # 1 charged to r1 + 1 held by r2
        assert refused is not None and refused[0] is Unit.MODEL_CALLS and refused.fleet_id == "f1"

    def test_unknown_run_is_a_clear_error(self, store: Store) -> None:
        with pytest.raises(StoreError, match="no run"):
            store.get_run("missing")

    def test_a_missing_run_or_fleet_is_its_own_error_not_a_store_failure(self, store: Store) -> None:
        """"No such run" is :class:`RunNotFoundError` (callers create the run on it); an ambiguous prefix is not."""
        for missing in (lambda: store.get_run("missing"),
                        lambda: store.set_run_state("missing", RunState.FAILED, reason="x"),
                        lambda: store.set_run_budget("missing", {"evaluations": 1.0})):
            with pytest.raises(RunNotFoundError, match="no run 'missing'"):
                missing()
        with pytest.raises(FleetNotFoundError, match="no fleet 'missing'"):
            store.get_fleet("missing")
        store.create_run(_run("20260101-000000-aaaa"))
        store.create_run(_run("20260101-000000-bbbb"))
        with pytest.raises(StoreError, match="ambiguous") as ambiguous:
            store.get_run("20260101")
        assert not isinstance(ambiguous.value, RunNotFoundError)


class InstanceExecutor(Executor):
    """Evaluates every request with one task *instance* on a given sandbox runner (tests and benchmarks).

    The runs layer rebuilds a task from its recorded class, which a class defined inside a test cannot
    be rebuilt from; this executor keeps the instance. It only runs evaluations: the step, budget and
    cache rules stay the real ``Run``'s.

    Attributes:
        submitted: how many evaluations really ran (cache hits and refusals never reach an executor).
    """

    def __init__(self, task: Task, runner: SandboxRunner | None = None) -> None:
        self.task = task
        self.runner = runner
        self.submitted = 0

    @property
    def parallelism(self) -> int:
        return 1

    def submit(self, request: EvalRequest) -> Future[EvalResult]:
        self.submitted += 1
        fut: Future[EvalResult] = Future()
        try:
            fut.set_result(evaluate_with(self.task, request.source, seed=request.seed, executor=self.runner,
                                         options=request.options))
        except BaseException as exc:  # the engine's own failure, handed to the caller as the Run expects
            fut.set_exception(exc)
        return fut

    def close(self) -> None:
        """Nothing to release."""


def memory_run(task: Task, budget: Budget | Mapping[str, float] | None = None, *,
               runner: SandboxRunner | None = None, config: Mapping[str, Any] | None = None, seed: int = 0) -> Run:
    """A real :class:`~reasearch.runs.Run` on an in-memory store, evaluating with ``task`` on ``runner``.

    The same step, budget, cache and event rules as any run (one implementation); nothing persisted.
    """
    store = open_store(MEMORY_URL)
    budget = budget if isinstance(budget, Budget) else Budget.from_dict(dict(budget or {}))
    return Run.create(store, task=task, budget=budget, config=dict(config or {}), seed=seed,
                      executor=InstanceExecutor(task, runner))


def ledger_map(run: Run) -> dict[tuple[int, Unit, str], float]:
    """The run's ledger as ``{(step, unit, note): amount}`` (for assertions)."""
    return {(e.step, e.unit, e.note): e.amount for e in run.store.ledger(run.id)}


def executed(run: Run) -> int:
    """Evaluations that really ran for a :func:`memory_run` (not cached, not refused)."""
    ex = run.executor
    assert isinstance(ex, InstanceExecutor), "executed() counts the evaluations of a memory_run"
    return ex.submitted
