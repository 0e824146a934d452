"""Runs: the run record, its store (SQLite, PostgreSQL), the budget ledger, the evaluation cache and
the executors (local warm pool, Ray) that turn evaluation requests into stored, debited results.

Sits above the evaluators and the engine: ``agent -> runs -> evaluators -> engine``.

Quick use::

    from reasearch.runs import Run, open_store

    store = open_store("runs")                          # SQLite under ./runs (a PostgreSQL URL works too)
    run = Run.create(store, task_id="circle_packing/n26-v1", budget={"evaluations": 100})
    print(run.evaluate(open("cand.py").read()).score)
"""

from __future__ import annotations

from reasearch.runs.executor import EvalRequest, Executor, LocalExecutor, RayExecutor
from reasearch.runs.ledger import Budget, Unit
from reasearch.runs.run import Event, Run, RunStatus
from reasearch.runs.store import RunState, Store, open_store

__all__ = [
    "Run", "RunStatus", "RunState", "Event", "Budget", "Unit", "Store", "open_store",
    "EvalRequest", "Executor", "LocalExecutor", "RayExecutor",
]
