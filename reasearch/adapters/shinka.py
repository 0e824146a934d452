"""ShinkaEvolve's ``evaluate.py`` contract for any registered program task.

ShinkaEvolve (0.0.7) runs ``python evaluate.py --program_path P --results_dir D`` per candidate and reads
``D/correct.json`` (``{"correct": bool, "error": str|None}``) and ``D/metrics.json`` (``combined_score``,
``public``, ``private``, ``text_feedback``); it ranks correct programs by ``combined_score``. Here a
program is correct only when the task's status is OK, ``combined_score`` is
:func:`~reasearch.adapters.result_rank`, and the raw score is ``public["score"]``.

Trust boundary: the program is untrusted and runs only in the task's sandbox; what it prints never
reaches these files (they are written here from the trusted ``EvalResult``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from reasearch.adapters._program import evaluate_file, numeric_metrics, pin_of, task_for
from reasearch.adapters._rank import result_rank
from reasearch.errors import ReasearchError
from reasearch.evaluators.result import EvalResult
from reasearch.evaluators.spec import TaskSpec

__all__ = ["evaluator_source", "main", "shinka_files", "write_results"]


def shinka_files(result: EvalResult, spec: TaskSpec) -> tuple[dict[str, Any], dict[str, Any]]:
    """(correct.json, metrics.json) contents of one result."""
    public: dict[str, Any] = {"status": str(result.status.value), "wall_s": float(result.wall_s)}
    if result.ok and result.score is not None:
        public["score"] = float(result.score)
    metrics = {"combined_score": result_rank(result, spec), "public": public, "private": numeric_metrics(result),
               "text_feedback": result.feedback}
    correct = {"correct": bool(result.ok), "error": None if result.ok else f"{result.status.value}: {result.feedback}"}
    return correct, metrics


def write_results(result: EvalResult, spec: TaskSpec, results_dir: str | Path) -> None:
    """Writes ``correct.json`` and ``metrics.json`` into ``results_dir`` (each replaced atomically)."""
    folder = Path(results_dir)
    folder.mkdir(parents=True, exist_ok=True)
    correct, metrics = shinka_files(result, spec)
    for name, data in (("metrics.json", metrics), ("correct.json", correct)):
        tmp = folder / f".{name}.tmp"
        tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
        os.replace(tmp, folder / name)


def main(task_id: str, argv: Sequence[str] | None = None, *, params: Mapping[str, Any] | None = None,
         seed: int | None = 0, pin: Mapping[str, Any] | None = None) -> int:
    """``evaluate.py``'s entry: parses ShinkaEvolve's flags, evaluates, writes both files (the verdict is in them)."""
    parser = argparse.ArgumentParser(description=f"ShinkaEvolve evaluator for {task_id} (reasearch sandbox)")
    parser.add_argument("--program_path", required=True)
    parser.add_argument("--results_dir", required=True)
    args = parser.parse_args(argv)
    try:
        task = task_for(task_id, params, pin)
    except ReasearchError as exc:  # a bad task id or parameter (e.g. a non-finite limit): one line, exit 2
        print(f"evaluate.py: error: {exc}", file=sys.stderr)
        return 2
    result = evaluate_file(task, args.program_path, seed=seed)
    write_results(result, task.spec, args.results_dir)
    return 0


_TEMPLATE = '''"""ShinkaEvolve evaluate.py for {task_id}, written by `reasearch export-evaluator`.

Run as: python evaluate.py --program_path main.py --results_dir results/
Every program runs in reasearch's sandbox; correct.json is true only for an OK result.
"""

import sys

from reasearch.adapters.shinka import main

if __name__ == "__main__":
    # PIN: a task folder's content hash and file hashes; a folder changed since the export is refused
    sys.exit(main({task_id!r}, params={params!r}, seed={seed!r}, pin={pin!r}))
'''


def evaluator_source(task_id: str, params: Mapping[str, Any] | None = None, *, seed: int | None = 0) -> str:
    """The text of an ``evaluate.py`` ShinkaEvolve runs for ``task_id`` (the task is checked to exist)."""
    task = task_for(task_id, params)
    return _TEMPLATE.format(task_id=task_id, params=dict(params or {}), seed=seed, pin=pin_of(task))
