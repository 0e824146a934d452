"""A fleet of a task folder on the session's one-node Ray cluster gives the local fleet's results (the member's
task is rebuilt from its stored spec in a Ray worker, whose working directory is not the driver's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reasearch.evaluators.folder import write_example_folder
from reasearch.fleets.compare import compare_spec
from reasearch.fleets.fleet import run_fleet


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
