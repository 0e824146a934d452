"""Experiments on Ray take Ray's GPUs: the engine's lease is the device Ray assigned (faked devices)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from reasearch.evaluators.repo import encode_repo
from reasearch.evaluators.testing import ToyRepoTrainingTask
from reasearch.runs.executor import EvalRequest, RayExecutor
from tests.conftest import RayNode, ray_driver

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def ray_gpus(tmp_path_factory: pytest.TempPathFactory, ray_node: RayNode) -> Any:
    """A node of 4 CPUs and 2 (faked) GPUs added to the session's cluster (which has none) for this module's two
    tests, and a driver whose job's workers fake the GPUs; the node goes when the module is done."""
    exp = Path("/var/tmp") / f"reasearch-raygpu-{os.getpid()}-{time.time_ns()}"
    leases = tmp_path_factory.mktemp("ray-gpu") / "leases"
    env = {"REASEARCH_FAKE_GPUS": "2", "REASEARCH_LEASE_DIR": str(leases), "REASEARCH_EXPERIMENTS_DIR": str(exp),
           "REASEARCH_CPUS_PER_SLOT": "1"}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)  # this process leases too (a process outside Ray)
        mp.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        with ray_node.extra_node(num_cpus=4, num_gpus=2), ray_driver(ray_node, env) as ray:
            executor = RayExecutor(address=ray_node.address)
            try:
                yield ray, executor
            finally:
                executor.close()
                import shutil

                shutil.rmtree(exp, ignore_errors=True)


def _request(sleep_s: float, x: float) -> EvalRequest:
    task = ToyRepoTrainingTask(sandbox_mode="process")
    files = {**task.seed_files(), "settings.json": f'{{"x": {x}, "sleep_s": {sleep_s}}}'}
    return EvalRequest(task.spec, encode_repo(files, time_budget_s=40), 0)


def test_each_experiment_takes_the_gpu_ray_assigned_and_a_third_waits_for_ray(ray_gpus: Any) -> None:
    ray, executor = ray_gpus
    assert executor.ray_options(_request(0, 0)) == {"num_gpus": 1} and executor.gpu_slots == 2
    # 3 s of training each: the first two overlap by that much (Ray dispatches both at once), and the third
    # can only start after one of them released its GPU (issue 27 item 5: 8 s each cost 16 s of the suite, 5 s 10 s).
    futures = [executor.submit(_request(3.0, x)) for x in (1.0, 2.0, 3.0)]
    results = [f.result(timeout=300) for f in futures]
    assert [r.status.value for r in results] == ["OK"] * 3, [r.feedback for r in results]
    runs = sorted((r.metrics["started_at"], r.metrics["started_at"] + r.metrics["train_s"], r.metrics["slot"],
                   r.metrics["visible_devices"]) for r in results)
    for _, _, slot, visible in runs:
        # Ray set the task's CUDA_VISIBLE_DEVICES to one GPU, and the lease took exactly that device.
        assert visible in ("0", "1") and slot.startswith(f"gpu{visible} ")
    (s1, e1, slot1, _), (s2, e2, slot2, _), (s3, _, _, _) = runs
    assert s2 < e1 and slot1 != slot2  # the first two ran at once, on distinct devices
    assert s3 >= min(e1, e2) - 0.5  # the third waited for one of Ray's GPUs to be released


def test_the_engine_lease_follows_ray_and_still_excludes_processes_outside_ray(ray_gpus: Any) -> None:
    ray, _ = ray_gpus
    from reasearch.engine.gpu import lease_slot

    outside = lease_slot("gpu", wait_s=0)  # a process outside Ray holds gpu0 (this test process)
    assert outside.device is not None and outside.device.index == 0

    @ray.remote(num_gpus=1)
    def lease_in_ray(wait_s: float) -> tuple[list[int], str, int | str]:
        from reasearch.engine.gpu import SlotBusyError
        from reasearch.engine.gpu import lease_slot as lease

        ids = [int(i) for i in ray.get_gpu_ids()]
        try:
            with lease("gpu", wait_s=wait_s) as held:
                assert held.device is not None
                return ids, os.environ["CUDA_VISIBLE_DEVICES"], held.device.index
        except SlotBusyError as exc:
            return ids, os.environ["CUDA_VISIBLE_DEVICES"], f"busy: {exc}"

    try:
        got = ray.get([lease_in_ray.remote(0.3) for _ in range(2)], timeout=120)  # gpu0 is held throughout
    finally:
        outside.release()
    by_device = {ids[0]: held for ids, _, held in got}
    assert sorted(by_device) == [0, 1] and all(len(ids) == 1 and visible == str(ids[0]) for ids, visible, _ in got)
    assert by_device[1] == 1  # Ray's gpu1: the lease took gpu1, never the free-looking other one
    # Ray gave gpu0 to a task while a process outside Ray held it: the flock makes the task wait, never share.
    assert isinstance(by_device[0], str) and by_device[0].startswith("busy: no free gpu slot")
