"""End to end: a scripted agent on circle packing n=26 with real evaluations in the sandbox and a real
SQLite store; the store and ledger afterwards match what happened, step by step. A run killed with
SIGKILL and resumed completes without spending anything twice."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import children, kinds_by_step, reap_orphans

from reasearch.agent import AgentConfig, ModelReply, ModelSpec, open_agent, replay_run, start_run
from reasearch.cli import main
from reasearch.evaluators import make
from reasearch.evaluators.base import candidate_sha256
from reasearch.models.testing import ScriptedModel, call, say
from reasearch.runs import Run, RunState, Unit, open_store

TASK = "circle_packing/n26-v1"
IMPROVED = '''import numpy as np
from reasearch.native.lp import optimal_radii

ROWS = (5, 5, 6, 5, 5)


def run():
    pts = [((c + 0.5) / n, (r + 0.5) / len(ROWS)) for r, n in enumerate(ROWS) for c in range(n)]
    centers = np.array(pts)
    return centers, optimal_radii(centers)
'''
LESSONS = (
    "# Lessons\n## What worked\n- staggered rows 5,5,6,5,5 + LP radii: 2.5\n## What to try next\n- hexagonal offsets\n"
)
SEED_SCORE = 2.1666666645  # the task's recorded seed score (equal radii on a 6x6 grid)


def trajectory() -> list[ModelReply]:
    """Every reply of the run, in call order (agent turns, the edit, the compaction summary)."""
    improved_id = candidate_sha256(IMPROVED)
    return [
        say("Reading the task first.", call("read_file", path="TASK.md")),
        say("Baseline.", call("evaluate")),
        say("", call("edit_code", instruction="Place the centers in staggered rows of 5, 5, 6, 5, 5 and take "
                                              "the radii from optimal_radii(centers).")),
        say("```python\n" + IMPROVED + "```"),  # the editor's rewrite
        say("", call("evaluate")),
        say("Check it in the sandbox.", call("bash", command="python3 -c 'import candidate; c, r = candidate.run(); "
                                                              "print(len(r), round(float(r.sum()), 6))'")),
        say("", call("write_file", path="lessons.md", content=LESSONS)),
        say("", call("compact")),
        say("Summary: the staggered-row layout with LP radii scores 2.5 against 2.1667 for the grid."),
        say("", call("evaluate")),  # same code again: served from the cache
        say("Done.", call("finish", reason="best valid packing; re-evaluation reproduced it",
                          candidate_id=improved_id[:12])),
    ]


# step -> event kinds of the uninterrupted run (0 start; a turn = snapshot + reply; a tool = call + result)
EXPECTED_KINDS = {
    0: ["start"], 1: ["snapshot", "model_reply"], 2: ["tool_call", "tool_result"],
    3: ["snapshot", "model_reply"], 4: ["tool_call", "tool_result"],
    5: ["snapshot", "model_reply"], 6: ["tool_call", "edit_reply", "tool_result"],
    7: ["snapshot", "model_reply"], 8: ["tool_call", "tool_result"],
    9: ["snapshot", "model_reply"], 10: ["tool_call", "tool_result"],
    11: ["snapshot", "model_reply"], 12: ["tool_call", "tool_result"],
    13: ["snapshot", "model_reply"], 14: ["tool_call", "tool_result"],
    15: ["summary", "compaction"],
    16: ["snapshot", "model_reply"], 17: ["tool_call", "tool_result"],
    18: ["snapshot", "model_reply"], 19: ["tool_call", "tool_result"],
    20: ["final"],
}


@pytest.fixture(scope="module")
def run_dir() -> Iterator[Path]:
    """A run directory the sandbox uid can reach (the bash tool binds the workspace into the jail)."""
    d = Path(tempfile.mkdtemp(prefix="reasearch-agent-e2e-", dir="/var/tmp"))
    d.chmod(0o711)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def finished(run_dir: Path) -> dict[str, Any]:
    """One uninterrupted run of the trajectory (in this process, real sandbox and store)."""
    model = ScriptedModel(trajectory())
    config = AgentConfig(models={"agent": ModelSpec(provider="scripted", name="inline")})
    agent = start_run(
        TASK, budget={"evaluations": 10}, config=config, run_dir=run_dir / "once", models={"agent": model}
    )
    result = agent.optimize()
    return {"agent": agent, "result": result, "run": agent.run, "model": model}


def test_scripted_agent_improves_circle_packing(finished: dict[str, Any]) -> None:
    agent, result, run = finished["agent"], finished["result"], finished["run"]
    improved_id, seed_id = candidate_sha256(IMPROVED), candidate_sha256(make(TASK).seed_program())
    assert (result.state, result.final_candidate, result.chosen_by) == ("finished", improved_id, "agent")
    assert 2.49 < result.final_score <= 2.5 and result.final_score > SEED_SCORE
    record = run.store.get_run(run.id)
    assert record.state is RunState.FINISHED and record.final_candidate == improved_id
    assert kinds_by_step(run) == EXPECTED_KINDS

    # Evaluations: the seed, the improvement, and a cached repeat (no second sandbox run, no debit).
    evals = run.evaluations()
    assert [(e.step, e.candidate_id, e.result.status.value, e.result.cached) for e in evals] == [
        (4, seed_id, "OK", False), (8, improved_id, "OK", False), (17, improved_id, "OK", True)]
    assert evals[0].result.score == pytest.approx(SEED_SCORE, rel=1e-12)
    assert evals[2].result.score == evals[1].result.score == result.final_score
    assert run.candidate_source(improved_id) == IMPROVED
    assert evals[0].result.provenance.sandbox_mode in ("nsjail", "process")

    # Ledger, step by step: one evaluation unit at each evaluated step, one model call per recorded
    # reply (editor and summarizer included), and tokens equal to the recorded usage.
    ledger = run.store.ledger(run.id)
    assert [(e.step, e.amount) for e in ledger if e.unit is Unit.EVALUATIONS] == [(4, 1.0), (8, 1.0)]
    replies = [e for e in run.events() if e.kind in ("model_reply", "edit_reply", "summary")]
    assert sorted((e.step, e.note) for e in ledger if e.unit is Unit.MODEL_CALLS) == sorted(
        (e.step, f"{e.payload['role']}:{e.kind}") for e in replies)
    assert sum(e.amount for e in ledger if e.unit is Unit.TOKENS) == sum(
        ModelReply.from_dict(e.payload["reply"]).usage.total for e in replies)
    assert run.remaining()[Unit.EVALUATIONS] == 8

    # What the tools did: the sandboxed check saw the improved program, lessons were written.
    results = {e.step: e.payload for e in run.events() if e.kind == "tool_result"}
    assert not any(p["is_error"] for p in results.values())
    assert "26 2.5" in results[10]["text"] and "sandbox=" in results[10]["text"]
    assert "NEW BEST (previous 2.1666666645)" in results[8]["text"]
    assert "[cached: cost nothing]" in results[17]["text"]
    assert (agent.workspace.root / "lessons.md").read_text() == LESSONS
    compaction = next(e.payload for e in run.events() if e.kind == "compaction")
    assert compaction["lessons"] == LESSONS and (agent.root / compaction["transcript"]).is_file()
    assert (agent.root / "transcripts" / "final.json").is_file()
    assert finished["model"].remaining == 0


def test_replay_of_the_real_run_reports_no_divergence(finished: dict[str, Any], run_dir: Path) -> None:
    report = replay_run(finished["run"].id, run_dir=run_dir / "once", replay_dir=run_dir / "replayed")
    assert report.ok, (report.error, report.divergences)
    assert (report.tool_results_compared, report.evaluations_compared) == (9, 3)


_DRIVER = """
import sys
from reasearch.agent import AgentConfig, ModelSpec, start_run
cfg = AgentConfig(models={"agent": ModelSpec(provider="scripted", name=sys.argv[2])})
agent = start_run(sys.argv[3], budget={"evaluations": 10}, config=cfg, run_dir=sys.argv[1])
print(agent.run.id, flush=True)
agent.optimize()
"""


def _count(store_path: Path, sql: str) -> int:
    import sqlite3

    try:
        with sqlite3.connect(f"file:{store_path}?mode=ro", uri=True, timeout=1) as con:
            return int(con.execute(sql).fetchone()[0])
    except sqlite3.Error:
        return 0


@pytest.mark.parametrize("evaluations_before_kill, resume_with", [(1, "python"), (2, "cli")])
def test_kill_then_resume_spends_nothing_twice(run_dir: Path, finished: dict[str, Any], evaluations_before_kill: int,
                                               resume_with: str) -> None:
    d = run_dir / f"killed-{evaluations_before_kill}"
    d.mkdir()
    script = d / "script.json"
    script.write_text(json.dumps([r.to_dict() for r in trajectory()]))
    known = set(children())
    proc = subprocess.Popen([sys.executable, "-c", _DRIVER, str(d), str(script), TASK], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        run_id = proc.stdout.readline().strip()
        deadline = time.monotonic() + 120
        while _count(d / "store.sqlite", "select count(*) from evaluations") < evaluations_before_kill:
            assert proc.poll() is None, "the driver ended before the kill point"
            assert time.monotonic() < deadline, "no evaluation recorded in time"
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        reap_orphans(known)
    store = open_store(d)
    assert Run.open(store, run_id).state is RunState.INTERRUPTED  # killed: its driver's process is gone, shown at once
    before = {(e.step, e.unit, e.note): e.amount for e in store.ledger(run_id)}
    evaluated_before = [e.step for e in store.evaluations(run_id)]
    assert len(evaluated_before) >= evaluations_before_kill

    if resume_with == "cli":
        assert main(["resume", run_id, "--run-dir", str(d), "--quiet"]) == 0
    agent = open_agent(run_id, run_dir=d, store=store)  # models rebuilt from the run's config
    result = agent.optimize()  # after the CLI resume: a pure replay of a finished run, nothing new

    run = agent.run
    improved_id, seed_id = candidate_sha256(IMPROVED), candidate_sha256(make(TASK).seed_program())
    assert (result.final_candidate, result.chosen_by) == (improved_id, "agent")
    assert result.final_score == finished["result"].final_score
    assert kinds_by_step(run) == EXPECTED_KINDS  # every step exactly once
    evals = run.evaluations()
    assert [(e.step, e.candidate_id, e.result.cached) for e in evals] == [
        (4, seed_id, False), (8, improved_id, False), (17, improved_id, True)]  # the seed evaluated once
    ledger = store.ledger(run_id)
    assert sum(e.amount for e in ledger if e.unit is Unit.EVALUATIONS) == 2  # == distinct evaluations run
    for key, amount in before.items():  # debits made before the kill stand, once
        assert sum(e.amount for e in ledger if (e.step, e.unit, e.note) == key) == amount
    assert len({(e.step, e.unit, e.note) for e in ledger}) == len(ledger)
    assert store.get_run(run_id).state is RunState.FINISHED
    assert (agent.workspace.root / "lessons.md").read_text() == LESSONS
