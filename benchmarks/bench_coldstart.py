"""Cold start: fresh processes, each timed from exec to exit (``reasearch bench --section coldstart``).

Run: ``pytest benchmarks/bench_coldstart.py --benchmark-group-by=group``. Groups:

* ``fresh process``: ``reasearch tasks`` vs ``python -c "import numpy"``;
* ``eval end to end``: ``reasearch eval circle_packing/n26-v1`` on the seed program (the pool
  started and closed in the process).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import reasearch
from reasearch._bench.coldstart import TASK_ID, _env


def _run(argv: list[str]) -> None:
    subprocess.run(argv, capture_output=True, env=_env(), check=True)


@pytest.mark.parametrize("impl", ["reasearch_tasks", "import_numpy"])
def test_fresh_process(benchmark, impl):
    benchmark.group = "fresh process"
    argv = ([sys.executable, "-m", "reasearch.cli", "tasks"] if impl == "reasearch_tasks"
            else [sys.executable, "-c", "import numpy"])
    benchmark.pedantic(_run, args=(argv,), rounds=5, iterations=1, warmup_rounds=1)


def test_eval_end_to_end(benchmark, tmp_path: Path):
    seed = tmp_path / "seed.py"
    seed.write_text(reasearch.make(TASK_ID).seed_program())  # type: ignore[attr-defined]
    benchmark.group = "eval end to end"
    benchmark.pedantic(_run, args=([sys.executable, "-m", "reasearch.cli", "eval", TASK_ID, str(seed)],),
                       rounds=5, iterations=1, warmup_rounds=1)
