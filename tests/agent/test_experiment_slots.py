"""The experiment runner waits on the slots of the kind the task's ``slot`` parameter names (read from the
task's declared parameters, not probed: a probe that misses reads ``auto`` silently)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from reasearch.agent.tools import experiment_runner
from reasearch.agent.tools.experiment_runner import ExperimentRunner
from reasearch.evaluators.testing import ToyRepoTrainingTask, ToyTask


@pytest.mark.parametrize(("task", "kind"), [(ToyRepoTrainingTask(slot="cpu"), "cpu"),
                                            (ToyRepoTrainingTask(slot="gpu"), "gpu"),
                                            (ToyRepoTrainingTask(), "auto"), (ToyTask(), "auto")])
def test_the_slot_kind_waited_on_is_the_tasks(task: Any, kind: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    monkeypatch.setattr(experiment_runner, "_slot_count", lambda k: asked.append(k) or 1)
    ctx: Any = SimpleNamespace(task=task, run=SimpleNamespace(executor=None))
    assert ExperimentRunner(ctx, tmp_path).wait_for_a_slot() >= 0.0  # nothing running: no wait
    assert asked == [kind]
