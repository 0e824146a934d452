"""The MCP server on a task folder: a run started with the folder's path evaluates in the sandbox, scores with
the folder's score.py and stores the folder's id and content hash; the stateless service takes the path too."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reasearch.agent.mcp import EvaluatorsService, EvaluatorTools, start_mcp_run
from reasearch.evaluators import make
from reasearch.evaluators.folder import write_example_folder
from reasearch.runs import open_store
from tests.agent.mcp_helpers import fresh_dir

pytestmark = pytest.mark.timeout(600)


@pytest.fixture()
def run_dir() -> Iterator[Path]:
    yield from fresh_dir()


def test_an_mcp_run_on_a_task_folder(run_dir: Path, tmp_path: Path) -> None:
    folder = write_example_folder(tmp_path / "spread")
    driver = start_mcp_run(str(folder), store=open_store(run_dir), run_dir=run_dir, budget={"evaluations": 2})
    seed = driver.call("evaluate", {})
    better = driver.call("evaluate", {"code": "def solve(n):\n    return [i / (n - 1) for i in range(n)]\n"})
    assert not seed.is_error and seed.data["evaluation"]["score"] == pytest.approx(0.1)
    assert not better.is_error and better.data["evaluation"]["score"] == pytest.approx(0.25)
    (record,) = open_store(run_dir).list_runs()
    assert record.task_id == "spread/spread-v1" and record.task_spec is not None
    assert record.task_spec.params["content_hash"] == make(str(folder)).spec.params["content_hash"]
    service = EvaluatorsService(EvaluatorTools(max_evaluations=1))
    out = service.call("evaluate", {"task_id": str(folder), "code": "def solve(n):\n    return [0.5] * n\n"})
    assert not out.is_error and out.data["status"] == "OK" and out.data["score"] == 0.0, out.data
