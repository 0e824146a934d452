"""Fleets and concurrent store writers, side by side in one run.

Run: ``pytest benchmarks/bench_fleet.py --benchmark-group-by=group -s``. Groups:

* ``fleet_8_runs``: a fleet of 8 scripted agent runs (circle_packing/n26-v1, two evaluations each)
  one after another in this process (reference), as a local fleet (threads, parallelism 2) and as a
  Ray fleet (local Ray, 2 CPUs). The speed-up and the overhead per run are printed against the
  sequential reference.
* ``store_8_writers``: 8 threads, each its own connection, recording evaluations of one run at once
  (idempotent steps, one transaction each), on SQLite (WAL) and PostgreSQL when
  ``REASEARCH_BENCH_POSTGRES_URL``/``REASEARCH_TEST_POSTGRES_URL`` is set; writes per second printed.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reasearch._bench.store import new_bench_run, postgres_url, record_evaluations
from reasearch.agent import build_model, start_run
from reasearch.fleets.fleet import FleetSpec, run_fleet
from reasearch.models.testing import call, say
from reasearch.runs.store import open_store

TASK = "circle_packing/n26-v1"
N_RUNS = 8
RESULTS: dict[str, float] = {}


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="reasearch-bench-fleet-", dir="/var/tmp"))
    d.chmod(0o711)
    script = d / "script.json"
    variant = ("import numpy as np\n\ndef run():\n    k = np.arange(26)\n"
               "    c = np.stack([(k % 6 + 0.5) / 6, (k // 6 + 0.5) / 6], axis=1)\n    return c, np.full(26, 1 / 13)\n")
    script.write_text(json.dumps([r.to_dict() for r in (say("", call("evaluate")),
                                                        say("", call("evaluate", code=variant)),
                                                        say("", call("finish", reason="best")))]))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _spec(workdir: Path) -> FleetSpec:
    return FleetSpec(tasks=(TASK,), seeds=tuple(range(N_RUNS)), models=(f"scripted/{workdir / 'script.json'}",),
                     budget={"evaluations": 5}, parallelism=2, agent={"sandbox_mode": "process"})


@pytest.mark.parametrize("how", ["sequential", "local_fleet", "ray_fleet"])
def test_fleet_8_runs(benchmark, how: str, workdir: Path) -> None:
    benchmark.group = "fleet_8_runs"
    spec = _spec(workdir)
    counter = itertools.count()

    def sequential() -> None:
        d = workdir / f"seq-{next(counter)}"
        with open_store(d) as store:
            for seed in spec.seeds:
                config = spec.agent_config(spec.models[0])
                models = {role: build_model(s) for role, s in config.models.items()}
                agent = start_run(TASK, budget=spec.budget, config=config, run_dir=d, store=store, seed=seed,
                                  models=models)
                agent.optimize()
                agent.run.close()

    def fleet(executor: str) -> None:
        d = workdir / f"{executor}-{next(counter)}"
        report = run_fleet(spec, store=d, run_dir=d, executor=executor)
        assert all(r.state == "finished" for r in report.members)

    if how == "sequential":
        fn = sequential
    elif how == "local_fleet":
        fn = lambda: fleet("local")  # noqa: E731
    else:
        pytest.importorskip("ray", reason="the ray extra is not installed")
        import ray

        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        fn = lambda: fleet("ray")  # noqa: E731
    try:
        benchmark.pedantic(fn, rounds=2, iterations=1, warmup_rounds=0)
    finally:
        if how == "ray_fleet":
            import ray

            ray.shutdown()
    RESULTS[how] = benchmark.stats.stats.mean
    if "sequential" in RESULTS and how != "sequential":
        ref = RESULTS["sequential"]
        print(f"\n{how}: {RESULTS[how]:.2f} s for {N_RUNS} runs vs sequential {ref:.2f} s: "
              f"speed-up {ref / RESULTS[how]:.2f}x, {(RESULTS[how] - ref / 2) / N_RUNS * 1000:+.0f} ms per run "
              f"against a perfect 2-way split")


def _writers(url: str, n_writers: int, per_writer: int) -> float:
    with open_store(url) as store:
        run_id = new_bench_run(store)
    stores = [open_store(url) for _ in range(n_writers)]
    t0 = time.perf_counter()
    threads = [
        threading.Thread(target=record_evaluations, args=(s, run_id, per_writer), kwargs={"start": i * per_writer})
        for i, s in enumerate(stores)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    assert len(stores[0].evaluations(run_id)) == n_writers * per_writer
    for s in stores:
        s.close()
    return n_writers * per_writer / dt


@pytest.mark.parametrize("backend", ["sqlite"] + (["postgres"] if postgres_url() else []))
def test_store_8_writers(benchmark, backend: str, tmp_path: Path) -> None:
    benchmark.group = "store_8_writers"
    url = postgres_url() if backend == "postgres" else str(tmp_path / "runs")
    rates: list[float] = []
    benchmark.pedantic(lambda: rates.append(_writers(url, 8, 50)), rounds=3, iterations=1)
    print(f"\n{backend}: 8 concurrent writers, {max(rates):.0f} evaluations recorded/s (best of 3)")
