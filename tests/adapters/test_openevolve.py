"""OpenEvolve's evaluator contract: scores equal `reasearch eval`'s, failures at 0.0, the exported file works."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

import reasearch
from reasearch.adapters.openevolve import evaluate_program, evaluator_source
from reasearch.cli import main as cli_main
from reasearch.errors import ConfigError
from tests.adapters.conftest import TIME_LIMIT_S

PARAMS = {"time_limit_s": TIME_LIMIT_S}
IN_CI = os.environ.get("CI", "").lower() == "true"


def _metrics(value: Any) -> tuple[dict[str, float], dict[str, Any]]:
    if isinstance(value, dict):
        return value, {}
    return value.metrics, value.artifacts


def test_scores_equal_the_tasks_and_failures_rank_below(circle_task: reasearch.Task, programs: dict[str, Path]) -> None:
    seed_metrics, _seed_art = _metrics(evaluate_program("circle_packing/n26-v1", programs["seed"], params=PARAMS))
    expected = circle_task.evaluate(programs["seed"].read_text(), seed=0)
    assert seed_metrics["score"] == expected.score
    assert seed_metrics["combined_score"] > 0.0
    fake, fake_art = _metrics(evaluate_program("circle_packing/n26-v1", programs["fake"], params=PARAMS))
    assert fake["combined_score"] == 0.0 and "score" not in fake  # the printed 99.0 is never read
    sleep, sleep_art = _metrics(evaluate_program("circle_packing/n26-v1", programs["sleep"], params=PARAMS))
    assert sleep["combined_score"] == 0.0 and "score" not in sleep
    if sleep_art:
        assert sleep_art["status"] == "TIMEOUT" and fake_art["status"] == "INVALID"


def test_missing_or_binary_program_file_is_a_failure(tmp_path: Path) -> None:
    (tmp_path / "bin.py").write_bytes(b"\xff\xfe\x00")
    for path in (tmp_path / "absent.py", tmp_path / "bin.py"):
        metrics, _ = _metrics(evaluate_program("circle_packing/n26-v1", path, params=PARAMS))
        assert metrics["combined_score"] == 0.0


def test_exported_evaluator_file_loads_and_evaluates(tmp_path: Path, programs: dict[str, Path],
                                                     circle_task: reasearch.Task) -> None:
    out = tmp_path / "evaluator.py"
    assert cli_main(["export-evaluator", "circle_packing/n26-v1", "--for", "openevolve", "-o", str(out),
                     "-p", f"time_limit_s={TIME_LIMIT_S}"]) == 0
    spec = importlib.util.spec_from_file_location("exported_evaluator", out)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    metrics, _ = _metrics(module.evaluate(str(programs["seed"])))
    assert metrics["score"] == circle_task.evaluate(programs["seed"].read_text(), seed=0).score


def test_unknown_or_non_program_task_is_a_clear_error() -> None:
    with pytest.raises(reasearch.errors.ReasearchError, match="circle_packing"):
        evaluator_source("circle_packin/n26-v1")
    for _ in range(2):  # asked twice: the refused task is not kept for the next call
        with pytest.raises(ConfigError, match="program task"):
            evaluator_source("gsm8k/v1")


def test_openevolve_loads_it_as_its_evaluator(tmp_path: Path, programs: dict[str, Path],
                                              circle_task: reasearch.Task) -> None:
    """OpenEvolve 0.4.0's own Evaluator class loads the exported file and records our score."""
    if importlib.util.find_spec("openevolve") is None:
        if IN_CI:
            pytest.fail("CI=true but openevolve is not installed: .ci/adapters.sh runs this file with it")
        pytest.skip("openevolve not installed (pip install 'reasearch[openevolve]')")
    import asyncio

    from openevolve.config import EvaluatorConfig
    from openevolve.evaluator import Evaluator

    out = tmp_path / "evaluator.py"
    out.write_text(evaluator_source("circle_packing/n26-v1", PARAMS))
    evaluator = Evaluator(EvaluatorConfig(cascade_evaluation=False, timeout=30), str(out))
    seed = asyncio.run(evaluator.evaluate_program(programs["seed"].read_text(), "p-seed"))
    fake = asyncio.run(evaluator.evaluate_program(programs["fake"].read_text(), "p-fake"))
    sleep = asyncio.run(evaluator.evaluate_program(programs["sleep"].read_text(), "p-sleep"))
    assert seed["score"] == circle_task.evaluate(programs["seed"].read_text(), seed=0).score
    assert fake["combined_score"] == 0.0 == sleep["combined_score"] < seed["combined_score"]
