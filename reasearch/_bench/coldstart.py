"""``reasearch bench`` section ``coldstart``: time to the first result, each figure a fresh process.

What a person trying the CLI, a script that evaluates once, a CI job or a new Ray worker pays before
anything is warm. Each figure is the median of several fresh processes (interpreter start included),
side by side with what a fresh interpreter pays at the least:

* ``reasearch tasks`` (the registry listed) vs ``python -c "import numpy"``;
* ``reasearch eval circle_packing/n26-v1 seed.py``, end to end (a table printed, the pool closed);
* the first ``Task.evaluate`` of that seed in a fresh process (timed inside it, around the call: the
  pool's start included) vs a fresh jailed interpreter importing NumPy (nsjail, no engine).

The children run this interpreter on the same ``sys.path`` (``PYTHONPATH`` is passed on), so they
measure the code that the bench itself imports.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from reasearch._bench import BenchRow, fresh_processes, median

__all__ = ["run"]

SECTION = "coldstart"
TASK_ID = "circle_packing/n26-v1"
_FIRST_EVALUATE = (
    "import json, sys, time\n"
    "import reasearch\n"
    "task = reasearch.make(sys.argv[1])\n"
    "source = open(sys.argv[2]).read()\n"
    "t0 = time.perf_counter()\n"
    "result = task.evaluate(source)\n"
    "print(json.dumps({'s': time.perf_counter() - t0, 'status': str(result.status)}))\n"
)


def _env() -> dict[str, str]:
    import reasearch

    env = dict(os.environ)
    here = str(Path(reasearch.__file__).resolve().parents[1])  # the code this bench imports, first
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH", "")) if p)
    return env


def fresh_runs(argv: Sequence[str], *, runs: int, env: dict[str, str] | None = None) -> tuple[float, float]:
    """Median wall seconds and median CPU seconds (the whole process tree's, from the kernel's
    accounting of reaped children) of ``runs`` fresh processes of ``argv``; each must exit 0."""
    procs = fresh_processes(argv, runs=runs, env=env or _env())
    for proc in procs:
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:4])} ... exited {proc.returncode}: {proc.stderr[-400:]}")
    return median([p.wall_s for p in procs]), median([p.cpu_s for p in procs])


def first_evaluate(seed_file: str, *, runs: int, env: dict[str, str] | None = None) -> float:
    """Median seconds of a fresh process's first ``Task.evaluate`` (timed inside it)."""
    out = []
    for proc in fresh_processes([sys.executable, "-c", _FIRST_EVALUATE, TASK_ID, seed_file], runs=runs,
                                env=env or _env()):
        try:
            got = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            raise RuntimeError(f"first-evaluate child failed ({proc.returncode}): {proc.stderr[-400:]}") from None
        if got["status"] != "OK":
            raise RuntimeError(f"the seed did not score in a fresh process: {got}")
        out.append(float(got["s"]))
    return median(out)


def _jailed_numpy(runs: int) -> float | None:
    """Median wall of a fresh jailed interpreter importing NumPy (None where nsjail cannot run)."""
    from reasearch.engine import build_runtime, nsjail_argv, nsjail_problem

    if nsjail_problem() is not None:
        return None
    runtime = build_runtime()
    argv = nsjail_argv([runtime.python, "-c", "import numpy"], runtime=runtime, time_limit_s=30)
    return fresh_runs(argv, runs=runs)[0]


def run(quick: bool) -> list[BenchRow]:
    """Each figure the median of ``3`` (quick) or ``5`` fresh processes."""
    import reasearch

    runs = 3 if quick else 5
    cli = [sys.executable, "-m", "reasearch.cli"]
    with tempfile.TemporaryDirectory(prefix="reasearch-bench-cold-") as tmp:
        seed = Path(tmp) / "seed.py"
        seed.write_text(reasearch.make(TASK_ID).seed_program())
        numpy_s, _ = fresh_runs([sys.executable, "-c", "import numpy"], runs=runs)
        jail_s = _jailed_numpy(runs)
        fresh_runs(cli + ["eval", TASK_ID, str(seed)], runs=1)  # mirrors, code copy, .pyc files in place
        tasks_s, tasks_cpu = fresh_runs(cli + ["tasks"], runs=runs)
        eval_s, eval_cpu = fresh_runs(cli + ["eval", TASK_ID, str(seed)], runs=runs)
        first_s = first_evaluate(str(seed), runs=runs)
    nan = float("nan")
    jail_ref = jail_s if jail_s is not None else nan
    jail_note = "" if jail_s is not None else "nsjail cannot run here: no jailed reference"
    numpy_ref = 'python -c "import numpy"'
    return [
        _seconds_row("`reasearch tasks`, fresh process", tasks_s, numpy_ref, numpy_s, 0.3,
                     f"median of {runs} processes; CPU {tasks_cpu:.3f} s (median)"),
        _seconds_row(f"`reasearch eval {TASK_ID}` seed, end to end", eval_s, numpy_ref, numpy_s, 0.5,
                     f"median of {runs} processes, pool started and closed; CPU {eval_cpu:.3f} s (median, "
                     "jails included)"),
        _seconds_row("first Task.evaluate in a fresh process (seed)", first_s, "fresh jailed interpreter + NumPy",
                     jail_ref, 0.3,
                     (f"median of {runs} processes, timed around the call (pool start included) " + jail_note).strip()),
    ]


def _seconds_row(name: str, value: float, reference: str, reference_value: float, goal_s: float,
                 note: str) -> BenchRow:
    """A row in seconds against a reference in seconds, with its goal ``<= goal_s``."""
    return BenchRow(SECTION, name, value, "s", reference=reference, reference_value=reference_value,
                    ratio=reference_value / value, goal=f"<= {goal_s:g} s", met=value <= goal_s, note=note)
