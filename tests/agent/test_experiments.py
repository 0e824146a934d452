"""Training tasks in the agent: the git tool's boundary, a scripted agent that lowers val_bpb by editing
the learning rate and keeping the better commit, and kill -9 of the driver mid-experiment then resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import children, reap_orphans

from reasearch.agent import AgentConfig, ModelSpec, open_agent, start_run
from reasearch.agent.tools.git import GitRepo, GitTools, check_git_args
from reasearch.agent.tools.schema import ToolError
from reasearch.evaluators import make
from reasearch.models.messages import ModelReply, ModelRequest
from reasearch.models.testing import ScriptedModel, call, say
from reasearch.runs import Run, RunState, Unit, open_store


@pytest.fixture()
def run_dir(experiment_root: Path) -> Path:
    return experiment_root


# ---------------------------------------------------------------------------------------------- git


@pytest.mark.parametrize("command, words", [
    ("push origin main", "remotes are not available"), ("fetch", "remotes"), ("remote add x /tmp", "remotes"),
    ("config core.hooksPath hooks", "configuration and hooks"), ("-c core.pager=sh status", "refused: git -c"),
    ("diff --output=/tmp/x", "--output"), ("diff --no-index /etc/passwd /dev/null", "--no-index"),
    ("commit -F /etc/passwd", "-F"), ("commit --templ=/etc/passwd", "--templ"),
    ("add --pathspec-from-file=/etc/passwd", "--pathspec-from-file"), ("log --exec-path=/tmp", "--exec-path"),
    ("diff --ext-diff", "--ext-diff"), ("clone /tmp/x", "remotes"),
])
def test_git_refuses_what_could_reach_outside_the_repository(command: str, words: str) -> None:
    import shlex

    with pytest.raises(ToolError, match="refused") as info:
        check_git_args(shlex.split(command))
    assert words in str(info.value)


def test_git_works_and_never_runs_a_hook_or_repo_config(tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    ws.mkdir()
    repo = GitRepo(ws, tmp_path / "git")
    tools = GitTools(repo)
    repo.init()
    (ws / "train.py").write_text("lr = 1\n")
    marker = tmp_path / "HOOK-RAN"
    for hook in ("pre-commit", "post-commit", "commit-msg"):  # as if someone planted hooks in the git dir
        h = tmp_path / "git" / "hooks" / hook
        h.parent.mkdir(parents=True, exist_ok=True)
        h.write_text(f"#!/bin/sh\ntouch {marker}\n")
        h.chmod(0o755)
    # A workspace-local .git (the agent can write files) is refused, never used: the git dir lives outside.
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text(f"[core]\n\tfsmonitor = touch {marker}\n\tpager = touch {marker}\n")
    with pytest.raises(ToolError, match="nested git repository"):
        tools.git("status --short")
    (ws / ".git" / "config").unlink()
    (ws / ".git").rmdir()
    assert "train.py" in tools.git("status --short")
    tools.git("add train.py")
    assert "lr 1" in tools.git('commit -m "lr 1"') or repo.head() is not None
    (ws / "train.py").write_text("lr = 2\n")
    assert "+lr = 2" in tools.git("diff")
    tools.git('commit -am "lr 2"')
    log = tools.git("log --oneline")
    assert "lr 2" in log and "lr 1" in log
    tools.git("reset --hard HEAD~1")
    assert (ws / "train.py").read_text() == "lr = 1\n"
    assert not marker.exists(), "a hook or a config command ran on the host"
    assert not (ws / ".git").exists()
    with pytest.raises(ToolError, match="failed"):
        tools.git("checkout no-such-branch")


# ------------------------------------------------------------------------------- scripted agent


def _lr(text: str, lr: str) -> str:
    assert "lr = 6e-4" in text
    return text.replace("lr = 6e-4", f"lr = {lr}")


def test_a_scripted_agent_lowers_val_bpb_and_keeps_the_better_commit(run_dir: Path, shared_data: Path) -> None:
    text = shared_data / "text" / "tinyshakespeare.txt"
    params = {"corpus": str(text) if text.is_file() else "stdlib", "time_budget_s": 60.0, "grace_s": 30.0,
              "eval_tokens": 512, "eval_time_limit_s": 120.0}
    seed = make("nanogpt/v2", **params).seed_files()["train.py"]  # type: ignore[attr-defined]
    capped = seed.replace("max_steps = None", "max_steps = 15")  # same steps whatever the machine's load

    def keep_or_revert(request: ModelRequest) -> ModelReply:
        """Reads the last experiment's verdict; reverts its commit unless it is the new best."""
        last = request.messages[-1]["content"]
        verdict = " ".join(b.get("content", "") if isinstance(b.get("content"), str) else json.dumps(b.get("content"))
                           for b in last if b.get("type") == "tool_result")
        if "NEW BEST" in verdict:
            return say("Better: keep it.", call("git", command="log --oneline -3"))
        return say("Worse: back to the previous commit.", call("git", command="reset --hard HEAD~1"))

    script: list[Any] = [
        say("", call("write_file", path="train.py", content=capped)),
        say("", call("git", command='commit -am "cap training at 15 steps for quick comparisons"')),
        say("", call("run_experiment", description="baseline, lr 6e-4")),
        say("", call("wait_experiment")),
        say("", call("write_file", path="train.py", content=_lr(capped, "3e-5"))),
        say("", call("git", command='commit -am "lr 3e-5"')),
        say("", call("run_experiment", description="lr 6e-4 -> 3e-5")),
        say("", call("wait_experiment")),
        keep_or_revert,
        say("", call("write_file", path="train.py", content=_lr(capped, "3e-3"))),
        say("", call("git", command='commit -am "lr 3e-3"')),
        say("", call("run_experiment", description="lr 6e-4 -> 3e-3")),
        say("", call("wait_experiment")),
        keep_or_revert,
        say("", call("get_experiments")),
        say("Done.", call("finish", reason="lr 3e-3 trains fastest in 15 steps")),
    ]
    model = ScriptedModel(script)
    config = AgentConfig(models={"agent": ModelSpec(provider="scripted", name="inline")})
    agent = start_run("nanogpt/v2", task_params=params, budget={"experiments": 5}, config=config, run_dir=run_dir,
                      models={"agent": model})
    result = agent.optimize()

    exps = agent.domain.experiments()
    assert [e["status"] for e in exps] == ["OK", "OK", "OK"], [e.get("status") for e in exps]
    base, low, high = (e["score"] for e in exps)
    assert low > base > high  # lr 3e-5 learns less than 6e-4 in 15 steps; 3e-3 more
    assert high < 8.0 and result.final_score == high and result.chosen_by == "agent"
    assert result.final_candidate == exps[2]["candidate"]
    log = agent.tools["git"]({"command": "log --oneline"})
    assert "lr 3e-3" in log and "lr 3e-5" not in log  # the worse commit was reset away, the better one kept
    assert "lr = 3e-3" in (agent.workspace.root / "train.py").read_text()
    # The store holds exactly what ran: the manifest of the kept commit's files.
    run = agent.run
    source = json.loads(run.candidate_source(exps[2]["candidate"]))
    assert "lr = 3e-3" in source["files"]["train.py"] and set(source["files"]) >= {"train.py", "model.py", ".gitignore"}
    assert exps[2]["commit"] and not exps[2]["dirty"]
    used = run.used()
    assert used[Unit.EXPERIMENTS] == 3 and used[Unit.GPU_SECONDS] > 0  # a (fake) GPU slot: its seconds are charged
    assert "## Experiments" in agent.snapshot_text() and "gpu0 (fake GPU) free" in agent.snapshot_text()
    # Scratch folders (repository copies, checkpoints) are gone; the logs stay in the run directory.
    assert not list((run_dir / "experiments").glob("exp-*"))
    assert all(Path(e["log_path"]).is_file() and Path(e["log_path"]).is_relative_to(run_dir / run.id) for e in exps)


# ------------------------------------------------------------------------- kill -9 and resume

_DRIVER = """
import sys
from pathlib import Path
from reasearch.agent import Agent, AgentConfig, ModelSpec
from reasearch.evaluators.testing import ToyRepoTrainingTask
from reasearch.runs import Run, open_store
cfg = AgentConfig(models={"agent": ModelSpec(provider="scripted", name=sys.argv[2])})
store = open_store(sys.argv[1])
run = Run.create(store, task=ToyRepoTrainingTask(grace_s=2.0), budget={"experiments": 5},
                 config={"driver": "agent", "agent": cfg.to_dict()})
print(run.id, flush=True)
Agent(run, Path(sys.argv[1]) / run.id, config=cfg).optimize()
"""


def _training_processes(root: Path) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.readlink(f"/proc/{name}/cwd").startswith(str(root)):
                    out.append(int(name))
            except OSError:
                pass
    return out


def _start_driver(run_dir: Path, replies: list[Any], started: int, what: str) -> tuple[subprocess.Popen[str], str]:
    """Runs the scripted agent in a driver process of its own session; returns once ``started``
    experiments logged their first step (the driver is killed if that never happens)."""
    script = run_dir / "script.json"
    script.write_text(json.dumps([r.to_dict() for r in replies]))
    proc = subprocess.Popen([sys.executable, "-c", _DRIVER, str(run_dir), str(script)], stdout=subprocess.PIPE,
                            text=True, start_new_session=True, env=dict(os.environ))
    try:
        assert proc.stdout is not None
        run_id = proc.stdout.readline().strip()
        deadline = time.monotonic() + 120
        while sum('"step": 0' in p.read_text() for p in run_dir.glob("*/experiments/step-*/train.log")) < started:
            assert proc.poll() is None and time.monotonic() < deadline, what
            time.sleep(0.05)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return proc, run_id


def _kill_driver_and_resume(proc: subprocess.Popen[str], experiments: Path, known: set[int], run_dir: Path,
                            run_id: str) -> tuple[Any, Any, Any]:
    """kill -9 of the driver's process group; then nothing of it may run, hold a slot or be charged; then
    the run is resumed to its end. Returns the resumed agent, its result and the store."""
    from reasearch.engine.gpu import slot_status

    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()
    deadline = time.monotonic() + 20
    while _training_processes(experiments) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _training_processes(experiments) == [], "a training process outlived its driver"
    reap_orphans(known)
    assert all(s["free"] for s in slot_status("gpu")), "a killed experiment still holds its slot"
    store = open_store(run_dir)
    assert store.evaluations(run_id) == [] and Run.open(store, run_id).used()[Unit.EXPERIMENTS] == 0
    agent = open_agent(run_id, run_dir=run_dir, store=store)
    result = agent.optimize()
    assert agent.run.state is RunState.FINISHED and result.chosen_by == "agent"
    return agent, result, store


def test_kill_9_mid_experiment_then_resume_orphans_nothing_and_charges_once(run_dir: Path) -> None:
    replies = [
        say("", call("write_file", path="settings.json", content='{"x": 2.0, "sleep_s": 120}')),
        say("", call("run_experiment", description="slow: killed with its driver", time_budget_s=50)),
        say("", call("write_file", path="settings.json", content='{"x": 2.5, "sleep_s": 0}')),
        say("", call("run_experiment", description="fast", time_budget_s=20)),
        say("", call("finish", reason="the fast experiment")),
    ]
    experiments = run_dir / "experiments"
    known = set(children())
    proc, run_id = _start_driver(run_dir, replies, 1, "the experiment never started")
    try:
        assert _training_processes(experiments), "the training process is not visible"
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    agent, result, store = _kill_driver_and_resume(proc, experiments, known, run_dir, run_id)
    run = agent.run
    interrupted = run.events(kind="experiment_interrupted")
    assert len(interrupted) == 1 and interrupted[0].payload["description"] == "slow: killed with its driver"
    evals = store.evaluations(run_id)
    assert len(evals) == 1 and evals[0].result.status.value == "OK" and evals[0].result.score == pytest.approx(-0.25)
    assert result.final_candidate == evals[0].candidate_id
    used = run.used()
    assert used[Unit.EXPERIMENTS] == 1 and used[Unit.GPU_SECONDS] > 0  # the interrupted one is never charged
    ledger = store.ledger(run_id)
    assert len({(e.step, e.unit, e.note) for e in ledger}) == len(ledger)
    statuses = [e["status"] for e in agent.domain.experiments()]
    assert statuses == ["INTERRUPTED", "OK"]


# ------------------------------------------------------------------ experiments in the background


def _scripted_agent(run_dir: Path, task: Any, script: list[Any], *, experiments: int) -> tuple[Run, Any]:
    """A run of ``task`` with a budget of ``experiments`` and an agent driven by ``script``."""
    from reasearch.agent import Agent
    from reasearch.runs.testing import InstanceExecutor

    cfg = AgentConfig(models={"agent": ModelSpec(provider="scripted", name="inline")})
    run = Run.create(
        open_store(run_dir),
        task=task,
        budget={"experiments": experiments},
        executor=InstanceExecutor(task),
        config={"driver": "agent", "agent": cfg.to_dict()},
    )
    return run, Agent(run, run_dir / run.id, config=cfg, models={"agent": ScriptedModel(script)})


def _last_tool_text(request: ModelRequest) -> str:
    last = request.messages[-1]["content"]
    return "\n".join(b["content"] if isinstance(b.get("content"), str) else json.dumps(b.get("content"))
                     for b in last if b.get("type") == "tool_result")


def test_a_running_experiment_is_listed_its_log_read_live_and_it_can_be_stopped(run_dir: Path) -> None:
    from reasearch.evaluators.testing import ToyRepoTrainingTask

    task = ToyRepoTrainingTask(grace_s=5.0, sandbox_mode="process")
    seen: dict[str, Any] = {}

    def read_the_log_when_training_printed(request: ModelRequest) -> ModelReply:
        text = _last_tool_text(request)
        seen["started"] = text
        step = int(text.split("experiment ", 1)[1].split()[0])
        seen["step"] = step
        log = run_dir / seen["run_id"] / "experiments" / f"step-{step:05d}" / "train.log"
        deadline = time.monotonic() + 120
        while not (log.is_file() and '"step": 0' in log.read_text()):  # the job's first line, long before it ends
            assert time.monotonic() < deadline, "the experiment printed nothing"
            time.sleep(0.05)
        return say("", call("read_log", step=step))

    def keep(key: str, reply: ModelReply) -> Any:
        def item(request: ModelRequest) -> ModelReply:
            seen[key] = _last_tool_text(request)
            return reply
        return item

    def stop(request: ModelRequest) -> ModelReply:
        seen["listed"] = _last_tool_text(request)
        return say("", call("stop_experiment", step=seen["step"]))

    script: list[Any] = [
        say("", call("write_file", path="settings.json", content='{"x": 2.0, "sleep_s": 300}')),
        say("", call("run_experiment", description="slow", time_budget_s=60, wait_s=0)),
        read_the_log_when_training_printed,
        keep("log", say("", call("get_experiments"))),
        stop,
        keep("stopped", say("", call("write_file", path="settings.json", content='{"x": 2.5, "sleep_s": 0}'))),
        say("", call("run_experiment", description="fast", time_budget_s=30, wait_s=0)),
        say("", call("finish", reason="the fast one")),
    ]
    run, agent = _scripted_agent(run_dir, task, script, experiments=5)
    seen["run_id"] = run.id
    result = agent.optimize()

    step = seen["step"]
    assert f"experiment {step} started" in seen["started"]
    # The log was read while the experiment ran, and showed what it had printed so far.
    assert f"[log of experiment {step} (running)" in seen["log"] and '"step": 0' in seen["log"]
    assert '"step": 1' not in seen["log"]
    assert f"{step:>4}  RUNNING: training on gpu0" in seen["listed"] and "s elapsed (budget 60 s)" in seen["listed"]
    # The snapshot of the turn after the start listed it as running, on its slot, held by this run.
    snapshots = [e.payload["text"] for e in run.events(kind="snapshot")]
    assert any("Running (1):" in t and "busy (this run)" in t and "Slots (1/1 in use)" in t for t in snapshots)
    assert (
        f"experiment {step} (" in seen["stopped"]
        and ": CRASH" in seen["stopped"]
        and "stopped on request" in seen["stopped"]
    )
    exps = agent.domain.experiments()
    assert [e["status"] for e in exps] == ["CRASH", "OK"] and exps[0]["stopped"] is True
    assert result.final_score == pytest.approx(-0.25) and result.final_candidate == exps[1]["candidate"]
    used = run.used()
    assert used[Unit.EXPERIMENTS] == 2  # the stopped one ran: charged once, with its GPU-seconds
    assert [e.result.status.value for e in run.store.evaluations(run.id)] == ["CRASH", "OK"]
    assert agent.domain.running() == []
    # Following a log by offset: the first chunk, then the rest from the offset it gave.
    head = agent.tools["read_log"]({"step": step, "offset": 0})
    size = int(head.rsplit(" of ", 1)[1].split(";")[0])
    assert f"bytes 0-{size} of {size}; next offset {size}]" in head and '"step": 0' in head
    assert agent.tools["read_log"]({"step": step, "offset": size + 999}).endswith(f"next offset {size}]\n")
    # A log replaced by a symlink (to a host secret) is refused, never followed.
    secret = run_dir / "secret.txt"
    secret.write_text("host secret")
    log = Path(exps[1]["log_path"])
    log.unlink()
    log.symlink_to(secret)
    with pytest.raises(ToolError, match="cannot be read"):
        agent.tools["read_log"]({"step": exps[1]["step"]})


def test_run_experiment_waits_while_every_slot_runs_one_of_the_runs_experiments(run_dir: Path) -> None:
    from reasearch.evaluators.testing import ToyRepoTrainingTask

    task = ToyRepoTrainingTask(grace_s=5.0, sandbox_mode="process")
    script: list[Any] = [
        say("", call("write_file", path="settings.json", content='{"x": 2.0, "sleep_s": 2}')),
        say("", call("run_experiment", description="first", time_budget_s=30, wait_s=0)),
        say("", call("write_file", path="settings.json", content='{"x": 2.5, "sleep_s": 0}')),
        say("", call("run_experiment", description="second: waits for the only slot", time_budget_s=30, wait_s=0)),
        say("", call("wait_experiment")),
        say("", call("finish", reason="done")),
    ]
    run, agent = _scripted_agent(run_dir, task, script, experiments=5)
    agent.optimize()
    texts = [e.payload["text"] for e in run.events(kind="tool_result")]
    second = next(t for t in texts if "waited" in t)
    assert "for one of this run's experiments to free a slot" in second
    evals = run.store.evaluations(run.id)
    assert [e.result.status.value for e in evals] == ["OK", "OK"]
    first, then = (e.result.metrics for e in evals)
    assert then["started_at"] >= first["started_at"] + first["train_s"] - 0.5  # never both on the one slot


def test_kill_9_with_two_experiments_running_then_resume(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REASEARCH_FAKE_GPUS", "2")
    replies = [
        say("", call("write_file", path="settings.json", content='{"x": 2.0, "sleep_s": 120}')),
        say("", call("run_experiment", description="slow A", time_budget_s=50, wait_s=0)),
        say("", call("write_file", path="settings.json", content='{"x": 1.0, "sleep_s": 120}')),
        say("", call("run_experiment", description="slow B", time_budget_s=50, wait_s=0)),
        say("", call("wait_experiment", timeout_s=300)),  # the driver is killed here
        say("", call("write_file", path="settings.json", content='{"x": 2.5, "sleep_s": 0}')),
        say("", call("run_experiment", description="fast", time_budget_s=20, wait_s=0)),
        say("", call("finish", reason="the fast experiment")),
    ]
    experiments = run_dir / "experiments"
    known = set(children())
    proc, run_id = _start_driver(run_dir, replies, 2, "the two experiments never both started")
    try:
        assert len(_training_processes(experiments)) >= 2
        from reasearch.engine.gpu import slot_status

        assert not any(s["free"] for s in slot_status("gpu")), "two experiments, two (fake) GPUs"
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    agent, result, store = _kill_driver_and_resume(proc, experiments, known, run_dir, run_id)
    run = agent.run
    interrupted = sorted(e.payload["description"] for e in run.events(kind="experiment_interrupted"))
    assert interrupted == ["slow A", "slow B"]
    evals = store.evaluations(run_id)
    assert len(evals) == 1 and evals[0].result.score == pytest.approx(-0.25)
    assert run.used()[Unit.EXPERIMENTS] == 1
    ledger = store.ledger(run_id)
    assert len({(e.step, e.unit, e.note) for e in ledger}) == len(ledger)
    assert [e["status"] for e in agent.domain.experiments()] == ["INTERRUPTED", "INTERRUPTED", "OK"]
    # The wait that was cut by the kill ran again after the resume, and said so.
    waits = [e.payload["text"] for e in run.events(kind="tool_result") if "interrupted" in e.payload["text"]]
    assert waits and "nothing was recorded or charged" in waits[0]
    # The dead driver's scratch folders were pruned (no live process held their locks).
    assert not list(experiments.glob("exp-*"))


def test_over_mcp_a_background_experiment_reaches_the_history_and_finish_waits_for_it(run_dir: Path) -> None:
    from reasearch.agent.mcp.driver import McpDriver, _agent
    from reasearch.evaluators.testing import ToyRepoTrainingTask
    from reasearch.runs.testing import InstanceExecutor

    task = ToyRepoTrainingTask(grace_s=5.0, sandbox_mode="process")
    cfg = AgentConfig(models={"agent": ModelSpec(provider="scripted", name="mcp-client")})
    run = Run.create(open_store(run_dir), task=task, budget={"experiments": 3}, executor=InstanceExecutor(task),
                     config={"driver": "mcp", "agent": cfg.to_dict(), "mcp": {"max_calls": 50}})
    agent = _agent(run, run_dir / run.id, exec_fn=None)
    agent.begin()
    driver = McpDriver(agent, max_calls=50)
    driver.call("write_file", {"path": "settings.json", "content": '{"x": 2.5, "sleep_s": 1}'})
    started = driver.call("run_experiment", {"description": "x 2.5", "wait_s": 0})
    assert not started.is_error and "started" in started.text
    done = driver.call("finish", {"reason": "the only one"})  # waits for the running experiment, then chooses it
    assert not done.is_error, done.text
    assert run.state is RunState.FINISHED
    assert run.store.get_run(run.id).final_candidate == run.store.evaluations(run.id)[0].candidate_id
    # A reconnect rebuilds the same history from the journal (the result was handed over at finish's step).
    again = McpDriver(_agent(Run.open(run.store, run.id), run_dir / run.id, exec_fn=None), max_calls=50)
    assert [r.score for r in again.agent.history] == [pytest.approx(-0.25)]


def test_an_experiment_that_ends_during_a_compaction_is_recorded_once(run_dir: Path) -> None:
    from reasearch.evaluators.testing import ToyRepoTrainingTask

    task = ToyRepoTrainingTask(grace_s=5.0, sandbox_mode="process")
    ended: dict[str, bool] = {}

    def summary_after_the_end(request: ModelRequest) -> ModelReply:
        # The summarizer's call: hold it until the experiment's thread has recorded its result.
        deadline = time.monotonic() + 120
        while not run.events(kind="experiment"):
            assert time.monotonic() < deadline, "the experiment never ended"
            time.sleep(0.05)
        ended["during_compaction"] = not run.events(kind="compaction")
        return say("Summary: one experiment ran (x 2.5).")

    script: list[Any] = [
        say("", call("write_file", path="settings.json", content='{"x": 2.5, "sleep_s": 1}')),
        say("", call("run_experiment", description="x 2.5", wait_s=0), call("compact")),
        summary_after_the_end,
        say("", call("get_experiments")),
        say("", call("finish", reason="x 2.5")),
    ]
    run, agent = _scripted_agent(run_dir, task, script, experiments=3)
    result = agent.optimize()
    assert ended == {"during_compaction": True} and len(run.events(kind="compaction")) == 1
    assert len(run.events(kind="experiment")) == 1 and len(run.store.evaluations(run.id)) == 1
    assert run.used()[Unit.EXPERIMENTS] == 1
    assert [r.step for r in agent.history] == [run.events(kind="experiment")[0].step]  # handed over once
    assert result.final_score == pytest.approx(-0.25) and result.chosen_by == "agent"
