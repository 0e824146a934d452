"""A fleet of a task folder on the session's Ray cluster gives the local fleet's results (the member's
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
                                                                      example_task_package: Path,
                                                                      ray_node: Any) -> None:
    """The session's two-node cluster (a head that takes no work, a second raylet): the members run on the
    second node, and the folder leaves its path as soon as the driver has packed it, so a member can only run from
    the content it was sent. The installed example package's task runs in the same fleet (the job's workers have
    the package on their path)."""
    from reasearch.evaluators import folder as folder_module
    from reasearch.evaluators.registry import make
    from reasearch.runs import open_store
    from tests.conftest import ray_driver

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
    # the driver reads its members' results through the cache (one machine: the node's), the job's workers get it
    monkeypatch.setenv("REASEARCH_TASK_CACHE", str(tmp_path / "node-cache"))
    job_env = {"REASEARCH_TASK_CACHE": str(tmp_path / "node-cache"),
               "PYTHONPATH": os.pathsep.join((str(example_task_package), "${PYTHONPATH}"))}
    with ray_driver(ray_node, job_env) as ray:
        second = {n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU")}
        driver_node = ray.get_runtime_context().get_node_id()
        remote = run_fleet(spec, store=str(tmp_path / "ray"), run_dir=str(tmp_path / "ray"), fleet_id="f",
                           executor="ray")
    assert len(second) == 1 and driver_node not in second  # one node takes work, and it is not the driver's
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
