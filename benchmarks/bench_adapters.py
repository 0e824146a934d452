"""Per-candidate evaluation time of circle packing n=26 through each adapter, beside the peers' own way.

Run: ``pytest benchmarks/bench_adapters.py --benchmark-group-by=group``. Group ``adapter_eval``, one
candidate (the task's seed program, as a file) per round:

- ``subprocess_example``: what the packages' circle-packing examples do: a fresh Python process per
  candidate imports the program, calls it and hands back the packing, which the parent checks with
  NumPy (written here from that description; no sandbox, no kill of a process tree).
- ``openevolve_adapter``: ``reasearch.adapters.openevolve.evaluate_program`` (warm sandbox pool, trusted
  LP check), as OpenEvolve calls its evaluator in-process.
- ``shinka_adapter``: ``python evaluate.py --program_path P --results_dir D`` as ShinkaEvolve's scheduler
  runs it: a fresh interpreter per candidate, so it pays reasearch's import and a pool start each time.

GEPA's adapter scores prompts (student calls), not programs: it has no circle-packing figure.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import reasearch
from reasearch.adapters._program import close_sandboxes
from reasearch.adapters.openevolve import evaluate_program
from reasearch.adapters.shinka import evaluator_source

ROOT = Path(__file__).resolve().parents[1]
TASK = "circle_packing/n26-v1"
_CALL = ("import importlib.util, json, sys\n"
         "spec = importlib.util.spec_from_file_location('candidate', sys.argv[1])\n"
         "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)\n"
         "c, r = mod.run()\n"
         "print(json.dumps({'centers': [list(map(float, x)) for x in c], 'radii': [float(x) for x in r]}))\n")


def _subprocess_example(program: Path) -> float:
    out = subprocess.run([sys.executable, "-c", _CALL, str(program)], capture_output=True, text=True, timeout=60,
                         check=True)
    data = json.loads(out.stdout.strip().splitlines()[-1])
    c, r = np.asarray(data["centers"]), np.asarray(data["radii"])
    inside = np.all(c - r[:, None] >= 0) and np.all(c + r[:, None] <= 1)
    d = np.linalg.norm(c[:, None] - c[None], axis=-1) + np.eye(len(r)) * 1e9
    assert inside and np.all(d >= r[:, None] + r[None])
    return float(r.sum())


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cp") / "program.py"
    path.write_text(reasearch.make(TASK).seed_program())
    yield path
    close_sandboxes()


@pytest.mark.parametrize("how", ["subprocess_example", "openevolve_adapter", "shinka_adapter"])
def test_adapter_eval(benchmark, how: str, program: Path, tmp_path: Path) -> None:
    benchmark.group = "adapter_eval"
    expected = reasearch.make(TASK).evaluate(program.read_text(), seed=0).score
    if how == "subprocess_example":
        score = benchmark.pedantic(_subprocess_example, args=(program,), rounds=10, iterations=1, warmup_rounds=1)
        assert score == pytest.approx(expected)
    elif how == "openevolve_adapter":
        metrics = benchmark.pedantic(lambda: evaluate_program(TASK, program), rounds=30, iterations=1, warmup_rounds=1)
        assert (metrics if isinstance(metrics, dict) else metrics.metrics)["score"] == expected
    else:
        evaluate_py = tmp_path / "evaluate.py"
        evaluate_py.write_text(evaluator_source(TASK))
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        n = itertools.count()

        def one() -> None:
            subprocess.run([sys.executable, str(evaluate_py), "--program_path", str(program),
                            "--results_dir", str(tmp_path / f"r{next(n)}")], check=True, env=env, capture_output=True,
                           timeout=120)

        benchmark.pedantic(one, rounds=3, iterations=1, warmup_rounds=0)
        assert json.loads((tmp_path / "r0" / "metrics.json").read_text())["public"]["score"] == expected
