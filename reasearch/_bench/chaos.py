"""The chaos soak's figures: runs, evaluations, model calls, faults injected by kind, resumes, violations.

``--quick`` runs the short soak (the one in the test suite); a full run the long soak (issue 40's figure:
at least 10,000 evaluations and 200 kills with no violation on a 2-core machine). The seed is
``$REASEARCH_CHAOS_SEED`` (default 1), printed with the schedule's first lines in the notes; a soak's
schedule is a function of its seed (:mod:`reasearch._chaos.soak`). Violations are listed one per row.

Trust boundary: the project's own drivers against a local fake endpoint; candidates run in sandboxes.
"""

from __future__ import annotations

import os
import sys
import tempfile

from reasearch._bench import BenchRow
from reasearch.errors import ConfigError

__all__ = ["LONG", "LONG_DRIVERS", "SHORT", "run"]

SHORT = {"runs": 3, "evaluations": 7, "kills": 2, "faults": 3}
# 130 runs: with every driver drawn a run averages under its cap (a prompt run, best-of-n on gsm8k, ends after ~5
# evaluations; cached ones do not count): seed 1 gave 9,875 evaluations from 115 runs, short of issue 40's 10,000.
LONG = {"runs": 130, "evaluations": 100, "kills": 2, "faults": 6}
# The long soak also drives a `compare`, a fleet, an MCP session, a prompt task and a training task (issue 40 item 1).
LONG_DRIVERS = ("best-of-n", "evolve", "reflect", "agent", "compare", "fleet", "mcp", "prompt", "training")


def _seed() -> int:
    raw = os.environ.get("REASEARCH_CHAOS_SEED", "1")
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"REASEARCH_CHAOS_SEED must be an integer, not {raw!r}") from None


def _stderr(line: str) -> None:  # the schedule first, then one line per run as it ends: a long soak is not silent
    print(line, file=sys.stderr, flush=True)


def run(quick: bool) -> list[BenchRow]:
    from reasearch._chaos import soak
    from reasearch._chaos.soak import METHODS

    seed, preset = _seed(), SHORT if quick else LONG
    with tempfile.TemporaryDirectory(prefix="reasearch-bench-chaos-") as tmp:
        report = soak(seed, runs=preset["runs"], evaluations=preset["evaluations"], kills=preset["kills"],
                      faults=preset["faults"], parallel=2, mode="process", root=tmp, echo=_stderr,
                      methods=METHODS if quick else LONG_DRIVERS)
    what = (f"seed {seed}, {preset['runs']} runs x {preset['evaluations']}-evaluation caps, {preset['kills']} "
            f"driver kills and {preset['faults']} other faults drawn per run, 2 at once, process sandbox"
            + ("" if quick else f", drivers {','.join(LONG_DRIVERS)}"))
    kills = report.faults.get("kill_driver", 0) + report.faults.get("kill_worker", 0)
    long_goal = not quick
    rows = [
        BenchRow("chaos", "runs finished", report.finished, "runs", goal=f"= {report.runs}",
                 met=report.finished == report.runs, note=what),
        BenchRow("chaos", "evaluations", report.evaluations, "evaluations",
                 goal=">= 10000" if long_goal else "", met=report.evaluations >= 10_000 if long_goal else None),
        *[BenchRow("chaos", f"evaluations: {k}", v, "evaluations") for k, v in sorted(report.by_driver.items())],
        BenchRow("chaos", "model calls", report.model_calls, "calls"),
        BenchRow("chaos", "kills (-9 of drivers and sandbox workers)", kills, "kills",
                 goal=">= 200" if long_goal else "", met=kills >= 200 if long_goal else None),
        BenchRow("chaos", "faults injected", sum(report.faults.values()), "faults",
                 note=", ".join(f"{k} {v}" for k, v in sorted(report.faults.items()))),
        *[BenchRow("chaos", f"faults: {k}", v, "faults") for k, v in sorted(report.faults.items())],
        BenchRow("chaos", "resumes", report.resumes, "resumes"),
        BenchRow("chaos", "soak wall time", report.wall_s, "s"),
        BenchRow("chaos", "invariant violations", len(report.violations), "violations", goal="0",
                 met=not report.violations,
                 note="; ".join(str(v) for v in report.violations[:10]) or "every check held"),
    ]
    return rows
