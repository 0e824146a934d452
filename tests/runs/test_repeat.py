"""A fresh evaluation of an already evaluated candidate (``repeat=True``): charged, recorded, marked, and
the spread of its scores reported."""

from __future__ import annotations

import statistics

import pytest

from reasearch.evaluators.result import Status
from reasearch.evaluators.testing import ToyTask, toy_candidate
from reasearch.runs.executor import LocalExecutor
from reasearch.runs.ledger import Unit
from reasearch.runs.run import Run
from reasearch.runs.store import Store

GOOD = toy_candidate([1.0, 2.0, 3.0, 4.0])  # score -6
CLOCKED = (  # depends on the clock, as a search that stops after a deadline does
    "import time\n\n\ndef run():\n"
    "    return [3.0 + (time.perf_counter_ns() % 1000) / 1000.0, 3.0, 3.0, 3.0]\n"
)


def test_repeat_runs_again_is_charged_and_marked(store: Store, executor: LocalExecutor) -> None:
    run = Run.create(store, task=ToyTask(), budget={"evaluations": 10}, executor=executor)
    first = run.evaluate(GOOD, step=0)
    cached = run.evaluate(GOOD, step=1)
    again = run.evaluate(GOOD, step=2, repeat=True)
    assert cached.cached and not again.cached
    assert again.status is Status.OK and again.score == first.score == -6.0
    assert again.metrics["repeat"] is True and "repeat" not in first.metrics
    assert run.used()[Unit.EVALUATIONS] == 2.0  # the first and the repeat; the cache hit was free
    assert [e.step for e in store.ledger(run.id)] == [0, 2]
    recorded = {ev.step: ev for ev in run.evaluations()}
    assert recorded[2].result.metrics["repeat"] is True and not recorded[2].result.cached
    # a repeat never feeds the cache: the next plain evaluation still serves the first result
    assert run.evaluate(GOOD, step=3).with_(cached=False) == first
    # replaying the step after a restart returns the stored repeat, debiting nothing
    again_replayed = Run.open(store, run.id, executor=executor).evaluate(GOOD, step=2, repeat=True)
    assert again_replayed == again and run.used()[Unit.EVALUATIONS] == 2.0


def test_repeat_respects_the_budget(store: Store, executor: LocalExecutor) -> None:
    run = Run.create(store, task=ToyTask(), budget={"evaluations": 1}, executor=executor)
    run.evaluate(GOOD, step=0)
    refused = run.evaluate(GOOD, step=1, repeat=True)
    assert refused.status is Status.REFUSED and run.used()[Unit.EVALUATIONS] == 1.0


def test_score_spread_of_a_clock_dependent_candidate(store: Store, executor: LocalExecutor) -> None:
    run = Run.create(store, task=ToyTask(), budget={}, executor=executor)
    results = [run.evaluate(CLOCKED, step=0)]
    results += [run.evaluate(CLOCKED, step=s, repeat=True) for s in range(1, 5)]
    run.evaluate(GOOD, step=5)
    run.evaluate(GOOD, step=6)  # cached: not a fresh score, no spread for GOOD
    spreads = run.score_spread()
    cid = run.evaluations()[0].candidate_id
    assert list(spreads) == [cid]
    sp = spreads[cid]
    scores = [r.score for r in results]
    assert sp.evaluations == sp.ok == 5
    assert (sp.min, sp.max) == (min(scores), max(scores))
    assert sp.mean == pytest.approx(statistics.fmean(scores)) and sp.std == pytest.approx(statistics.stdev(scores))
    assert sp.max > sp.min  # the clock moved between evaluations
    assert run.score_spread(cid) == {cid: sp} and run.score_spread("0" * 64) == {}
