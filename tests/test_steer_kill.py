"""kill -9 of a driver right after it applied a person's interventions, then resume and replay: the journal
holds each intervention at the step it was applied, the resumed driver applies the same ones at the same step
(and a later one at the next boundary), nothing is charged twice, and a replay does not diverge. An agent run
and an evolve run, each driven in a child process that kills itself mid-step (StaticRunner: no sandbox)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

from reasearch.agent import AgentConfig, ModelSpec, open_agent, replay_run
from reasearch.engine.testing import StaticRunner
from reasearch.methods import open_method
from reasearch.models.messages import ModelReply, ModelRequest
from reasearch.models.testing import ScriptedModel, call, say
from reasearch.runs import LocalExecutor, Unit, open_store
from reasearch.runs.steering import APPLIED_KIND, history, submit

ROOT = Path(__file__).resolve().parents[1]

_COMMON = """
import os, signal, sys
from pathlib import Path
from reasearch.engine.testing import StaticRunner
from reasearch.evaluators.testing import ToyTask
from reasearch.models.messages import ModelReply
from reasearch.models.testing import ScriptedModel, call, say
from reasearch.runs import LocalExecutor, Run, open_store
from reasearch.runs.steering import submit
run_dir = Path(sys.argv[1])
store = open_store(run_dir)
ex = LocalExecutor(1, pool=StaticRunner())
def src(v):
    return f"def run():\\n    return {[float(x) for x in v]!r}\\n"
def die(_req):  # the driver dies mid-step, after the interventions were applied and journaled
    os.kill(os.getpid(), signal.SIGKILL)
"""

_AGENT = _COMMON + """
from reasearch.agent import Agent, AgentConfig, ModelSpec
config = AgentConfig(models={"agent": ModelSpec(provider="scripted", name="inline")})
run = Run.create(store, task=ToyTask(dim=2), budget={"evaluations": 6}, run_id="steered-agent",
                 config={"driver": "agent", "agent": config.to_dict()}, executor=ex)
def t1(_req):
    submit(store, run.id, "hint", {"text": "mind the symmetry"}, "alice")
    submit(store, run.id, "ban", {"text": "no zeros"}, "alice")
    submit(store, run.id, "cap", {"unit": "evaluations", "value": 9}, "alice")
    return say("", call("write_file", path="candidate.py", content=src([2, 2])), call("evaluate"))
Agent(run, run_dir / run.id, config=config, models={"agent": ScriptedModel([t1, die])}).optimize()
"""

_EVOLVE = _COMMON + """
from reasearch.methods import MethodRunner, method_config
class Model:
    name = "scripted-evolve"
    def __init__(self):
        self.n = 0
    def complete(self, req):
        self.n += 1
        if self.n == 2:
            submit(store, run.id, "hint", {"text": "mind the symmetry"}, "alice")
            submit(store, run.id, "ban", {"text": "no zeros"}, "alice")
            submit(store, run.id, "cap", {"unit": "evaluations", "value": 9}, "alice")
        if self.n == 3:
            die(req)
        return say("```python\\n" + src([1 + self.n, 1 + self.n]) + "```")
config = {"driver": "method", "method": "evolve", "method_config": {"num_islands": 1},
          "model": {"provider": "scripted", "name": ""}}
run = Run.create(store, task=ToyTask(dim=2), budget={"evaluations": 6}, run_id="steered-evolve", config=config,
                 executor=ex)
MethodRunner(run, Model(), "evolve", method_config("evolve", {"num_islands": 1})).optimize()
"""


def _drive_and_kill(program: str, run_dir: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(program), str(run_dir)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-3000:]


def _user_text(request: ModelRequest) -> str:
    return "\n".join(str(b.get("text") or "") for b in request.messages[-1]["content"] if isinstance(b, dict))


def _steer_events(store, run_id: str) -> list[tuple[int, str, list[int]]]:  # type: ignore[no-untyped-def]
    return [(e.step, e.kind, list(e.payload["seqs"])) for e in store.events(run_id)
            if e.kind.split(".", 1)[0] == APPLIED_KIND]


def _charged_once(store, run_id: str) -> None:  # type: ignore[no-untyped-def]
    ledger = store.ledger(run_id)
    assert max(Counter((e.step, e.unit, e.note) for e in ledger).values()) == 1
    ran = [ev for ev in store.evaluations(run_id) if not ev.result.cached and ev.result.status.value != "REFUSED"]
    assert sum(e.amount for e in ledger if e.unit is Unit.EVALUATIONS) == len(ran)


def test_kill_9_after_an_intervention_then_resume_and_replay_an_agent_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs"
    _drive_and_kill(_AGENT, run_dir)
    store = open_store(run_dir)
    before = _steer_events(store, "steered-agent")
    assert [seqs for _, _, seqs in before] == [[1, 2, 3]]
    applied_at = before[0][0]
    assert store.get_run("steered-agent").budget["evaluations"] == 9.0
    submit(store, "steered-agent", "hint", {"text": "after the crash"}, "bob")  # sent while no driver runs
    prompts: list[str] = []

    def again(request: ModelRequest) -> ModelReply:  # the step the kill cut: its snapshot is the recorded one
        prompts.append(_user_text(request))
        return say("", call("write_file", path="candidate.py", content="def run():\n    return [3.0, 3.0]\n"),
                   call("evaluate"))

    def last(request: ModelRequest) -> ModelReply:
        prompts.append(_user_text(request))
        return say("", call("finish", reason="done"))

    executor = LocalExecutor(1, pool=StaticRunner())
    config = AgentConfig(models={"agent": ModelSpec(provider="scripted", name="inline")})
    agent = open_agent("steered-agent", run_dir=run_dir, store=store, executor=executor,
                       models={"agent": ScriptedModel([again, last])})
    agent.run.resume()
    agent.optimize()
    assert config.models["agent"].provider == "scripted"
    after = _steer_events(store, "steered-agent")
    assert after[0] == before[0] and len(after) == 2 and after[1][2] == [4] and after[1][0] > applied_at
    assert prompts[0].count("mind the symmetry") == 1 and "no zeros" in prompts[0]
    assert "after the crash" not in prompts[0] and "after the crash" in prompts[1] and "no zeros" in prompts[1]
    assert [i.applied_step for i in history(store, "steered-agent")] == [applied_at] * 3 + [after[1][0]]
    assert store.get_run("steered-agent").budget["evaluations"] == 9.0
    _charged_once(store, "steered-agent")
    report = replay_run("steered-agent", run_dir=run_dir, replay_dir=tmp_path / "replay", executor=executor)
    assert report.ok, (report.divergences, report.error)
    assert _steer_events(open_store(tmp_path / "replay"), report.replay_run_id) == after


def test_kill_9_after_an_intervention_then_resume_an_evolve_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs"
    _drive_and_kill(_EVOLVE, run_dir)
    store = open_store(run_dir)
    before = _steer_events(store, "steered-evolve")
    assert [seqs for _, _, seqs in before] == [[1, 2, 3]]
    submit(store, "steered-evolve", "stop", {"text": "enough"}, "bob")
    prompts: list[str] = []

    class Model:
        name = "scripted-evolve"

        def complete(self, request: ModelRequest) -> ModelReply:
            prompts.append(_user_text(request))
            return say("```python\ndef run():\n    return [9.0, 9.0]\n```")

    runner = open_method("steered-evolve", store=store, model=Model(),  # type: ignore[arg-type]
                         executor=LocalExecutor(1, pool=StaticRunner()))
    result = runner.optimize()
    # the step the kill cut is asked again with the same interventions; the stop comes at the next boundary
    assert len(prompts) == 1 and prompts[0].count("mind the symmetry") == 1 and "no zeros" in prompts[0]
    assert result.reason == "stopped by bob (intervention #4): enough"
    after = _steer_events(store, "steered-evolve")
    assert after[0] == before[0] and [seqs for _, _, seqs in after] == [[1, 2, 3], [4]]
    assert store.get_run("steered-evolve").budget["evaluations"] == 9.0
    _charged_once(store, "steered-evolve")
