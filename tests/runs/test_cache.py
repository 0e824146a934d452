"""The evaluation cache: zero cost and ``cached=True`` for repeats; never for nondeterministic tasks or flaky
statuses."""

from __future__ import annotations

from reasearch.evaluators.base import candidate_sha256
from reasearch.evaluators.result import Status
from reasearch.evaluators.testing import ToyTask, toy_candidate
from reasearch.runs.cache import cache_key
from reasearch.runs.executor import LocalExecutor
from reasearch.runs.ledger import Unit
from reasearch.runs.run import Run
from reasearch.runs.store import SQLStore, Store

GOOD = toy_candidate([1.0, 2.0, 3.0, 4.0])  # score -(4 + 1 + 0 + 1) = -6


def test_cache_key_covers_task_params_candidate_and_seed() -> None:
    h = candidate_sha256(GOOD)
    base = cache_key(ToyTask(), h, 0)
    assert base is not None and len(base) == 64
    assert cache_key(ToyTask(), h, 0) == base
    assert cache_key(ToyTask(), h, 1) != base
    assert cache_key(ToyTask(), h, None) != base
    assert cache_key(ToyTask(target=2.0), h, 0) != base  # same id, other parameters
    assert cache_key(ToyTask(dim=5), h, 0) != base
    assert cache_key(ToyTask(), candidate_sha256(GOOD + "\n"), 0) != base
    assert cache_key(ToyTask(deterministic=False), h, 0) is None


def test_repeat_is_served_free_and_marked(store: Store, executor: LocalExecutor) -> None:
    run = Run.create(store, task=ToyTask(), budget={"evaluations": 10}, executor=executor)
    first = run.evaluate(GOOD, step=0)
    second = run.evaluate(GOOD, step=1)
    assert first.status is Status.OK and first.score == -6.0 and not first.cached
    assert second.cached and second.score == -6.0
    assert second.with_(cached=False) == first  # the same result, timings and provenance included
    assert run.used()[Unit.EVALUATIONS] == 1.0
    assert [e.step for e in store.ledger(run.id)] == [0]
    assert run.status().cached == 1
    # the cached flag survives the store: a replay of step 1 still says cached
    assert Run.open(store, run.id, executor=executor).evaluate(GOOD, step=1).cached


def test_other_seed_is_a_miss(store: Store, executor: LocalExecutor) -> None:
    run = Run.create(store, task=ToyTask(), budget={}, executor=executor)
    run.evaluate(GOOD, step=0, seed=0)
    r = run.evaluate(GOOD, step=1, seed=1)
    assert not r.cached and r.provenance is not None and r.provenance.seed == 1
    assert run.used()[Unit.EVALUATIONS] == 2.0


class _CountingExecutor:
    """Counts what really runs (a shared-cache hit must not reach the executor)."""

    def __init__(self, inner: LocalExecutor) -> None:
        self.inner = inner
        self.submitted = 0

    def submit(self, request: object) -> object:
        self.submitted += 1
        return self.inner.submit(request)  # type: ignore[arg-type]


def test_shared_cache_saves_compute_but_each_run_pays_its_first_evaluation(store: Store,
                                                                           executor: LocalExecutor) -> None:
    """Equal budgets per run: run B pays for GOOD although run A computed it; only B's repeats are free."""
    counting = _CountingExecutor(executor)
    a = Run.create(store, task=ToyTask(), budget={"evaluations": 5}, executor=counting, seed=5)  # type: ignore[arg-type]
    b = Run.create(store, task=ToyTask(), budget={"evaluations": 5}, executor=counting, seed=5)  # type: ignore[arg-type]
    first = a.evaluate(GOOD, step=0)
    assert counting.submitted == 1
    shared = b.evaluate(GOOD, step=0)
    assert counting.submitted == 1  # no second sandbox run: the result came from the shared cache
    assert not shared.cached and shared == first  # B's first evaluation: the same result, and paid
    assert b.used()[Unit.EVALUATIONS] == 1.0 == a.used()[Unit.EVALUATIONS]
    assert [e.note for e in store.ledger(b.id)] == ["evaluate (shared cache)"]
    repeat = b.evaluate(GOOD, step=1)
    assert repeat.cached and b.used()[Unit.EVALUATIONS] == 1.0  # a repeat within the run is free
    assert counting.submitted == 1


def test_a_shared_cache_hit_respects_the_runs_cap(store: Store, executor: LocalExecutor) -> None:
    a = Run.create(store, task=ToyTask(), budget={}, executor=executor)
    b = Run.create(store, task=ToyTask(), budget={"evaluations": 0}, executor=executor)
    a.evaluate(GOOD, step=0)
    refused = b.evaluate(GOOD, step=0)
    assert refused.status is Status.REFUSED and refused.score is None
    assert b.used()[Unit.EVALUATIONS] == 0.0


def test_nondeterministic_task_is_never_cached(store: Store, executor: LocalExecutor) -> None:
    run = Run.create(store, task=ToyTask(deterministic=False), budget={}, executor=executor)
    results = [run.evaluate(GOOD, step=i) for i in range(3)]
    assert [r.cached for r in results] == [False] * 3
    assert run.used()[Unit.EVALUATIONS] == 3.0
    assert isinstance(store, SQLStore)
    assert store.db.one("SELECT COUNT(*) FROM eval_cache") == (0,)


def test_crash_is_not_cached_but_invalid_is(store: Store, executor: LocalExecutor) -> None:
    run = Run.create(store, task=ToyTask(), budget={}, executor=executor)
    crash = "def run():\n    raise ValueError('nope')\n"
    invalid = "def run():\n    return [1.0]\n"
    r = [run.evaluate(crash, step=0), run.evaluate(crash, step=1), run.evaluate(invalid, step=2),
         run.evaluate(invalid, step=3)]
    assert [x.status for x in r] == [Status.CRASH, Status.CRASH, Status.INVALID, Status.INVALID]
    assert [x.cached for x in r] == [False, False, False, True]
    assert "ValueError: nope" in r[0].feedback
    assert run.used()[Unit.EVALUATIONS] == 3.0
