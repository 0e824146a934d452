"""Executors: LocalExecutor and RayExecutor give identical results for the same batch."""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reasearch.engine import SandboxConfig, SandboxPool
from reasearch.errors import ConfigError, UnknownTaskError
from reasearch.evaluators.registry import make
from reasearch.evaluators.result import Status
from reasearch.evaluators.testing import ToyTask, toy_candidate
from reasearch.runs.executor import (
    EvalRequest,
    LocalExecutor,
    RayExecutor,
    resolve_task,
    task_entry_of,
)
from reasearch.runs.ledger import Unit
from reasearch.runs.run import Run
from reasearch.runs.store import open_store
from tests.runs.unregistered_task import OffsetToyTask

ENTRY = task_entry_of(ToyTask())
D4, D3 = ToyTask(dim=4).spec, ToyTask(dim=3).spec  # toy tasks are not registered: rebuilt from task_class
SEED_AWARE = "def run(seed):\n    return [float(seed), 3.0, 3.0, 3.0]\n"
BATCH = [
    EvalRequest(D4, toy_candidate([0.0] * 4), 0),
    EvalRequest(D4, toy_candidate([2.5, 3.0, 3.5, 4.0]), 0),
    EvalRequest(D4, SEED_AWARE, 1),
    EvalRequest(D4, SEED_AWARE, 5),
    EvalRequest(D3, toy_candidate([3.0] * 3), 0),
    EvalRequest(D4, "def run():\n    return [1.0]\n", 0),
    EvalRequest(D4, "def run():\n    raise KeyError('x')\n", 0),
    EvalRequest(D4, "def run(:\n", 0),
]
EXPECTED = [(Status.OK, -36.0), (Status.OK, -1.5), (Status.OK, -4.0), (Status.OK, -4.0), (Status.OK, 0.0),
            (Status.INVALID, None), (Status.CRASH, None), (Status.CRASH, None)]


_TEMP_PATH = re.compile(r'File "[^"]*?/((?:reasearch/)[^"]*|candidate\.py)"')


def _comparable(d: dict[str, Any]) -> dict[str, Any]:
    """A result without its timings (measured, so never equal across runs). The only other thing
    allowed to differ is the temporary folder in a traceback's file names (each pool mirrors the
    package into its own folder): ``File "/var/tmp/x/reasearch/a.py"`` compares as ``reasearch/a.py``."""
    out = {k: v for k, v in d.items() if k not in ("wall_s", "cpu_s")}
    out["feedback"] = _TEMP_PATH.sub(r'File "\1"', out["feedback"])
    return out


@pytest.fixture(scope="module")
def local() -> Iterator[LocalExecutor]:
    with SandboxPool(SandboxConfig(workers=2)) as pool, LocalExecutor(2, pool=pool) as ex:
        yield ex


def test_request_roundtrip_and_task_resolution() -> None:
    req = BATCH[2]
    assert EvalRequest.from_dict(req.to_dict()) == req
    assert req.to_dict()["spec"]["task_class"] == ENTRY and req.task_id == "toy/quadratic-d4-v1"
    # the form before specs (a request from an older driver) is still read: its task's spec is built
    old = {"task_id": "toy/quadratic-d4-v1", "task_params": {"dim": 4}, "source": req.source, "seed": 1,
           "task_entry": ENTRY, "options": {}}
    assert EvalRequest.from_dict(old) == req
    with pytest.raises(ConfigError, match="takes the task's TaskSpec"):
        EvalRequest("toy/quadratic-d4-v1", req.source)  # type: ignore[arg-type]
    assert resolve_task("toy/quadratic-d3-v1", {"dim": 3}, ENTRY).spec.id == "toy/quadratic-d3-v1"
    with pytest.raises(UnknownTaskError, match="unknown task id"):
        resolve_task("toy/quadratic-d3-v1", {"dim": 3})
    with pytest.raises(ConfigError, match="builds task 'toy/quadratic-d4-v1'"):
        resolve_task("toy/quadratic-d3-v1", {}, ENTRY)


def test_local_map_in_order_with_progress(local: LocalExecutor, capsys: pytest.CaptureFixture[str]) -> None:
    results = local.map(BATCH, progress=True)
    assert [(r.status, r.score) for r in results] == EXPECTED
    assert all(r.provenance is not None and r.provenance.sandbox_mode == local.pool.mode for r in results)
    assert results[2].provenance.seed == 1  # type: ignore[union-attr]
    assert local.parallelism == 2
    assert local.evaluate(BATCH[0]).score == -36.0


def test_parallelism_is_explicit_never_capped(caplog: pytest.LogCaptureFixture) -> None:
    too_many = (len(os.sched_getaffinity(0))) + 3
    with caplog.at_level(logging.WARNING, logger="reasearch.runs.executor"):
        ex = LocalExecutor(too_many, pool=None)
    try:
        assert ex.parallelism == too_many
        assert "exceeds" in caplog.text
    finally:
        ex.close()
    with pytest.raises(ConfigError, match=">= 1"):
        LocalExecutor(0)
    pool = SandboxPool(SandboxConfig(workers=1))
    try:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="reasearch.runs.executor"):
            capped = LocalExecutor(2, pool=pool)
        assert capped.parallelism == 1 and "1 evaluations run at once" in caplog.text  # reported, not silent
        default = LocalExecutor(pool=pool)
        assert default.parallelism == 1
        capped.close()
        default.close()
    finally:
        pool.close()
    with pytest.raises(ConfigError, match="closed"):
        ex.submit(BATCH[0])


@pytest.fixture()
def ray_ex(local_ray: Any) -> Iterator[RayExecutor]:
    """A RayExecutor on the session's Ray node of two CPUs (local_ray: Ray is initialized, so the executor
    joins it; the test's Ray job ends with the test)."""
    ex = RayExecutor(num_cpus=2)
    try:
        yield ex
    finally:
        ex.close()


@pytest.mark.ray
def test_ray_gives_identical_results(local: LocalExecutor, ray_ex: RayExecutor) -> None:
    expected = [_comparable(r.to_dict()) for r in local.map(BATCH, progress=False)]
    assert ray_ex.parallelism == 2
    got = ray_ex.map(BATCH, progress=True)
    assert [(r.status, r.score) for r in got] == EXPECTED
    assert [_comparable(r.to_dict()) for r in got] == expected
    # a second round reuses the warm Ray workers and still agrees
    assert _comparable(ray_ex.submit(BATCH[1]).result().to_dict()) == expected[1]


@pytest.mark.ray
def test_a_run_of_an_unregistered_task_evaluates_locally_and_on_ray(tmp_path: Path, local: LocalExecutor,
                                                                    ray_ex: RayExecutor) -> None:
    """A run of a task registered nowhere (a class outside the package) is rebuilt from its stored spec
    alone, by the run and by each executor: the local pool's threads and a Ray worker process."""
    task = OffsetToyTask(dim=2, offset=10.0)
    with pytest.raises(UnknownTaskError):
        make(task.spec.id)  # not in the registry
    assert task.spec.task_class == "tests.runs.unregistered_task:OffsetToyTask"
    with open_store(tmp_path) as store:
        Run.create(store, task=task, budget={"evaluations": 3}, run_id="unregistered").close()
        for step, (executor, x) in enumerate([(local, 3.0), (ray_ex, 2.0)]):
            run = Run.open(store, "unregistered", executor=executor, resume=True)  # a fresh Run: only the store
            r = run.evaluate(toy_candidate([x, 3.0]), step=step)
            # scored by OffsetToyTask (ToyTask's score + 10) in the executor's rebuilt task
            assert (r.status, r.score, r.provenance.task_id) == (Status.OK, 10.0 - (x - 3.0) ** 2,  # type: ignore[union-attr]
                                                                 "test/offset-d2-v1")
            run.close()
        assert store.usage("unregistered") == {Unit.EVALUATIONS: 2.0}


@pytest.mark.ray
def test_a_ray_result_that_does_not_parse_fails_its_future_instead_of_hanging(
        ray_ex: RayExecutor, monkeypatch: pytest.MonkeyPatch) -> None:
    from reasearch.runs import executor as executor_module

    def unparsable(d: Any) -> Any:
        raise ValueError("not a result")

    monkeypatch.setattr(executor_module.EvalResult, "from_dict", unparsable)  # parsed here, in the driver
    with pytest.raises(ValueError, match="not a result"):
        ray_ex.submit(BATCH[0]).result(timeout=60)


@pytest.mark.ray
def test_ray_puts_each_spec_once_and_never_asks_the_cluster_for_a_cpu_task(
        local: LocalExecutor, ray_ex: RayExecutor, monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-request cost of the Ray path: the spec travels once (the object store), the cluster's
    resources are not queried per request, and the results are still the local pool's."""
    puts: list[Any] = []
    asked: list[int] = []
    real_put, real_gpus = ray_ex._ray.put, ray_ex._conn.cluster_gpus
    monkeypatch.setattr(ray_ex._ray, "put", lambda obj, **kw: (puts.append(obj), real_put(obj, **kw))[1])
    monkeypatch.setattr(ray_ex._conn, "cluster_gpus", lambda: (asked.append(1), real_gpus())[1])
    expected = [_comparable(r.to_dict()) for r in local.map(BATCH, progress=False)]
    each = [ray_ex.submit(r).result(timeout=120) for r in BATCH]
    batch = [f.result(timeout=120) for f in ray_ex.submit_all(BATCH * 3)]  # chunked: several to a Ray task
    assert [_comparable(r.to_dict()) for r in each] == expected
    assert [_comparable(r.to_dict()) for r in batch] == expected * 3  # in order, chunk by chunk
    assert sorted(json.dumps(p, sort_keys=True) for p in puts) == sorted(
        json.dumps(s.to_dict(), sort_keys=True) for s in (D4, D3))  # one put per spec, 32 requests
    assert asked == []  # a CPU task's requests never query the cluster


@pytest.mark.ray
def test_a_failed_chunk_fails_each_of_its_requests(ray_ex: RayExecutor, monkeypatch: pytest.MonkeyPatch) -> None:
    from reasearch.runs import executor as executor_module

    def unparsable(d: Any) -> Any:
        raise ValueError("not a result")

    monkeypatch.setattr(executor_module.EvalResult, "from_dict", unparsable)
    futures = ray_ex.submit_all(BATCH[:4])
    assert len(futures) == 4
    for f in futures:
        with pytest.raises(ValueError, match="not a result"):
            f.result(timeout=120)
