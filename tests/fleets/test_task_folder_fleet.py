"""A fleet of a task folder on the session's one-node Ray cluster gives the local fleet's results (the member's
task is rebuilt from its stored spec in a Ray worker, whose working directory is not the driver's)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from reasearch.evaluators.folder import write_example_folder
from reasearch.fleets.compare import compare_spec
from reasearch.fleets.fleet import run_fleet

PACKAGE_TASK = "reasearch_example_tasks/sines-v1"


@pytest.mark.ray
def test_a_task_folder_fleet_gives_the_same_results_on_ray_as_locally(tmp_path: Path, local_ray: Any) -> None:
    folder = str(write_example_folder(tmp_path / "spread").resolve())
    spec = compare_spec([folder], ["best-of-n"], seeds=[0, 1], budget=3, model="demo")
    local = run_fleet(spec, store=str(tmp_path / "local"), run_dir=str(tmp_path / "local"), fleet_id="f")
    remote = run_fleet(spec, store=str(tmp_path / "ray"), run_dir=str(tmp_path / "ray"), fleet_id="f",
                       executor="ray")

    def per_run(report: Any) -> list[tuple[Any, ...]]:
        return sorted((m.member.seed, m.state, m.best_score, m.evaluations) for m in report.members)

    assert per_run(remote) == per_run(local)
    assert all(m.state == "finished" and m.best_score is not None for m in remote.members)


@pytest.mark.ray
def test_a_member_on_another_node_gets_the_folder_by_its_content_hash(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      example_task_package: Path) -> None:
    """A two-node cluster (head + a second raylet): the members are placed on the second node, and the folder
    leaves its path as soon as the driver has packed it, so a member can only run from the content it was sent.
    The installed example package's task runs in the same fleet (the nodes have the package on their path)."""
    from ray.cluster_utils import Cluster

    from reasearch.evaluators import folder as folder_module
    from reasearch.evaluators.registry import make
    from reasearch.fleets import fleet as fleet_module
    from reasearch.runs import open_store
    from tests.agent.agent_helpers import children, reap_orphans
    from tests.conftest import RAY_TEST_ENV, import_ray_or_skip

    ray = import_ray_or_skip()
    python_path = os.pathsep.join(p for p in (str(example_task_package), os.environ.get("PYTHONPATH", "")) if p)
    for key, value in {**RAY_TEST_ENV, "REASEARCH_TASK_CACHE": str(tmp_path / "node-cache"),
                       "PYTHONPATH": python_path}.items():
        monkeypatch.setenv(key, value)  # the nodes started below inherit them
    folder = write_example_folder(tmp_path / "spread").resolve()
    content_hash = make(str(folder)).spec.params["content_hash"]
    spec = compare_spec([str(folder), PACKAGE_TASK], ["best-of-n"], seeds=[0, 1], budget=3, model="demo")
    local = run_fleet(spec, store=str(tmp_path / "local"), run_dir=str(tmp_path / "local"), fleet_id="f")

    packed = folder_module.pack_folder

    def pack_then_remove(path: str) -> dict[str, Any]:
        bundle = packed(path)
        folder.rename(tmp_path / "gone")  # no node holds the folder at its path any more
        return bundle

    monkeypatch.setattr(folder_module, "pack_folder", pack_then_remove)
    monkeypatch.setattr(fleet_module, "member_ray_options", lambda *args: {"resources": {"second_node": 1}})
    known = set(children())
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=2, resources={"second_node": 2})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        remote = run_fleet(spec, store=str(tmp_path / "ray"), run_dir=str(tmp_path / "ray"), fleet_id="f",
                           executor="ray")
    finally:
        ray.shutdown()
        cluster.shutdown()
        reap_orphans(known)
    assert not folder.exists()

    def per_run(report: Any) -> list[tuple[Any, ...]]:
        return sorted((m.member.task_id, m.member.seed, m.state, m.best_score, m.evaluations)
                      for m in report.members)

    assert per_run(remote) == per_run(local), [m.reason for m in remote.members]
    assert len(remote.members) == 4
    assert all(m.state == "finished" and m.best_score is not None for m in remote.members)
    assert (tmp_path / "node-cache" / content_hash / "score.py").is_file()  # the node's copy, named by the hash
    for record in open_store(tmp_path / "ray").list_runs():
        if record.task_id == PACKAGE_TASK:
            continue
        assert record.task_spec is not None and record.task_spec.params["folder"] == str(folder)
        assert record.task_spec.params["content_hash"] == content_hash
