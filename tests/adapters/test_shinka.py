"""ShinkaEvolve's evaluate.py contract: run as its scheduler runs it, the files say what `reasearch eval` says.

With shinka-evolve installed (its own environment: .ci/adapters.sh), ShinkaEvolve's own JobScheduler runs
the exported evaluate.py and its own loader reads the files; otherwise the same command line is run here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import reasearch
from reasearch.adapters.shinka import evaluator_source
from tests.adapters.conftest import TIME_LIMIT_S

ROOT = Path(__file__).resolve().parents[2]
HAVE_SHINKA = importlib.util.find_spec("shinka") is not None


def _run(evaluate_py: Path, program: Path, results: Path) -> dict[str, Any]:
    if not HAVE_SHINKA and os.environ.get("REASEARCH_ADAPTER_PEER") == "shinka":
        pytest.fail("REASEARCH_ADAPTER_PEER=shinka (.ci/adapters.sh) but shinka-evolve is not importable here")
    if HAVE_SHINKA:  # ShinkaEvolve's own scheduler and loader
        from shinka.launch.scheduler import JobScheduler, LocalJobConfig

        scheduler = JobScheduler(job_type="local", config=LocalJobConfig(eval_program_path=str(evaluate_py)),
                                 verbose=False)
        loaded, _ = scheduler.run(str(program), str(results))
        return loaded
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, str(evaluate_py), "--program_path", str(program), "--results_dir", str(results)],
                   check=True, env=env, capture_output=True, timeout=120)
    return {"correct": json.loads((results / "correct.json").read_text()),
            "metrics": json.loads((results / "metrics.json").read_text())}


def test_evaluate_py_writes_shinkas_files(tmp_path: Path, programs: dict[str, Path],
                                           circle_task: reasearch.Task) -> None:
    evaluate_py = tmp_path / "evaluate.py"
    evaluate_py.write_text(evaluator_source("circle_packing/n26-v1", {"time_limit_s": TIME_LIMIT_S}))
    seed = _run(evaluate_py, programs["seed"], tmp_path / "r-seed")
    expected = circle_task.evaluate(programs["seed"].read_text(), seed=0)
    assert seed["correct"]["correct"] is True
    assert seed["metrics"]["public"]["score"] == expected.score
    fake = _run(evaluate_py, programs["fake"], tmp_path / "r-fake")
    sleep = _run(evaluate_py, programs["sleep"], tmp_path / "r-sleep")
    for failed, status in ((fake, "INVALID"), (sleep, "TIMEOUT")):
        assert failed["correct"]["correct"] is False and failed["correct"]["error"].startswith(status)
        assert "score" not in failed["metrics"]["public"]  # the printed 99.0 is never read
        assert failed["metrics"]["combined_score"] == 0.0 < seed["metrics"]["combined_score"]

