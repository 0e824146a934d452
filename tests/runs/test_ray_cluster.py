"""Ray in one place (issue 31): the GPU rule, the missing-Ray message, and joining a Ray already running.

Executors and fleets both go through ``reasearch.runs.ray_cluster``; these tests hold the shared rule
itself, the Ray tests of each (tests/runs/test_executor.py, tests/agent/test_fleet.py) its use.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from reasearch.errors import ConfigError
from reasearch.evaluators.testing import ToyRepoTrainingTask, ToyTask
from reasearch.runs.ray_cluster import RayConnection, connect_ray, gpu_options, import_ray


@pytest.mark.parametrize(("slot", "gpus", "expected"), [
    ("auto", 2.0, {"num_gpus": 1}), ("gpu", 1.0, {"num_gpus": 1}),
    ("cpu", 2.0, {}),  # a CPU slot leaves Ray's GPUs to others
    ("auto", 0.0, {}),  # a cluster without GPUs
    (None, 2.0, {}),  # not a training task (no slot)
])
def test_only_a_training_task_that_may_use_a_gpu_takes_one_on_a_cluster_with_gpus(
        slot: str | None, gpus: float, expected: dict[str, Any]) -> None:
    task = ToyTask() if slot is None else ToyRepoTrainingTask(slot=slot)
    assert gpu_options(task, gpus) == expected


def test_executors_and_fleets_take_the_same_gpu_rule() -> None:
    from reasearch.evaluators.registry import build_task
    from reasearch.fleets.fleet import member_ray_options

    for params in ({}, {"slot": "gpu"}, {"slot": "cpu"}):
        for gpus in (0.0, 1.0):
            task = build_task("nanogpt/v2", dict(params))
            assert member_ray_options("nanogpt/v2", params, gpus) == gpu_options(task, gpus)


def test_without_ray_installed_the_error_is_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(ConfigError, match=r"^RayExecutor needs Ray: pip install 'reasearch\[ray\]'$"):
        import_ray("RayExecutor")
    from reasearch.runs.executor import RayExecutor

    with pytest.raises(ConfigError, match="RayExecutor needs Ray"):
        RayExecutor()


@pytest.mark.ray
def test_a_ray_already_initialized_is_joined_and_left_running(local_ray: Any) -> None:
    conn = connect_ray("auto", num_cpus=1)  # neither an address nor num_cpus applies to a Ray joined as it is
    assert not conn.owned and conn.cluster_cpus() == 2 and conn.cluster_gpus() == 0
    assert conn.alive_nodes() == 2 and conn.alive_machines() == 1  # the session's cluster: a head and a node
    conn.close()
    assert local_ray.is_initialized()  # the caller's Ray: never shut down by an executor or fleet it served


def test_nodes_of_one_machine_count_as_one_machine() -> None:
    """Two nodes of a local test cluster share this machine's file system (a SQLite store serves them);
    nodes at two addresses are two machines; a dead node counts for nothing."""

    class FakeRay:
        def __init__(self, nodes: list[dict[str, object]]) -> None:
            self._nodes = nodes

        def nodes(self) -> list[dict[str, object]]:
            return self._nodes

    one = [{"Alive": True, "NodeManagerAddress": "10.0.0.5"}, {"Alive": True, "NodeManagerAddress": "10.0.0.5"}]
    two = [*one, {"Alive": True, "NodeManagerAddress": "10.0.0.6"}]
    dead = [*one, {"Alive": False, "NodeManagerAddress": "10.0.0.7"}]
    got = [RayConnection(FakeRay(n), owned=False) for n in (one, two, dead)]
    assert [c.alive_nodes() for c in got] == [2, 3, 2]
    assert [c.alive_machines() for c in got] == [1, 2, 1]


def test_the_cluster_is_asked_for_gpus_only_for_a_task_that_may_take_one() -> None:
    asked: list[int] = []

    def gpus() -> float:
        asked.append(1)
        return 2.0

    assert gpu_options(ToyTask(), gpus) == {} and asked == []  # a CPU task: never asked
    assert gpu_options(ToyRepoTrainingTask(slot="cpu"), gpus) == {} and asked == []
    assert gpu_options(ToyRepoTrainingTask(slot="gpu"), gpus) == {"num_gpus": 1} and asked == [1]
    assert gpu_options(ToyRepoTrainingTask(slot="auto"), lambda: 0.0) == {}  # no GPU in the cluster
