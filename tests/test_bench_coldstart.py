"""The bench helpers behind the cold-start, ARC DSL and min-area rows measure what their rows say."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import reasearch
from reasearch._bench import arc, coldstart, geometry


def test_fresh_runs_time_a_new_process_and_its_cpu() -> None:
    wall, cpu = coldstart.fresh_runs([sys.executable, "-c", "x = sum(range(3_000_000))"], runs=1)
    assert wall > 0 and cpu > 0.01  # the child's CPU is in the kernel's account of reaped children
    with pytest.raises(RuntimeError, match="exited 3"):
        coldstart.fresh_runs([sys.executable, "-c", "raise SystemExit(3)"], runs=1)


def test_first_evaluate_is_timed_in_a_fresh_process(tmp_path: Path) -> None:
    seed = tmp_path / "seed.py"
    seed.write_text(reasearch.make(coldstart.TASK_ID).seed_program())  # type: ignore[attr-defined]
    assert coldstart.first_evaluate(str(seed), runs=1) > 0
    bad = tmp_path / "bad.py"
    bad.write_text("def run():\n    raise ValueError('no')\n")
    with pytest.raises(RuntimeError, match="did not score"):
        coldstart.first_evaluate(str(bad), runs=1)


def test_the_dsl_candidate_is_solver_sized_distinct_per_tag_and_runs() -> None:
    a, b = arc.dsl_candidate(tag="a"), arc.dsl_candidate(tag="b")
    assert 34_000 <= len(a) <= 36_500 and a != b and len(arc.dsl_candidate(1_000)) < 1_500
    ns: dict[str, object] = {}
    exec(compile(a, "candidate.py", "exec"), ns)
    grid = [[1, 2, 3], [4, 5, 6]]
    assert ns["transform_grid_attempt_2"](grid) == grid  # type: ignore[operator]
    assert len(ns["transform_grid_attempt_1"](grid)) == 2  # type: ignore[operator, arg-type]


def test_the_in_process_reference_compiles_and_runs_per_task() -> None:
    from reasearch.evaluators.arc_agi_2 import ArcSetTask

    tasks = ArcSetTask("evaluation", progress=False).tasks()[:2]
    assert arc._in_process_set(tasks, arc.dsl_candidate()) > 0


def test_the_jitted_min_area_figure_calls_the_kernel_on_distinct_inputs() -> None:
    us = geometry._jitted_per_call_us(np.random.default_rng(0), 15, 1)
    assert 0 < us < 1_000
