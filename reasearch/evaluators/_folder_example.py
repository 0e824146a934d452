"""The working example ``reasearch new-task NAME`` writes: a task folder that passes ``check_task``."""

from __future__ import annotations

from pathlib import Path

from reasearch.errors import ConfigError

__all__ = ["write_example_folder"]

_TOML = '''# A task folder (docs/your-own-task.md). `reasearch tasks {path} --params` lists the parameters.
id = "{name}/spread-v1"
description = "description.md"   # what the optimizer reads
seed = "seed.py"                 # the starting program
score = "score.py"               # score(returned, params), run on the trusted side
entry_point = "solve"            # the function a candidate defines
returns = "a list of n numbers in [0, 1]"
direction = "maximize"
time_limit_s = 10
memory_mb = 1024
best_known = 0.25                # for the default parameters: n points at i / (n - 1)
best_known_source = "n = 5: points at 0, 1/4, 1/2, 3/4, 1 (no gap can exceed 1 / (n - 1))"
seed_score = 0.1                 # what seed.py scores (check_task checks it)

[params.n]
type = "int"
default = 5
min = 2
max = 1000
help = "how many numbers solve() returns"
'''

_DESCRIPTION = '''# Spread n points on a segment

Place n points in the interval [0, 1] so that the smallest distance between two of them is as large as
possible. The score is that smallest distance (maximize).
'''

_SEED = '''def solve(n):
    """n points in [0, 1], 0.1 apart."""
    return [0.1 * i for i in range(n)]
'''

_SCORE = '''"""Scores what solve() returned. Runs on the trusted side, over the returned data only."""

import math


def score(returned, params):
    n = params["n"]
    if not isinstance(returned, list) or len(returned) != n:
        raise ValueError(f"solve() must return a list of {n} numbers")
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in returned):
        raise ValueError("every point must be a finite number")
    if min(returned) < 0 or max(returned) > 1:
        raise ValueError("every point must lie in [0, 1]")
    points = sorted(float(x) for x in returned)
    gaps = [b - a for a, b in zip(points, points[1:])]
    worst = min(gaps)
    return {"score": worst, "instances": gaps,
            "feedback": f"smallest gap {worst:.6g} between points {gaps.index(worst)} and {gaps.index(worst) + 1}"}
'''


def write_example_folder(path: str | Path) -> Path:
    """Writes the example task folder at ``path`` (a new folder; its last part names the task's namespace)."""
    out = Path(path)
    name = out.name.lower().replace("-", "_")
    if not name or not name.replace("_", "").isalnum() or not name.isascii():
        raise ConfigError(f"a task's name is letters, digits, '-' and '_' (it becomes the id's namespace), "
                          f"not {out.name!r}")
    if out.exists():
        raise ConfigError(f"{out} exists; give a new folder")
    if not out.parent.is_dir():
        raise ConfigError(f"the folder {out.parent} does not exist: create it first (mkdir -p {out.parent})")
    out.mkdir()
    files = {"task.toml": _TOML.format(name=name, path=out), "description.md": _DESCRIPTION, "seed.py": _SEED,
             "score.py": _SCORE}
    for file, text in files.items():
        (out / file).write_text(text, encoding="utf-8")
    return out
