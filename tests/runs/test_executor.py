"""Executors: LocalExecutor and RayExecutor give identical results for the same batch."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from typing import Any

import pytest

from reasearch.engine import SandboxConfig, SandboxPool
from reasearch.errors import ConfigError, UnknownTaskError
from reasearch.evaluators.result import Status
from reasearch.evaluators.testing import ToyTask, toy_candidate
from reasearch.runs.executor import (
    EvalRequest,
    LocalExecutor,
    RayExecutor,
    resolve_task,
    task_entry_of,
)

ENTRY = task_entry_of(ToyTask())
SEED_AWARE = "def run(seed):\n    return [float(seed), 3.0, 3.0, 3.0]\n"
BATCH = [
    EvalRequest("toy/quadratic-d4-v1", {"dim": 4}, toy_candidate([0.0] * 4), 0, ENTRY),
    EvalRequest("toy/quadratic-d4-v1", {"dim": 4}, toy_candidate([2.5, 3.0, 3.5, 4.0]), 0, ENTRY),
    EvalRequest("toy/quadratic-d4-v1", {"dim": 4}, SEED_AWARE, 1, ENTRY),
    EvalRequest("toy/quadratic-d4-v1", {"dim": 4}, SEED_AWARE, 5, ENTRY),
    EvalRequest("toy/quadratic-d3-v1", {"dim": 3}, toy_candidate([3.0] * 3), 0, ENTRY),
    EvalRequest("toy/quadratic-d4-v1", {"dim": 4}, "def run():\n    return [1.0]\n", 0, ENTRY),
    EvalRequest("toy/quadratic-d4-v1", {"dim": 4}, "def run():\n    raise KeyError('x')\n", 0, ENTRY),
    EvalRequest("toy/quadratic-d4-v1", {"dim": 4}, "def run(:\n", 0, ENTRY),
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


@pytest.mark.ray
def test_ray_gives_identical_results(local: LocalExecutor, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI installs the ray extra: `import ray` must work")
        pytest.skip("the ray extra is not installed (pip install 'reasearch[ray]')")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    expected = [_comparable(r.to_dict()) for r in local.map(BATCH, progress=False)]
    ray_ex = RayExecutor(num_cpus=2)  # address="auto" finds no cluster here, so it starts a local Ray
    try:
        assert ray_ex.parallelism == 2
        got = ray_ex.map(BATCH, progress=True)
        assert [(r.status, r.score) for r in got] == EXPECTED
        assert [_comparable(r.to_dict()) for r in got] == expected
        # a second round reuses the warm Ray workers and still agrees
        assert _comparable(ray_ex.submit(BATCH[1]).result().to_dict()) == expected[1]
    finally:
        ray_ex.close()
