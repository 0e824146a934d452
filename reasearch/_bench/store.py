"""``reasearch bench`` section ``store``: run-store write throughput and executor overhead.

Figures, measured side by side in one run:
* evaluations recorded per second: each record is one transaction holding the candidate, the full
  ``EvalResult``, its ledger debit and its cache entry (what ``Run.evaluate`` writes). SQLite in WAL
  mode (the default) vs the same code on SQLite's default rollback journal with ``synchronous=FULL``;
  PostgreSQL too when a URL is configured (``REASEARCH_BENCH_POSTGRES_URL`` or
  ``REASEARCH_TEST_POSTGRES_URL``).
* executor overhead per evaluation on the same batch of trivial candidates: ``LocalExecutor`` and
  ``RayExecutor`` (when Ray is installed) against calling ``Task.evaluate`` on the pool directly,
  one request at a time; and batch throughput of both.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from pathlib import Path

from reasearch._bench import BenchRow, median
from reasearch.evaluators.base import candidate_sha256
from reasearch.evaluators.result import EvalResult, Provenance, Status
from reasearch.runs.ledger import LedgerEntry, Unit
from reasearch.runs.store import (
    CandidateRecord,
    EvaluationRecord,
    RunRecord,
    RunState,
    SQLiteStore,
    Store,
    open_store,
)

__all__ = ["run", "record_evaluations", "new_bench_run", "postgres_url"]

SECTION = "store"


def postgres_url() -> str:
    """The PostgreSQL URL to measure, or '' (then only SQLite is measured)."""
    return os.environ.get("REASEARCH_BENCH_POSTGRES_URL") or os.environ.get("REASEARCH_TEST_POSTGRES_URL", "")


def new_bench_run(store: Store) -> str:
    """Creates an empty run to record into; returns its id."""
    run_id = "bench-" + uuid.uuid4().hex[:12]
    now = time.time()
    store.create_run(RunRecord(run_id, "toy/quadratic-d4-v1", {"dim": 4}, 0, {}, {"evaluations": 1e9},
                               RunState.RUNNING, now, now, "reasearch.evaluators.testing:ToyTask"))
    return run_id


def _result(i: int, cid: str) -> EvalResult:
    """A realistic record: provenance, metrics, feedback and a solution, as a task returns them."""
    prov = Provenance("toy/quadratic-d4-v1", 1, "0123456789abcdef", cid, 0, "nsjail",
                      {"python": "3.11.7", "numpy": "2.4.6", "scipy": "1.17.1"}, {"dim": 4})
    return EvalResult(Status.OK, -float(i), None, {"distance": float(i) ** 0.5, "iterations": i},
                      "distance to the optimum: ..." * 4, 0.004, 0.003, prov, {"x": [float(i)] * 26})


def record_evaluations(store: Store, run_id: str, n: int, *, start: int = 0) -> float:
    """Records ``n`` evaluations (steps ``start..start+n-1``), one transaction each; returns seconds."""
    items = []
    for step in range(start, start + n):
        source = f"def run():\n    return [{step}.0] * 4\n"
        cid = candidate_sha256(source)
        items.append((EvaluationRecord(run_id, step, cid, 0, _result(step, cid), 0.0),
                      CandidateRecord(run_id, cid, source, None, "bench", 0.0),
                      LedgerEntry(run_id, step, Unit.EVALUATIONS, 1.0, "evaluate", 0.0),
                      f"{run_id}:{cid}"))
    t0 = time.perf_counter()
    for ev, cand, debit, key in items:
        store.record_evaluation(ev, cand, debit=debit, cache_key=key)
    return time.perf_counter() - t0


def _throughput(store: Store, n: int, repeat: int) -> float:
    run_id = new_bench_run(store)
    record_evaluations(store, run_id, 20, start=0)  # warm-up
    rates = [n / record_evaluations(store, run_id, n, start=20 + r * n) for r in range(repeat)]
    return median(rates)


def _store_rows(quick: bool) -> list[BenchRow]:
    n, repeat = (200, 3) if quick else (1000, 5)
    rows: list[BenchRow] = []
    with tempfile.TemporaryDirectory(prefix="reasearch-bench-store-") as tmp:
        wal = open_store(Path(tmp) / "wal")
        wal_rate = _throughput(wal, n, repeat)
        wal.close()
        ref = SQLiteStore(Path(tmp) / "rollback" / "store.sqlite")
        ref.db.execute("PRAGMA journal_mode=DELETE")
        ref.db.execute("PRAGMA synchronous=FULL")
        ref_rate = _throughput(ref, n, repeat)
        ref.close()
    rows.append(BenchRow(
        SECTION, "SQLite store: evaluations recorded (WAL)", wal_rate, "records/s",
        reference="SQLite rollback journal, synchronous=FULL", reference_value=ref_rate, ratio=wal_rate / ref_rate,
        goal=">= 500 records/s", met=wal_rate >= 500,
        note="one transaction per record: candidate + EvalResult + ledger debit + cache entry"))
    url = postgres_url()
    if url:
        pg = open_store(url)
        try:
            pg_rate = _throughput(pg, n, repeat)
        finally:
            pg.close()
        rows.append(BenchRow(
            SECTION, "PostgreSQL store: evaluations recorded", pg_rate, "records/s",
            reference="SQLite WAL (same code path)", reference_value=wal_rate, ratio=pg_rate / wal_rate,
            goal=">= 200 records/s", met=pg_rate >= 200, note="loopback server, fsync on, one transaction per record"))
    return rows


def _executor_rows(quick: bool) -> list[BenchRow]:
    from reasearch.engine import SandboxConfig, SandboxPool
    from reasearch.evaluators.testing import ToyTask, toy_candidate
    from reasearch.runs.executor import EvalRequest, LocalExecutor

    task = ToyTask()
    sources = [toy_candidate([float(i)] * 4) for i in range(8)]
    requests = [EvalRequest(task.spec, s, 0) for s in sources]
    batch = requests * (4 if quick else 16)
    repeat = 4 if quick else 12
    rows: list[BenchRow] = []
    try:
        import ray  # noqa: F401

        has_ray = True
    except ImportError:
        has_ray = False
    with SandboxPool(SandboxConfig(workers=2)) as pool, LocalExecutor(2, pool=pool) as local:
        for s in sources:  # warm-up: workers import the harness once
            task.evaluate(s, seed=0, executor=pool)
        direct, local_overhead = _paired(task, requests, pool, local, repeat)
        local_rate = _rate(local, batch)
        rows.append(BenchRow(
            SECTION, "LocalExecutor overhead per evaluation", local_overhead * 1e3, "ms",
            reference="Task.evaluate on the same pool directly (latency)", reference_value=direct * 1e3,
            goal="<= 1 ms", met=local_overhead <= 1e-3,
            note=f"sandbox={pool.mode}; medians over alternating-order pairs"))
        rows.append(BenchRow(SECTION, f"LocalExecutor throughput (batch of {len(batch)}, parallelism 2)",
                             local_rate, "evals/s", note=f"sandbox={pool.mode}"))
        if not has_ray:
            rows.append(BenchRow(SECTION, "RayExecutor overhead per evaluation", float("nan"), "ms",
                                 note="not measured: ray is not installed (pip install 'reasearch[ray]')"))
            return rows
        from reasearch.runs.executor import RayExecutor

        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        ray_ex = RayExecutor(address=None, num_cpus=2)
        try:
            ray_ex.map(requests * 2, progress=False)  # warm-up: Ray workers start their own sandbox pools
            direct_r, ray_overhead = _paired(task, requests, pool, ray_ex, repeat)
            ray_rate = _rate(ray_ex, batch)
        finally:
            ray_ex.close()
    rows.append(BenchRow(
        SECTION, "RayExecutor overhead per evaluation", ray_overhead * 1e3, "ms",
        reference="LocalExecutor overhead", reference_value=local_overhead * 1e3,
        goal="<= 10 ms", met=ray_overhead <= 10e-3,
        note=f"local Ray, 2 CPUs; direct latency {direct_r * 1e3:.2f} ms; medians over alternating-order pairs"))
    rows.append(BenchRow(SECTION, f"RayExecutor throughput (batch of {len(batch)}, 2 CPUs)", ray_rate, "evals/s",
                         reference="LocalExecutor throughput", reference_value=local_rate, ratio=ray_rate / local_rate))
    return rows


def _rate(executor: object, batch: list) -> float:
    """Evaluations per second of ``executor.map(batch)``."""
    t0 = time.perf_counter()
    executor.map(batch, progress=False)  # type: ignore[attr-defined]
    return len(batch) / (time.perf_counter() - t0)


def _paired(task: object, requests: list, pool: object, executor: object, repeat: int) -> tuple[float, float]:
    """(median direct latency, median executor latency minus median direct latency), in seconds.

    Each request runs once directly (``Task.evaluate`` on ``pool``) and once through ``executor``,
    back to back, in alternating order: the first of two back-to-back evaluations is measurably
    slower (its worker is still tidying up after the previous one), so each side goes first equally
    often, and drifting machine load hits both sides alike.
    """
    direct: list[float] = []
    through: list[float] = []

    def timed(fn: object, out: list[float]) -> None:
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append(time.perf_counter() - t0)

    for i in range(repeat):
        for j, req in enumerate(requests):
            run_direct = lambda req=req: task.evaluate(req.source, seed=req.seed, executor=pool)  # type: ignore[attr-defined]  # noqa: E731
            run_exec = lambda req=req: executor.submit(req).result()  # type: ignore[attr-defined]  # noqa: E731
            if (i + j) % 2:
                timed(run_direct, direct)
                timed(run_exec, through)
            else:
                timed(run_exec, through)
                timed(run_direct, direct)
    return median(direct), median(through) - median(direct)


def run(quick: bool) -> list[BenchRow]:
    """Measures the store (SQLite; PostgreSQL when configured) and the executors."""
    return _store_rows(quick) + _executor_rows(quick)
