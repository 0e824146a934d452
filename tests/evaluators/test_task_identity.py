"""Task identities are pinned: moving a family's parameters to a declaration (issue 42 item 5) changes no id,
version, ``spec.params``, spec hash or cache key.

``tests/data/task_identity.json`` was computed once from ``main`` before the move (``python -m
tests.evaluators.test_task_identity --write`` at 2d54822) and is checked in as data: a row here that differs
means a refactor changed what a stored run, a cache entry or a remote worker knows a task by.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from reasearch.evaluators import make
from reasearch.evaluators.registry import list_tasks
from reasearch.runs.cache import cache_key

PINS = Path(__file__).resolve().parents[1] / "data" / "task_identity.json"

# One non-default configuration per family (a value of each parameter the family's identity depends on).
NON_DEFAULT: dict[str, dict[str, Any]] = {
    "circle_packing": {"time_limit_s": 7, "memory_mb": 1024},
    "heilbronn": {"time_limit_s": 7.5, "memory_mb": 1024},
    "txn_scheduling": {"time_limit_s": 30, "num_seqs": 4, "memory_mb": 512, "score": "adrs"},
    "eplb": {"num_windows": 4, "window_size": 50, "score": "bal_gpu", "time_limit_s": 30},
    "atari": {"episodes": 3, "time_budget_s": 120},
    "rl": {"episodes": 3, "time_budget_s": 120},
    "img": {"time_budget_s": 30, "val_frac": 0.2},
    "nanogpt": {"time_budget_s": 120},
    "tabular": {"time_budget_s": 30, "max_submissions": 3},
    "prompt": {"n_train": 20, "temperature": 1, "timeout_s": 30},
    "gsm8k": {"n_train": 20, "timeout_s": 30, "answer": "last-number"},
}
ARC_SAMPLE = 6  # of the 1,122 ARC ids, the first few in sorted order (same class, same code path)
# ARC cases the sample misses: the set tasks (workers and progress left out of spec.params, data_dir recorded as
# given: their spec reads no data), and a task's split given vs None (spec.params record the split the data
# resolve); pinned from main at 15b309f, before ARC's parameters were declared.
ARC_EXTRA: list[tuple[str, dict[str, Any]]] = [
    ("arc_agi_2/eval-v1", {}),
    ("arc_agi_2/eval-v1", {"workers": 3}),
    ("arc_agi_2/eval-v1", {"workers": 1, "progress": False}),
    ("arc_agi_2/eval-v1", {"data_dir": "/nonexistent/arc-agi-2"}),
    ("arc_agi_2/training-v1", {}),
    ("arc_agi_2/training-v1", {"workers": 2, "data_dir": "relative/arc"}),
    ("arc_agi_2/00576224-v1", {"split": "training"}),
    ("arc_agi_2/0934a4d8-v1", {}),
    ("arc_agi_2/0934a4d8-v1", {"split": "evaluation"}),
]


def configurations() -> list[tuple[str, dict[str, Any]]]:
    ids = list_tasks(include_families=False)
    arc = [i for i in ids if i.startswith("arc_agi_2/")][:ARC_SAMPLE]
    chosen = [i for i in ids if not i.startswith("arc_agi_2/")] + arc
    out: list[tuple[str, dict[str, Any]]] = []
    for task_id in chosen:
        out.append((task_id, {}))
        family = task_id.split("/", 1)[0]
        if family in NON_DEFAULT:
            out.append((task_id, NON_DEFAULT[family]))
    return out + ARC_EXTRA


def identity(task_id: str, params: dict[str, Any]) -> dict[str, Any]:
    """What a task is known by: id, version, spec.params, the spec's hash and the cache key (evaluator hash fixed:
    it hashes the task's source files, so any edit of them changes it by design; runs/cache.py)."""
    task = make(task_id, **params)
    spec = task.spec
    task.evaluator_hash = lambda: "pinned"  # type: ignore[method-assign]
    return {"id": spec.id, "version": spec.version, "params": json.loads(json.dumps(dict(spec.params))),
            "spec_sha256": hashlib.sha256(spec.to_json().encode()).hexdigest(),
            "cache_key": cache_key(task, "0" * 64, 0)}


def _key(task_id: str, params: dict[str, Any]) -> str:
    return task_id + " " + json.dumps(params, sort_keys=True)


def test_pins_cover_every_registered_configuration() -> None:
    pinned = json.loads(PINS.read_text())
    assert sorted(pinned) == sorted(_key(t, p) for t, p in configurations())


@pytest.mark.parametrize(("task_id", "params"), configurations(), ids=lambda x: x if isinstance(x, str) else "")
def test_identity_is_unchanged(task_id: str, params: dict[str, Any]) -> None:
    pinned = json.loads(PINS.read_text())[_key(task_id, params)]
    assert identity(task_id, params) == pinned


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    PINS.write_text(json.dumps({_key(t, p): identity(t, p) for t, p in configurations()}, indent=1,
                               sort_keys=True) + "\n")
