"""Real runs for the report tests: one per task family, made through the Run API with real sandboxed
evaluations, and one driven by the agent (a scripted model) so the report has a transcript, lessons
and a compaction. Kept small: the whole set takes seconds on 2 cores."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reasearch.agent import AgentConfig, ModelSpec, Price, ScriptedModel, start_run
from reasearch.evaluators.base import candidate_sha256
from reasearch.evaluators.testing import ToyTask, toy_candidate
from reasearch.models.testing import call, say
from reasearch.runs import Run
from reasearch.runs.executor import LocalExecutor
from reasearch.runs.store import Store

IMPROVED_PACKING = '''import numpy as np
from reasearch.native.lp import optimal_radii

ROWS = (5, 5, 6, 5, 5)


def run():
    pts = [((c + 0.5) / n, (r + 0.5) / len(ROWS)) for r, n in enumerate(ROWS) for c in range(n)]
    centers = np.array(pts)
    # nudge the rows so that the packing is not a plain grid
    centers[:, 0] += 0.01 * np.sin(np.arange(len(pts)))
    centers = np.clip(centers, 0.05, 0.95)
    return centers, optimal_radii(centers)
'''
CRASHING = "def run():\n    raise RuntimeError('this candidate always fails')\n"
HOSTILE_NOTE = '</script><script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
LESSONS_1 = "# Lessons\n## What worked\n- staggered rows 5,5,6,5,5 + LP radii: ~2.5\n"
LESSONS_2 = LESSONS_1 + "## What failed\n- raising in run() is a CRASH, never a score\n"


@dataclass(frozen=True)
class ReportRuns:
    """Run ids by task family, and what each run holds (what the browser tests count)."""

    ids: dict[str, str]
    evaluations: dict[str, int]
    candidates: dict[str, int]
    turns: dict[str, int]


def _trajectory() -> list[Any]:
    improved = candidate_sha256(IMPROVED_PACKING)
    return [
        say("Reading the task first.", call("read_file", path="TASK.md")),
        say("Baseline.", call("evaluate")),
        say("", call("edit_code", instruction="Staggered rows of 5, 5, 6, 5, 5 with LP radii.")),
        say("```python\n" + IMPROVED_PACKING + "```"),  # the editor's rewrite
        say("", call("evaluate")),
        say("Try something risky.", call("write_file", path="candidate.py", content=CRASHING)),
        say("", call("evaluate")),
        say("", call("write_file", path="lessons.md", content=LESSONS_1)),
        say("", call("compact")),
        say("Summary: rows + LP radii score ~2.5; a crashing candidate earned nothing."),
        say("Restore the good one.", call("write_file", path="candidate.py", content=IMPROVED_PACKING)),
        say("", call("evaluate")),  # cached
        say("", call("write_file", path="lessons.md", content=LESSONS_2)),
        say("Done.", call("finish", reason="best valid packing", candidate_id=improved[:12])),
    ]


def make_agent_run(run_dir: Path, store: Store, executor: LocalExecutor) -> str:
    """Circle packing driven by a scripted agent (priced, so dollars are debited)."""
    model = ScriptedModel(_trajectory(), name="scripted-sonnet", price=Price(3.0, 15.0))
    config = AgentConfig(models={"agent": ModelSpec(provider="scripted", name="inline")})
    agent = start_run("circle_packing/n26-v1", budget={"evaluations": 10, "dollars": 1.0}, config=config,
                      run_dir=run_dir, store=store, models={"agent": model}, executor=executor)
    agent.optimize()
    return agent.run.id


def _plain_run(store: Store, executor: LocalExecutor, task_id: str | None, sources: list[tuple[str, str | None, str]],
               *, task: Any = None, params: dict[str, Any] | None = None) -> str:
    """A run evaluating ``(source, parent source, note)`` in order, then finished."""
    run = Run.create(
        store, task_id=task_id, task_params=params, task=task, budget={"evaluations": 50}, executor=executor
    )
    for step, (src, parent, note) in enumerate(sources):
        run.evaluate(src, step=step, parent=None if parent is None else candidate_sha256(parent), note=note)
    run.finish()
    return run.id


def make_runs(run_dir: Path, store: Store, executor: LocalExecutor) -> ReportRuns:
    """Every run the report tests use."""
    from reasearch.evaluators import make

    ids: dict[str, str] = {}
    ids["circle_packing"] = make_agent_run(run_dir, store, executor)

    seed = make("heilbronn/n11-v1").seed_program()
    jitter = ("import numpy as np\n# </script><script>window.__pwned = 3</script><!--\n\ndef run():\n"
              "    rng = np.random.default_rng(3)\n    return rng.uniform(0.02, 0.98, size=(11, 2))\n")
    outside = "import numpy as np\n\ndef run():\n    return np.full((11, 2), 2.0)\n"
    ids["heilbronn"] = _plain_run(store, executor, "heilbronn/n11-v1", [
        (seed, None, "seed"), (jitter, seed, HOSTILE_NOTE), (outside, jitter, "points outside the square")])

    seed = make("txn_scheduling/v1").seed_program()
    identity = ("def get_best_schedule(workload, num_seqs):\n"
                "    return list(range(workload.num_txns))\n")
    ids["txn_scheduling"] = _plain_run(store, executor, "txn_scheduling/v1", [
        (identity, None, "sequential order"), (seed, identity, "greedy seed")])

    seed = make("eplb/v1", num_windows=3).seed_program()
    ids["eplb"] = _plain_run(store, executor, "eplb/v1", [(seed, None, "DeepSeek's hierarchical algorithm")],
                             params={"num_windows": 3})

    wrong = ("def transform_grid_attempt_1(g):\n    return g\n\n"
             "def transform_grid_attempt_2(g):\n    return [row[::-1] for row in g[:-1]] + [g[-1]]\n")
    right = "def transform_grid_attempt_1(g):\n    return [row[::-1] for row in g]\n"
    ids["arc_agi_2"] = _plain_run(store, executor, "arc_agi_2/67a3c6ac-v1", [
        (wrong, None, "identity; mirror all rows but the last"), (right, wrong, "mirror")])
    # Keep the wrong one as the best to draw wrong cells: a second run with only the partly wrong candidate.
    ids["arc_agi_2_wrong"] = _plain_run(store, executor, "arc_agi_2/67a3c6ac-v1", [(wrong, None, "partly wrong")])

    toy = ToyTask(dim=6)
    ids["generic"] = _plain_run(store, executor, None, [
        (toy_candidate([0.0] * 6), None, "zeros"), (toy_candidate([1, 2, 3, 4, 3, 2]), None, "closer"),
        (toy_candidate([3.0] * 6), None, "optimum")], task=toy)

    empty = Run.create(store, task_id="heilbronn/n12-v1", budget={"evaluations": 5}, executor=executor)
    ids["empty"] = empty.id  # created, nothing evaluated yet: what a live dashboard shows first

    evaluations = {k: len(store.evaluations(v)) for k, v in ids.items()}
    candidates = {k: len(store.candidates(v)) for k, v in ids.items()}
    turns = {k: len(store.events(v, kind="snapshot")) for k, v in ids.items()}
    return ReportRuns(ids, evaluations, candidates, turns)


def save_shot(screenshots: Path, name: str, shoot: Any, *, docs: bool = True) -> Path:
    """``shoot(path)`` into the artifacts folder, and (``docs``) into $REASEARCH_DOCS_SCREENSHOTS when set."""
    path = screenshots / name
    shoot(path)
    folder = os.environ.get("REASEARCH_DOCS_SCREENSHOTS")
    if folder and docs:
        docs_dir = Path(folder)
        docs_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, docs_dir / name)
    return path
