"""Shared candidate programs for the adapter tests (circle packing n=26)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import reasearch
from reasearch.adapters._program import close_sandboxes

# A candidate that prints what a naive evaluator would parse as a perfect score, then returns nothing valid.
FAKE_SCORE = ('import json\nprint(json.dumps({"combined_score": 99.0, "score": 99.0, "correct": True}))\n'
              'def run():\n    print("combined_score: 99.0")\n    return {"centers": [], "radii": []}\n')
SLEEPS_FOREVER = "import time\ndef run():\n    while True:\n        time.sleep(1)\n"
TIME_LIMIT_S = 1.5  # the circle task's limit in these tests (the sleeping candidate waits it out)


@pytest.fixture(scope="session")
def circle_task() -> reasearch.Task:
    # a short limit keeps the sleeping candidate's tests quick (three of them wait for it); it is the task's own
    # parameter. 1.5 s: the seed and the other candidates end in well under a second even on a busy machine.
    return reasearch.make("circle_packing/n26-v1", time_limit_s=TIME_LIMIT_S)


@pytest.fixture()
def programs(tmp_path: Path, circle_task: reasearch.Task) -> dict[str, Path]:
    out = {}
    for name, text in {"seed": circle_task.seed_program(), "fake": FAKE_SCORE, "sleep": SLEEPS_FOREVER}.items():
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        out[name] = path
    return out


@pytest.fixture(autouse=True, scope="module")
def _close_adapter_sandboxes() -> Iterator[None]:
    """The adapters' own per-process pool closes with each module (the suite checks no child outlives it)."""
    yield
    close_sandboxes()
