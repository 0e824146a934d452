"""Training tasks in the agent: the git tool's boundary, a scripted agent that lowers val_bpb by editing
the learning rate and keeping the better commit, and kill -9 of the driver mid-experiment then resume."""

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
from agent_helpers import children, reap_orphans

from reasearch.agent import AgentConfig, ModelSpec, open_agent, start_run
from reasearch.agent.messages import ModelReply, ModelRequest
from reasearch.agent.testing import ScriptedModel, call, say
from reasearch.agent.tools.git import GitRepo, GitTools, check_git_args
from reasearch.agent.tools.schema import ToolError
from reasearch.evaluators import make
from reasearch.runs import Run, RunState, Unit, open_store


@pytest.fixture()
def run_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="reasearch-agent-ml-", dir="/var/tmp"))
    d.chmod(0o711)
    monkeypatch.setenv("REASEARCH_EXPERIMENTS_DIR", str(d / "experiments"))
    monkeypatch.setenv("REASEARCH_LEASE_DIR", str(tmp_path / "leases"))
    monkeypatch.setenv("REASEARCH_FAKE_GPUS", "1")
    monkeypatch.setenv("REASEARCH_CPUS_PER_SLOT", "1")  # one torch thread: no spinning OpenMP on busy cores
    yield d
    shutil.rmtree(d, ignore_errors=True)


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
    # A workspace-local .git (the agent can write files) is ignored: the git dir lives outside.
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text(f"[core]\n\tfsmonitor = touch {marker}\n\tpager = touch {marker}\n")
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
    assert not (ws / ".git" / "HEAD").exists()
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
    seed = make("nanogpt/v1", **params).seed_files()["train.py"]  # type: ignore[attr-defined]
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
        say("", call("write_file", path="train.py", content=_lr(capped, "3e-5"))),
        say("", call("git", command='commit -am "lr 3e-5"')),
        say("", call("run_experiment", description="lr 6e-4 -> 3e-5")),
        keep_or_revert,
        say("", call("write_file", path="train.py", content=_lr(capped, "3e-3"))),
        say("", call("git", command='commit -am "lr 3e-3"')),
        say("", call("run_experiment", description="lr 6e-4 -> 3e-3")),
        keep_or_revert,
        say("", call("get_experiments")),
        say("Done.", call("finish", reason="lr 3e-3 trains fastest in 15 steps")),
    ]
    model = ScriptedModel(script)
    config = AgentConfig(models={"agent": ModelSpec(provider="scripted", name="inline")})
    agent = start_run("nanogpt/v1", task_params=params, budget={"experiments": 5}, config=config, run_dir=run_dir,
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
    assert "## Experiments" in agent.snapshot_text() and "Slots: gpu0" in agent.snapshot_text()


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


def test_kill_9_mid_experiment_then_resume_orphans_nothing_and_charges_once(run_dir: Path) -> None:
    script = run_dir / "script.json"
    replies = [
        say("", call("write_file", path="settings.json", content='{"x": 2.0, "sleep_s": 120}')),
        say("", call("run_experiment", description="slow: killed with its driver", time_budget_s=50)),
        say("", call("write_file", path="settings.json", content='{"x": 2.5, "sleep_s": 0}')),
        say("", call("run_experiment", description="fast", time_budget_s=20)),
        say("", call("finish", reason="the fast experiment")),
    ]
    script.write_text(json.dumps([r.to_dict() for r in replies]))
    experiments = run_dir / "experiments"
    known = set(children())
    proc = subprocess.Popen([sys.executable, "-c", _DRIVER, str(run_dir), str(script)], stdout=subprocess.PIPE,
                            text=True, start_new_session=True, env=dict(os.environ))
    try:
        assert proc.stdout is not None
        run_id = proc.stdout.readline().strip()
        deadline = time.monotonic() + 120
        while not any('"step": 0' in p.read_text() for p in experiments.glob("exp-*/train.log")):
            assert proc.poll() is None and time.monotonic() < deadline, "the experiment never started"
            time.sleep(0.05)
        assert _training_processes(experiments), "the training process is not visible"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    deadline = time.monotonic() + 20
    while _training_processes(experiments) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _training_processes(experiments) == [], "a training process outlived its driver"
    reap_orphans(known)
    from reasearch.engine.gpu import slot_status

    assert all(s["free"] for s in slot_status("gpu")), "the killed experiment still holds its slot"

    store = open_store(run_dir)
    assert store.evaluations(run_id) == [] and Run.open(store, run_id).used()[Unit.EXPERIMENTS] == 0
    agent = open_agent(run_id, run_dir=run_dir, store=store)
    result = agent.optimize()
    run = agent.run
    assert run.state is RunState.FINISHED and result.chosen_by == "agent"
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
