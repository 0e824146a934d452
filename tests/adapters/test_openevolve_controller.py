"""OpenEvolve 0.4.0's own controller on circle packing, its model a local scripted OpenAI-compatible server.

The scripted model proposes three edits of the seed (diff format, OpenEvolve's default): one that sleeps
forever, one that prints a fake score and returns nothing valid, one valid variant. The run goes on past
the sleeping one (killed at the task's 3 s limit), and every program OpenEvolve recorded carries the score
`reasearch eval` gives it; the two broken ones rank 0.0, below every valid one.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import reasearch
from reasearch.adapters.openevolve import evaluator_source
from reasearch.models.messages import ModelReply
from reasearch.models.testing import FakeOpenAIServer, say

IN_CI = os.environ.get("CI", "").lower() == "true"
SEED_LINE = "    radius = 0.5 * step * (1.0 - 1e-9)"
EDITS = [
    SEED_LINE + "\n    import time\n    while True:\n        time.sleep(1)",
    SEED_LINE + "\n    print('{\"combined_score\": 99.0}')\n    return [], []",
    "    radius = 0.45 * step",
]


def _diff(replacement: str) -> str:
    return f"Edit:\n<<<<<<< SEARCH\n{SEED_LINE}\n=======\n{replacement}\n>>>>>>> REPLACE\n"


@pytest.fixture()
def scripted_model() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """An OpenAI-compatible server proposing ``EDITS`` in turn; yields its URL and the request bodies it got."""
    asked: list[dict[str, Any]] = []

    def answer(body: dict[str, Any]) -> ModelReply:  # called under the server's lock
        asked.append(body)
        return say(_diff(EDITS[(len(asked) - 1) % len(EDITS)]))

    with FakeOpenAIServer(answer) as server:
        yield server.url, asked


def test_openevolve_run_records_reasearch_scores(tmp_path: Path, scripted_model: tuple[str, list[dict[str, Any]]],
                                                  circle_task: reasearch.Task) -> None:
    if importlib.util.find_spec("openevolve") is None:
        if IN_CI:
            pytest.fail("CI=true but openevolve is not installed (it is in the test extra)")
        pytest.skip("openevolve not installed (pip install 'reasearch[openevolve]')")
    from openevolve import run_evolution

    url, asked = scripted_model
    evaluator = tmp_path / "evaluator.py"
    evaluator.write_text(evaluator_source("circle_packing/n26-v1", {"time_limit_s": 3.0}))
    seed = tmp_path / "initial_program.py"
    seed.write_text(circle_task.seed_program())
    config = tmp_path / "config.yaml"  # OpenEvolve's defaults, but for the model and a 3-iteration run
    config.write_text(
        f"max_iterations: 3\ncheckpoint_interval: 1\nrandom_seed: 0\nllm:\n  api_base: {url}\n  api_key: unused\n"
        "  models:\n    - name: scripted\n      weight: 1.0\n"
    )
    result = run_evolution(
        str(seed), str(evaluator), config=str(config), output_dir=str(tmp_path / "out"), cleanup=False
    )
    assert len(asked) >= 3
    programs = [json.loads(p.read_text()) for p in (tmp_path / "out").rglob("programs/*.json")]
    by_code = {p["code"]: p["metrics"] for p in programs}
    assert len(by_code) == 4, sorted(by_code)  # the seed and the three edits, none lost to the sleeper
    valid = []
    for code, metrics in by_code.items():
        expected = circle_task.evaluate(code, seed=0)
        if expected.ok:
            assert metrics["score"] == expected.score
            valid.append(metrics["combined_score"])
        else:
            assert "score" not in metrics and metrics["combined_score"] == 0.0
    assert len(valid) == 2 and min(valid) > 0.0
    assert result.best_score == max(valid)
