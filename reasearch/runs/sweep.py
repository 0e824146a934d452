"""A small real driver that needs no model: evaluate the seed program, then a list of candidates.

``run_candidates(run, sources)`` evaluates the task's seed program as step 0 and ``sources[i]`` as
step ``i + 1``, through :meth:`Run.evaluate`, logging each step's intent before acting on it. It is
resumable by construction: after a ``kill -9``, reopening the run and calling it again replays the
recorded steps from the store (no evaluation, no debit) and continues with the first missing one.

From the shell (this is what the crash test kills and restarts)::

    python -m reasearch.runs.sweep --store runs --run RUN_ID --sources candidates.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from reasearch.errors import ConfigError, ReasearchError
from reasearch.evaluators.base import candidate_sha256
from reasearch.evaluators.result import EvalResult
from reasearch.runs.events import EventKind
from reasearch.runs.run import Run
from reasearch.runs.store import RunState, open_store

__all__ = ["run_candidates", "main"]


def run_candidates(run: Run, sources: Sequence[str], *, include_seed: bool = True, progress: bool = False,
                   finish: bool = True) -> list[EvalResult]:
    """Evaluates the seed program (step 0) and then each source (steps 1..n), resuming where the store left off.

    Args:
        run: the run (new, or reopened with :meth:`Run.open`).
        sources: candidate sources, evaluated in order; the parent of each is the best candidate so far.
        include_seed: evaluate ``run.task.seed_program()`` as step 0.
        progress: show a rich progress bar.
        finish: mark the run finished, with the best candidate as its final one, at the end.

    Returns:
        The result of every step, in step order.
    """
    plan = ([("seed", run.task.seed_program())] if include_seed else []) + [("candidate", s) for s in sources]
    offset = 0 if include_seed else 1
    spec = run.task.spec
    results: list[EvalResult] = []
    best: tuple[str, float] | None = None  # (candidate id, score) of the best result so far

    def one(step: int, note: str, source: str) -> None:
        nonlocal best
        cid = candidate_sha256(source)
        parent = best[0] if best is not None and note != "seed" else None
        # Written before it is acted upon: a resumed driver sees what was about to be evaluated.
        run.log_event(step, EventKind.EVALUATE, {"candidate_id": cid, "note": note, "parent": parent})
        result = run.evaluate(source, step=step, parent=parent, note=note)
        results.append(result)
        if result.ok and result.score is not None and spec.is_better(result.score, None if best is None else best[1]):
            best = (cid, result.score)

    if progress:
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            job = bar.add_task(f"run {run.id}", total=len(plan))
            for i, (note, source) in enumerate(plan):
                one(i + offset, note, source)
                bar.advance(job)
    else:
        for i, (note, source) in enumerate(plan):
            one(i + offset, note, source)
    if finish:
        run.finish(state=RunState.FINISHED, final_candidate=best[0] if best else None,
                   reason=f"evaluated {len(plan)} candidates")
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m reasearch.runs.sweep``: resume (or continue) a stored run over a JSON list of sources."""
    p = argparse.ArgumentParser(prog="python -m reasearch.runs.sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("--store", required=True, help="run directory or store URL")
    p.add_argument("--run", required=True, help="run id (or a unique prefix)")
    p.add_argument("--sources", required=True, type=Path, help="a JSON file holding a list of candidate sources")
    p.add_argument("--no-seed", action="store_true", help="do not evaluate the seed program as step 0")
    args = p.parse_args(argv)
    try:
        sources = json.loads(args.sources.read_text())
        if not (isinstance(sources, list) and all(isinstance(s, str) for s in sources)):
            raise ConfigError(f"{args.sources} must hold a JSON list of source strings")
        with open_store(args.store) as store:
            run = Run.open(store, args.run, resume=True)
            results = run_candidates(run, sources, include_seed=not args.no_seed)
            print(json.dumps({"run": run.id, "steps": len(results), "status": run.status().to_dict()}))
    except (ReasearchError, OSError, json.JSONDecodeError) as exc:
        print(f"sweep: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised through a subprocess by the resume test
    sys.exit(main())
