"""RayExecutor on the session's two-node cluster, whose head takes no work: a task folder's evaluations run on
the second node, which gets the folder's content with the spec (the task's shipment, by content hash) and never
its path: the folder is gone from its path as soon as the driver has packed it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reasearch.evaluators import folder as folder_module
from reasearch.evaluators.folder import write_example_folder
from reasearch.evaluators.registry import make
from reasearch.runs.executor import EvalRequest, RayExecutor
from tests.conftest import RayNode, ray_driver

EVEN = "def solve(n):\n    return [i / (n - 1) for i in range(n)]\n"


@pytest.mark.ray
def test_ray_executor_ships_a_task_folder_to_a_node_without_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                ray_node: RayNode) -> None:
    """On the session's cluster, whose head takes no work: every evaluation runs on its other node."""
    folder = write_example_folder(tmp_path / "spread").resolve()
    task = make(str(folder))
    packed = folder_module.pack_folder

    def pack_then_remove(path: str) -> dict[str, Any]:
        bundle = packed(path)
        folder.rename(tmp_path / "gone")  # no node holds the folder at its path any more
        return bundle

    monkeypatch.setattr(folder_module, "pack_folder", pack_then_remove)
    with ray_driver(ray_node, {"REASEARCH_TASK_CACHE": str(tmp_path / "node-cache")}):  # the job's workers' cache
        executor = RayExecutor(address=ray_node.address)
        try:
            chunked = executor.submit_all([EvalRequest(task.spec, EVEN), EvalRequest(task.spec, task.seed_program())])
            results = [f.result(timeout=300) for f in chunked]
            results.append(executor.submit(EvalRequest(task.spec, EVEN, seed=1)).result(timeout=300))
        finally:
            executor.close()
    assert not folder.exists()
    assert [r.score for r in results] == [pytest.approx(0.25), pytest.approx(0.1), pytest.approx(0.25)], \
        [r.feedback for r in results]
    for r in results:
        assert r.provenance is not None and r.provenance.params["folder"] == str(folder)
        assert r.provenance.params["content_hash"] == task.spec.params["content_hash"]
    assert (tmp_path / "node-cache" / task.spec.params["content_hash"] / "score.py").is_file()
