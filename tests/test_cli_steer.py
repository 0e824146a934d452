"""``reasearch steer`` / ``fork`` through the real command on live runs: every verb reaches an agent run and an
evolve run at their next step boundary (the model here stands for the person: its scripted replies send the
commands while the run goes on), each is journaled with the step it was applied at, and a replay of the
steered run does not diverge. Evaluations run on a StaticRunner (no sandbox: the harness is under test)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from reasearch.agent import Agent, AgentConfig, ModelSpec, replay_run
from reasearch.cli import main
from reasearch.engine.testing import StaticRunner
from reasearch.evaluators.base import candidate_sha256
from reasearch.evaluators.testing import ToyTask
from reasearch.methods import MethodRunner, method_config
from reasearch.models.messages import ModelReply, ModelRequest
from reasearch.models.testing import ScriptedModel, call, say
from reasearch.runs import LocalExecutor, Run, RunState, Unit, open_store
from reasearch.runs.ledger import LedgerEntry
from reasearch.runs.steering import history


def _src(values: list[float]) -> str:
    return f"def run():\n    return {[float(v) for v in values]!r}\n"


SEED_LIKE, BETTER, BEST = _src([0.5, 0.5]), _src([2.0, 2.5]), _src([3.0, 3.0])


def _steer(run_dir: Path, *argv: str) -> int:
    return main(["steer", *argv, "--run-dir", str(run_dir), "--who", "tester"])


_WRITE_TOKEN = "write-t0ken-for-the-steering-tests"
CHANNELS = ["cli", "dashboard", "mcp"]
WHO = {"cli": "tester", "dashboard": "tester (dashboard@testclient)", "mcp": "mcp:tester"}


def _api_args(verb: str, words: tuple[str, ...]) -> dict[str, Any]:
    """The CLI's words of a verb as the API's arguments (what the panel and the MCP tool send)."""
    if verb == "pin":
        return {"candidate": words[0]}
    if verb == "lift":
        return {"ban": int(words[0])}
    if verb == "cap":
        unit, value = words[0].split("=")
        return {"unit": unit, "value": float(value)}
    return {"text": " ".join(words)} if words else {}


def _send(channel: str, run_dir: Path, run_id: str, verb: str, *words: str) -> int:
    """One intervention through ``channel`` (the CLI, the dashboard's write path, the MCP steering tools):
    0 when it was taken, 2 when refused, as the CLI answers."""
    if channel == "cli":
        return _steer(run_dir, run_id, verb, *words)
    from reasearch.agent.mcp.steering import SteeringService
    from reasearch.reports.serve import create_app
    from reasearch.reports.steer_web import NONCE_HEADER, TOKEN_HEADER, SteerGate

    with open_store(run_dir) as store:
        if channel == "mcp":
            tool_args = {"run": run_id, "verb": verb, **_api_args(verb, words)}
            return 2 if SteeringService(store).call("steer", tool_args, client="tester").is_error else 0
        from starlette.testclient import TestClient

        client = TestClient(create_app(store, steer=SteerGate(_WRITE_TOKEN)), base_url="http://127.0.0.1")
        nonce = client.post("/steer/nonce", json={}, headers={TOKEN_HEADER: _WRITE_TOKEN}).json()["nonce"]
        r = client.post(f"/run/{run_id}/steer", json={"verb": verb, "args": _api_args(verb, words), "who": "tester"},
                        headers={TOKEN_HEADER: _WRITE_TOKEN, NONCE_HEADER: nonce})
        return 0 if r.status_code == 200 else 2


def _user_text(request: ModelRequest) -> str:
    last = request.messages[-1]["content"]
    return "\n".join(str(b.get("text") or b.get("content") or "") for b in last if isinstance(b, dict))


def _resume_when_paused(store_dir: Path, run_id: str, channel: str = "cli") -> threading.Thread:
    """The person, in another thread: waits until the driver applied the pause, then resumes it."""
    def person() -> None:
        store = open_store(store_dir)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any(i.verb == "pause" and i.applied_step is not None for i in history(store, run_id)):
                assert _send(channel, store_dir, run_id, "resume", "go on") == 0
                return
            time.sleep(0.05)
    t = threading.Thread(target=person, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("channel", CHANNELS)
def test_each_verb_reaches_an_agent_run_at_its_next_boundary_and_a_replay_does_not_diverge(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], channel: str) -> None:
    run_dir = tmp_path / "runs"
    executor = LocalExecutor(1, pool=StaticRunner())
    store = open_store(run_dir)
    config = AgentConfig(models={"agent": ModelSpec(provider="scripted", name="inline")})
    run = Run.create(store, task=ToyTask(dim=2), budget={"evaluations": 5},
                     config={"driver": "agent", "agent": config.to_dict()}, executor=executor)
    rid = run.id
    seen: dict[str, str] = {}
    waiter: list[threading.Thread] = []

    def turn1(request: ModelRequest) -> ModelReply:
        assert _send(channel, run_dir, rid, "hint", "try", "symmetry\x1b[2J\u202e") == 0
        assert _send(channel, run_dir, rid, "ban", "no brute force") == 0
        assert _send(channel, run_dir, rid, "cap", "evaluations=8") == 0
        return say("", call("write_file", path="candidate.py", content=BETTER), call("evaluate"))

    def turn2(request: ModelRequest) -> ModelReply:
        seen["turn2"] = _user_text(request)
        assert _send(channel, run_dir, rid, "pin", candidate_sha256(BETTER)[:10]) == 0
        assert _send(channel, run_dir, rid, "lift", "2") == 0
        return say("", call("write_file", path="candidate.py", content=BEST), call("evaluate"))

    def turn3(request: ModelRequest) -> ModelReply:
        seen["turn3"] = _user_text(request)
        assert _send(channel, run_dir, rid, "pause", "coffee") == 0
        waiter.append(_resume_when_paused(run_dir, rid, channel))
        return say("", call("evaluate"))

    def turn4(request: ModelRequest) -> ModelReply:
        seen["turn4"] = _user_text(request)
        assert _send(channel, run_dir, rid, "stop", "enough for today") == 0
        return say("", call("get_status"))

    agent = Agent(run, run_dir / rid, config=config, models={"agent": ScriptedModel([turn1, turn2, turn3, turn4])})
    result = agent.optimize()
    waiter[0].join(10)
    # turn 2's prompt holds the hint (escaped: no terminal escape, no bidi override reaches the model) and the ban
    assert "try symmetry\\x1b[2J\\u202e" in seen["turn2"] and "\x1b" not in seen["turn2"]
    assert "no brute force" in seen["turn2"] and WHO[channel] in seen["turn2"]
    # turn 3: the hint was shown once, the ban is lifted, the pin is stated
    assert "symmetry" not in seen["turn3"] and "no brute force" not in seen["turn3"]
    assert f"pinned candidate {candidate_sha256(BETTER)[:12]}" in seen["turn3"]
    # the pin put the pinned candidate back in the workspace: turn 3's evaluate scored it, not BEST
    evals = store.evaluations(rid)
    assert [ev.candidate_id for ev in evals][-1] == candidate_sha256(BETTER)
    assert result.reason.startswith(f"stopped by {WHO[channel]} (intervention #8): enough for today")
    rec = store.get_run(rid)
    assert rec.state is RunState.FINISHED and rec.budget["evaluations"] == 8.0
    got = history(store, rid)
    assert [i.verb for i in got] == ["hint", "ban", "cap", "pin", "lift", "pause", "resume", "stop"]
    assert all(i.who == WHO[channel] and i.applied_step is not None for i in got)
    steps = [i.applied_step for i in got]
    assert steps[0] == steps[1] == steps[2] < steps[3] == steps[4] < steps[5] == steps[6] < steps[7]
    capsys.readouterr()
    assert _steer(run_dir, rid, "list") == 0
    listed = capsys.readouterr().out
    assert "#1 hint" in listed and "applied at step" in listed and "best before" in listed
    # a finished run refuses, in one line, exit 2
    assert _steer(run_dir, rid, "hint", "too late") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "finished run cannot be steered" in err
    # the replay applies every intervention at the same step: no divergence, same final
    report = replay_run(rid, run_dir=run_dir, replay_dir=tmp_path / "replay", executor=executor)
    assert report.ok, (report.divergences, report.error)
    twin = open_store(tmp_path / "replay")
    assert [(i.seq, i.applied_step) for i in history(twin, report.replay_run_id)] == [(i.seq, i.applied_step)
                                                                                       for i in got]
    assert twin.get_run(report.replay_run_id).budget["evaluations"] == 8.0


@pytest.mark.parametrize(("argv", "match"), [
    (["hint"], "needs a text"),
    (["pin", "a", "b"], "one candidate id"),
    (["lift", "x"], "number of a ban or a pin"),
    (["cap", "evaluations"], "UNIT=VALUE"),
    (["cap", "evaluations=1"], "cannot go below"),
    (["cap", "evaluations=inf"], "finite"),
    (["teleport"], "unknown steering verb"),
    (["hint", "x" * 5000], "at most 4096"),
])
def test_bad_steering_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    argv: list[str], match: str) -> None:
    run_dir = tmp_path / "runs"
    store = open_store(run_dir)
    run = Run.create(store, task=ToyTask(dim=2), budget={"evaluations": 5}, config={"driver": "agent"},
                     executor=LocalExecutor(1, pool=StaticRunner()))
    run.evaluate(_src([1.0, 1.0]), step=1)
    run.evaluate(_src([1.0, 2.0]), step=2)
    run.close()
    assert _steer(run_dir, run.id, *argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and match in err, err
    assert history(store, run.id) == []


class _EvolveScript:
    """Evolve's proposals, each a better toy candidate; on given calls it also acts as the person."""

    def __init__(self, run_dir: Path, actions: dict[int, Any]) -> None:
        self.run_dir, self.actions, self.n, self.prompts = run_dir, actions, 0, []
        self.name = "scripted-evolve"

    def complete(self, request: ModelRequest) -> ModelReply:
        self.n += 1
        self.prompts.append(_user_text(request))
        if self.n in self.actions:
            self.actions[self.n]()
        return say("```python\n" + _src([1.0 + self.n, 1.0 + self.n]) + "```")


@pytest.mark.parametrize(("method", "channel"), [(m, "cli") for m in ("evolve", "best-of-n", "reflect")]
                         + [("evolve", "dashboard"), ("evolve", "mcp")])
def test_each_verb_reaches_a_methods_run_and_a_fork_with_a_twin_is_measured(
        method: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], channel: str) -> None:
    run_dir = tmp_path / "runs"
    store = open_store(run_dir)
    executor = LocalExecutor(1, pool=StaticRunner())
    holder: dict[str, str] = {}

    def rid() -> str:
        return holder["id"]

    def send(verb: str, *words: str) -> int:
        return _send(channel, run_dir, rid(), verb, *words)

    def first_best() -> str:
        return max(store.evaluations(rid()), key=lambda ev: ev.result.score or -1).candidate_id

    actions = {
        1: lambda: [send("hint", "use bigger numbers"), send("ban", "no zeros"),
                    send("cap", "evaluations=7")],
        3: lambda: [send("pin", first_best()[:8]), send("lift", "2")],
        4: lambda: [send("pause"), holder.setdefault("t", "1"),
                    _resume_when_paused(run_dir, rid(), channel)],
        5: lambda: send("stop", "seen enough"),
    }
    model = _EvolveScript(run_dir, actions)
    settings = {"num_islands": 1} if method == "evolve" else {}
    run = Run.create(store, task=ToyTask(dim=2), budget={"evaluations": 6}, executor=executor,
                     config={"driver": "method", "method": method, "method_config": settings,
                             "model": {"provider": "scripted", "name": ""}})
    holder["id"] = run.id
    result = MethodRunner(run, model, method, method_config(method, settings)).optimize()
    assert "use bigger numbers" in model.prompts[1] and "no zeros" in model.prompts[1]
    assert "use bigger numbers" not in model.prompts[2] and "no zeros" in model.prompts[2]
    assert "no zeros" not in model.prompts[3] and "pinned candidate" in model.prompts[3]
    assert result.reason == f"stopped by {WHO[channel]} (intervention #8): seen enough"
    got = history(store, run.id)
    assert [i.verb for i in got] == ["hint", "ban", "cap", "pin", "lift", "pause", "resume", "stop"]
    assert all(i.applied_step is not None for i in got) and store.get_run(run.id).budget["evaluations"] == 7.0
    # the pinned candidate was the parent of the next proposal
    pin_step = got[3].applied_step
    assert pin_step is not None
    after = [c for c in store.candidates(run.id) if c.parent is not None]
    assert any(c.parent == got[3].args["candidate"] for c in after)
    # fork the best candidate with an unsteered twin
    capsys.readouterr()
    assert main(["fork", run.id, "--candidate", first_best()[:12], "--budget", "3", "--twin", "--id",
                 "forked-1", "--run-dir", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "forked-1-twin" in out
    fork = store.get_run("forked-1")
    assert fork.budget == {"evaluations": 3.0} and fork.config["fork"]["twin"] == "forked-1-twin"
    assert main(["steer", "forked-1-twin", "hint", "x", "--run-dir", str(run_dir)]) == 2
    assert "unsteered twin" in capsys.readouterr().err
    assert main(["fork", run.id, "--candidate", "ffffff", "--budget", "3", "--run-dir", str(run_dir)]) == 2
    assert "has no candidate" in capsys.readouterr().err


def test_a_fleet_or_comparison_takes_interventions_per_member_or_for_all(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "runs"
    store = open_store(run_dir)
    ex = LocalExecutor(1, pool=StaticRunner())
    ids = []
    for _ in range(3):
        run = Run.create(store, task=ToyTask(dim=2), budget={"evaluations": 4}, config={"driver": "agent"}, executor=ex)
        run.evaluate(_src([1.0, 1.0]), step=1)
        ids.append(run.id)
        run.close()
    store.create_fleet("fleet-1", {"tasks": ["toy"]})  # a comparison is stored as a fleet too
    for k, rid in enumerate(ids):
        store.add_fleet_member("fleet-1", k, rid)
    store.set_run_state(ids[2], RunState.FINISHED, reason="done")
    assert main(["steer", "fleet-1", "hint", "look", "left", "--all", "--run-dir", str(run_dir)]) == 0
    assert [len(history(store, rid)) for rid in ids] == [1, 1, 0]  # the finished member is left out
    assert history(store, ids[0])[0].args == {"text": "look left"}
    assert main(["steer", "fleet-1", "cap", "evaluations=9", "--member", "1", "--run-dir", str(run_dir)]) == 0
    assert [i.verb for i in history(store, ids[1])] == ["hint", "cap"] and len(history(store, ids[0])) == 1
    capsys.readouterr()
    # all or nothing: a cap below one member's spend refuses for every member; a missing member is one line
    store.debit(LedgerEntry(ids[0], 2, Unit.EVALUATIONS, 2.0, "x", 1.0))
    assert main(["steer", "fleet-1", "cap", "evaluations=2", "--all", "--run-dir", str(run_dir)]) == 2
    assert [len(history(store, rid)) for rid in ids] == [1, 2, 0]
    assert main(["steer", "fleet-1", "stop", "--member", "7", "--run-dir", str(run_dir)]) == 2
    assert main(["steer", "fleet-1", "stop", "--member", "2", "--run-dir", str(run_dir)]) == 2
    assert main(["steer", "no-fleet", "stop", "--all", "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 4 and "cannot go below" in err[0] and "no member 7" in err[1] and "finished" in err[2]


def test_a_peer_methods_run_refuses_steering_in_one_line(tmp_path: Path) -> None:
    from reasearch.errors import ConfigError
    from reasearch.methods import start_method
    from reasearch.runs.steering import submit

    store = open_store(tmp_path / "runs")
    try:
        runner = start_method("gepa", "heilbronn/n11-v1", budget={"evaluations": 3}, store=store,
                              model_spec=ModelSpec(provider="scripted", name=""),
                              model=ScriptedModel([]))
        rid = runner.run.id
    except Exception:  # the package is not installed here: the run is stored (failed) before the method starts
        rid = store.list_runs()[-1].id
        store.set_run_state(rid, RunState.RUNNING)
    with pytest.raises(ConfigError, match="gepa method runs the package's own loop"):
        submit(store, rid, "hint", {"text": "x"})


def test_a_fork_starts_from_its_candidate_and_reasearch_resume_drives_a_methods_fork(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An agent's fork writes the forked candidate into its workspace; an evolve run's fork evaluates it first,
    driven by `reasearch resume` (the demo model, the real sandbox) with its own budget, and so does its twin."""
    from reasearch.agent import open_agent
    from reasearch.methods import start_method

    run_dir = tmp_path / "runs"
    store = open_store(run_dir)
    runner = start_method("evolve", "heilbronn/n11-v1", budget={"evaluations": 3}, store=store,
                          model_spec=ModelSpec.parse("demo"), config={"num_islands": 1})
    runner.optimize()
    src = runner.run.id
    best = max((ev for ev in store.evaluations(src) if ev.result.score is not None), key=lambda ev: ev.result.score)
    assert main(["fork", src, "--candidate", best.candidate_id[:10], "--budget", "evaluations=2", "--twin",
                 "--run-dir", str(run_dir), "--json"]) == 0
    ids = json.loads(capsys.readouterr().out)
    for rid in (ids["run"], ids["twin"]):
        assert main(["resume", rid, "--run-dir", str(run_dir), "--quiet"]) == 0
        evals = store.evaluations(rid)
        assert evals[0].candidate_id == best.candidate_id and evals[0].result.score == best.result.score
        assert len(evals) == 2 and store.get_run(rid).state is RunState.FINISHED
    # an agent's fork: the workspace starts from the candidate, not the task's seed program
    ex = LocalExecutor(1, pool=StaticRunner())
    config = AgentConfig(models={"agent": ModelSpec(provider="scripted", name="inline")})
    agent_run = Run.create(store, task=ToyTask(dim=2), budget={"evaluations": 3}, executor=ex,
                           config={"driver": "agent", "agent": config.to_dict()})
    agent_run.evaluate(BEST, step=1)
    agent_run.finish()
    new = main(["fork", agent_run.id, "--candidate", candidate_sha256(BEST)[:8], "--budget", "2",
                "--id", "agent-fork", "--run-dir", str(run_dir)])
    assert new == 0
    agent = open_agent("agent-fork", run_dir=run_dir, store=store, executor=ex,
                       models={"agent": ScriptedModel([say("", call("evaluate")),
                                                       say("", call("finish", reason="done"))])})
    agent.run.resume()
    agent.optimize()
    assert [ev.candidate_id for ev in store.evaluations("agent-fork")] == [candidate_sha256(BEST)]


def test_an_mcp_driven_run_refuses_steering_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from reasearch.agent.mcp import start_mcp_run

    run_dir = tmp_path / "runs"
    driver = start_mcp_run("circle_packing/n26-v1", store=open_store(run_dir), run_dir=run_dir,
                           budget={"evaluations": 1})
    try:
        assert _steer(run_dir, driver.run.id, "hint", "x") == 2
        assert "an MCP client drives it" in capsys.readouterr().err
    finally:
        driver.close()
