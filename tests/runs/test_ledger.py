"""The ledger: units, caps, refusals, idempotent debits, one transaction with the result."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reasearch.errors import ConfigError, SandboxError
from reasearch.evaluators.result import EvalResult, Status
from reasearch.evaluators.testing import ToyTask, toy_candidate
from reasearch.runs.executor import EvalRequest, Executor, LocalExecutor
from reasearch.runs.ledger import Budget, Unit, refusal_message
from reasearch.runs.run import Run
from reasearch.runs.store import Store, open_store


def test_budget_parsing_and_arithmetic() -> None:
    b = Budget.from_dict({"evaluations": 50, "dollars": 2.5})
    assert b.caps == {Unit.EVALUATIONS: 50.0, Unit.DOLLARS: 2.5}
    assert b.to_dict() == {"evaluations": 50.0, "dollars": 2.5}
    assert b.cap("tokens") is None and b.left(Unit.TOKENS, 1e9) is None
    assert b.left(Unit.EVALUATIONS, 12) == 38.0 and b.left(Unit.EVALUATIONS, 80) == 0.0
    assert b.allows(Unit.EVALUATIONS, 49) and not b.allows(Unit.EVALUATIONS, 50)
    assert b.allows(Unit.DOLLARS, 2.0, 0.5) and not b.allows(Unit.DOLLARS, 2.0, 0.51)
    with pytest.raises(ConfigError, match="unknown budget unit 'evals'"):
        Budget.from_dict({"evals": 3})
    with pytest.raises(ConfigError, match=">= 0"):
        Budget.from_dict({"evaluations": -1})
    with pytest.raises(ConfigError, match="number"):
        Budget.from_dict({"evaluations": "many"})


def test_refusal_message_says_what_is_left() -> None:
    msg = refusal_message(Unit.EVALUATIONS, 50, 50)
    assert msg.startswith("evaluation budget spent: 50/50 used, 0 left")
    assert "'evaluations' cap" in msg


def test_cap_refuses_and_never_runs(store: Store, executor: LocalExecutor) -> None:
    run = Run.create(store, task=ToyTask(), budget={"evaluations": 3}, executor=executor)
    results = [run.evaluate(toy_candidate([float(i)] * 4), step=i) for i in range(5)]
    assert [r.status for r in results] == [Status.OK] * 3 + [Status.REFUSED] * 2
    assert [r.score for r in results[:3]] == [-36.0, -16.0, -4.0]
    refused = results[3]
    assert refused.score is None and refused.wall_s == 0.0
    assert "evaluation budget spent: 3/3 used" in refused.feedback
    assert refused.metrics == {"unit": "evaluations", "used": 3.0, "cap": 3.0, "left": 0.0, "needed": 1.0}
    assert refused.provenance is not None and refused.provenance.sandbox_mode == "not run"
    assert run.remaining()[Unit.EVALUATIONS] == 0.0 and run.remaining()[Unit.TOKENS] is None
    assert sum(e.amount for e in store.ledger(run.id)) == 3.0
    # a replayed step returns the stored result and debits nothing
    assert run.evaluate(toy_candidate([1.0] * 4), step=1) == results[1]
    assert run.used()[Unit.EVALUATIONS] == 3.0
    st = run.status()
    assert st.by_status == {"OK": 3, "REFUSED": 2} and st.used[Unit.EVALUATIONS] == 3.0


def test_concurrent_callers_cannot_overspend(store: Store, executor: LocalExecutor) -> None:
    run = Run.create(store, task=ToyTask(), budget={"evaluations": 4}, executor=executor)
    out: dict[int, EvalResult] = {}

    def go(i: int) -> None:
        out[i] = run.evaluate(toy_candidate([float(i)] * 4, sleep_s=0.05), step=i)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    statuses = sorted(r.status.value for r in out.values())
    assert statuses == ["OK"] * 4 + ["REFUSED"] * 3
    assert run.used()[Unit.EVALUATIONS] == 4.0
    assert len(store.ledger(run.id)) == 4


def test_agent_debits_are_idempotent(store: Store, executor: LocalExecutor) -> None:
    run = Run.create(store, task=ToyTask(), budget={"tokens": 1000, "dollars": 1.0}, executor=executor)
    run.debit(Unit.TOKENS, 400, step=0, note="turn")
    run.debit("tokens", 400, step=0, note="turn")  # replay of step 0
    run.debit(Unit.TOKENS, 250, step=1, note="turn")
    run.debit(Unit.DOLLARS, 0.3, step=1, note="turn")
    assert run.remaining()[Unit.TOKENS] == 350.0
    assert run.remaining()[Unit.DOLLARS] == pytest.approx(0.7)
    assert run.remaining()[Unit.EVALUATIONS] is None
    with pytest.raises(ConfigError, match="finite amount"):
        run.debit(Unit.TOKENS, -5, step=2)
    with pytest.raises(ConfigError, match="reserved"):
        run.debit(Unit.EVALUATIONS, 1, step=2, note="evaluate")
    with pytest.raises(ValueError):
        run.debit("pennies", 1, step=2)


class _BrokenExecutor(Executor):
    """An engine that fails (not a candidate): the error must surface, nothing may be recorded."""

    parallelism = 1  # type: ignore[assignment]

    def submit(self, request: EvalRequest) -> Future[EvalResult]:
        f: Future[EvalResult] = Future()
        f.set_exception(SandboxError("worker died"))
        return f

    def close(self) -> None:
        pass


def test_engine_failure_records_and_debits_nothing(store: Store) -> None:
    run = Run.create(store, task=ToyTask(), budget={"evaluations": 2}, executor=_BrokenExecutor())
    with pytest.raises(SandboxError, match="worker died"):
        run.evaluate(toy_candidate([1.0] * 4), step=0)
    assert store.get_evaluation(run.id, 0) is None and store.ledger(run.id) == [] and store.candidates(run.id) == []
    assert run.remaining()[Unit.EVALUATIONS] == 2.0  # the in-flight reservation was released


def test_cached_result_is_free_even_past_the_cap(store: Store, executor: LocalExecutor) -> None:
    run = Run.create(store, task=ToyTask(), budget={"evaluations": 1}, executor=executor)
    first = run.evaluate(toy_candidate([3.0] * 4), step=0)
    again = run.evaluate(toy_candidate([3.0] * 4), step=1)
    other = run.evaluate(toy_candidate([2.0] * 4), step=2)
    assert first.status is Status.OK and first.score == 0.0 and not first.cached
    assert again.cached and again.score == 0.0
    assert other.status is Status.REFUSED
    assert run.used()[Unit.EVALUATIONS] == 1.0


def test_task_declared_costs_are_debited_with_the_result(store: Store, executor: LocalExecutor) -> None:
    """A training-like task: one experiment plus measured GPU-seconds per evaluation, in one transaction."""
    from reasearch.evaluators.testing import ToyTrainingTask

    run = Run.create(store, task=ToyTrainingTask(), budget={"experiments": 10, "gpu_seconds": 1e-6},
                     executor=executor)
    first = run.evaluate(toy_candidate([1.0] * 4), step=0)
    second = run.evaluate(toy_candidate([2.0] * 4), step=1)
    assert first.status is Status.OK and first.wall_s > 1e-6
    assert second.status is Status.REFUSED  # GPU-seconds spent: nothing more starts
    assert "GPU-seconds budget spent" in second.feedback and second.metrics["unit"] == "gpu_seconds"
    ledger = store.ledger(run.id)
    assert sorted((e.step, e.unit.value, e.note) for e in ledger) == [(0, "experiments", "evaluate"),
                                                                       (0, "gpu_seconds", "evaluate")]
    assert run.used()[Unit.GPU_SECONDS] == first.wall_s and run.used()[Unit.EXPERIMENTS] == 1.0
    assert run.used()[Unit.EVALUATIONS] == 0.0
    assert run.remaining()[Unit.GPU_SECONDS] == 0.0 and run.remaining()[Unit.EXPERIMENTS] == 9.0
    assert Budget.from_dict({"gpu_seconds": 5}).allows("gpu_seconds", 4.9, 0.0)
    assert not Budget.from_dict({"gpu_seconds": 5}).allows("gpu_seconds", 5.0, 0.0)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cap=st.integers(0, 4), ops=st.lists(st.tuples(st.integers(0, 6), st.sampled_from([0.0, 1.0, 2.0, 3.0])),
                                            min_size=1, max_size=10))
def test_ledger_matches_a_plain_model(tmp_path_factory: pytest.TempPathFactory, executor: LocalExecutor,
                                      cap: int, ops: list[tuple[int, float]]) -> None:
    """Random (step, candidate) sequences, replays included, against a plain-Python model of the rules."""
    recorded: dict[int, tuple[float, str, bool]] = {}  # step -> (value, status, cached)
    cache: set[float] = set()
    used = 0
    with open_store(tmp_path_factory.mktemp("model")) as store:
        run = Run.create(store, task=ToyTask(), budget={"evaluations": cap}, executor=executor)
        for step, value in ops:
            source = toy_candidate([value] * 4)
            if step in recorded and recorded[step][0] != value:
                with pytest.raises(ConfigError):
                    run.evaluate(source, step=step)
                continue
            got = run.evaluate(source, step=step)
            if step not in recorded:
                if value in cache:
                    recorded[step] = (value, "OK", True)
                elif used < cap:
                    used += 1
                    cache.add(value)
                    recorded[step] = (value, "OK", False)
                else:
                    recorded[step] = (value, "REFUSED", False)
            _, status, cached = recorded[step]
            assert (got.status.value, got.cached) == (status, cached)
            assert got.score == (-4 * (value - 3.0) ** 2 if status == "OK" else None)
        assert run.used()[Unit.EVALUATIONS] == used <= cap
        assert sorted(e.step for e in store.ledger(run.id)) == sorted(
            s for s, (_, status, cached) in recorded.items() if status == "OK" and not cached)
        assert run.status().evaluations == len(recorded)
