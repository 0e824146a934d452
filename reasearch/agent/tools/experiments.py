"""The toolset of training tasks: ``run_experiment``, ``wait_experiment``, ``stop_experiment``,
``get_experiments``, ``read_log`` (and ``git``).

The candidate is the workspace repository (git directory outside the workspace: see
:mod:`reasearch.agent.tools.git`). ``run_experiment`` snapshots the files git would see (tracked and
untracked-but-not-ignored) into the canonical repository text (:mod:`reasearch.evaluators.repo`), so
the store records exactly what ran, content-addressed, with the commit it sat on.

Experiments run in the background (:mod:`reasearch.agent.tools.experiment_runner`: the threads, the
slots, how each ended, and what a resume records of the ones a dead driver started). ``run_experiment``
starts one and returns its id (its step) at once -- after ``wait_s`` seconds at most, so an experiment
that fails at once reports its failure right away. ``read_log`` reads its log while it runs, by tail or
from a byte offset; ``get_experiments`` and the snapshot list running experiments with their state and
elapsed time, and the slots; ``wait_experiment`` waits for one, ``stop_experiment`` stops one (recorded
``CRASH``, no score, charged for what it used). Results reach the agent's history through
:meth:`ExperimentTools.collect`, which the loop calls and journals before each step, so a resumed run
replays them at the same steps. At ``finish`` (the agent's or the harness's), running experiments are
waited for, so every experiment that was paid for is recorded and can be the final choice.

Trust boundary: the workspace and the experiment folders are written by the model and the candidate's
training code; they are read through the guarded reader, and tool arguments are checked before use.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from reasearch.agent.snapshot import EvalRecord, best_of, fmt_score
from reasearch.agent.tools.domain import AgentDomain
from reasearch.agent.tools.experiment_runner import (
    ExperimentRunner,
    read_experiment_file,
    read_status,
    start_fields,
    touch,
)
from reasearch.agent.tools.git import GitRepo, GitTools
from reasearch.agent.tools.schema import ToolError, ToolOutput, tool
from reasearch.errors import ConfigError
from reasearch.evaluators.repo import encode_repo, read_repo_dir
from reasearch.hostfs.guarded_path import Root, UnsafePathError
from reasearch.runs.events import EventKind

if TYPE_CHECKING:
    from reasearch.agent.tools.context import ToolContext
    from reasearch.evaluators.training import TrainingTask

__all__ = ["GITIGNORE", "ExperimentTools", "experiment_toolset", "setup_repository"]

GITIGNORE = "# kept out of experiments (the harness's files, data and checkpoints)\nTASK.md\nlessons.md\n" \
            "__pycache__/\n*.pyc\nout/\ndata/\n*.pt\n*.bin\n*.safetensors\n"

def setup_repository(workspace_root: Path, repo: GitRepo, files: dict[str, str]) -> str:
    """Writes the seed repository into the workspace and commits it; returns the commit."""
    repo.init()
    if repo.head() is None:
        fs = Root(workspace_root)
        try:
            for path, text in {**files, ".gitignore": GITIGNORE}.items():
                fs.write_bytes(path, text.encode())
        finally:
            fs.close()
        repo.run(["add", "-A"])
        repo.run(["commit", "-q", "-m", "seed"])
    head = repo.head()
    assert head is not None
    return head


def experiment_toolset(ctx: ToolContext, task: TrainingTask) -> tuple[ExperimentTools, list[object]]:
    """The domain of a repository task (``task``, the context's task as its type): its experiment tools,
    and the other tools it brings (git, and ``submit`` for a task with a private split). The git directory
    is ``<run>/git``, beside the workspace (never inside it)."""
    from reasearch.agent.tools.submissions import submission_toolset

    repo = GitRepo(ctx.workspace.root, ctx.workspace.root.parent / "git")
    subs = submission_toolset(ctx)  # `submit`, for a task with a private split
    return ExperimentTools(ctx, repo, task=task, submissions=subs[0] if subs else None), [GitTools(repo), *subs]


def _num(x: Any, digits: int = 4) -> str:
    return "-" if not isinstance(x, (int, float)) or isinstance(x, bool) else f"{x:.{digits}g}"


class ExperimentTools(AgentDomain):
    """Run experiments on the workspace repository in the background; read their history and logs.

    Args:
        ctx: the tool context (run, task, workspace, the loop's step/parent/history).
        repo: the workspace's git repository.
        task: the context's task, as the training task it is.
        submissions: the task's ``submit`` tools (their lines join the snapshot), if it has a private split.
    """

    current_label: ClassVar[str] = "Current repository"
    start_message: ClassVar[str] = (
        "Begin. TASK.md holds the task; the workspace is a git repository (train.py, model.py, ...) and "
        "is the candidate; lessons.md is your memory. run_experiment starts an experiment in the "
        "background and returns its id: read_log(id) follows its log while it runs, wait_experiment(id) "
        "returns its result, stop_experiment(id) ends it. Commit what you want to keep.")

    def __init__(self, ctx: ToolContext, repo: GitRepo, *, task: TrainingTask, submissions: Any = None) -> None:
        super().__init__(ctx)
        self.task = task
        self.repo = repo
        self.submissions = submissions  # SubmissionTools: its lines join the snapshot
        self.folder = ctx.workspace.root.parent / "experiments"
        self.runner = ExperimentRunner(ctx, self.folder)

    # ------------------------------------------------------------ setup and snapshot
    def setup_workspace(self) -> None:
        """Step 0: the seed repository, committed."""
        setup_repository(self.ctx.workspace.root, self.repo, self.task.seed_files())

    def experiments(self) -> list[dict[str, Any]]:
        """Ended experiments of the run (finished, stopped, interrupted, failed to start), by step."""
        return self.runner.experiments()

    def running(self) -> list[dict[str, Any]]:
        """Experiments of this driver still running: step, description, state (from the task), elapsed."""
        return self.runner.running()

    def current_text(self) -> str:
        """The snapshot's "current code" line: the repository's HEAD and whether it has uncommitted changes."""
        try:
            head, dirty = self.repo.head(), self.repo.dirty()
        except ConfigError as exc:
            return f"(unused: the candidate is the workspace repository; git failed: {exc})"
        return (f"(unused: the candidate is the workspace repository) HEAD {head[:10] if head else 'none'}"
                + (", uncommitted changes" if dirty else ", clean"))

    def snapshot_lines(self, recent: int = 5) -> list[str]:
        """Best experiment and commit, the recent ones, the running ones and the slots (added to the snapshot)."""
        exps = self.experiments()
        spec = self.ctx.task.spec
        ok = [e for e in exps if e.get("status") == "OK" and isinstance(e.get("score"), (int, float))]
        lines = ["## Experiments"]
        if ok:
            best = ok[0]
            for e in ok[1:]:
                if spec.is_better(e["score"], best["score"]):
                    best = e
            lines.append(f"Best: step {best['step']}, score {fmt_score(best['score'])}, commit "
                         f"{(best.get('commit') or '-')[:10]}{' +uncommitted' if best.get('dirty') else ''}: "
                         f"{best.get('description', '')[:100]}")
        lines.append(f"{len(exps)} experiment(s) ended so far" + (":" if exps else "."))
        for e in exps[-recent:]:
            lines.append(f"  step {e['step']:>4}  {e.get('status', '?'):<11} score {fmt_score(e.get('score'))}  "
                         f"train {_num(e.get('train_s'))} s  gpu {_num(e.get('gpu_s'))} s  "
                         f"{(e.get('commit') or '-')[:8]}  {e.get('description', '')[:60]}")
        running = self.running()
        if running:
            lines.append(f"Running ({len(running)}):")
            for r in running:
                lines.append(f"  step {r['step']:>4}  {r['state']}{' on ' + str(r['slot']) if r.get('slot') else ''}, "
                             f"{r['elapsed_s']:g} s elapsed, budget {r['time_budget_s']:g} s: {r['description'][:60]}")
        else:
            lines.append("Running: none")
        try:
            from reasearch.engine.gpu import slot_status

            slots = slot_status(self.task.params.slot)
            me = os.getpid()
            lines.append(f"Slots ({sum(1 for s in slots if not s['free'])}/{len(slots)} in use): " + "; ".join(
                f"{s['slot']} " + ("free" if s["free"] else "busy (this run)" if s["holder_pid"] == me
                                    else f"busy (pid {s['holder_pid']})") for s in slots))
        except Exception as exc:  # the snapshot never fails over a status line
            lines.append(f"Slots: unknown ({exc})")
        if self.submissions is not None:
            lines += self.submissions.snapshot_lines()
        return lines

    # ------------------------------------------------------------ the loop's hooks
    def collect(self, history: tuple[EvalRecord, ...]) -> list[dict[str, Any]]:
        """Results that ended since the loop last looked, as tool-result data (``{"evaluation": ...}``).

        Called (live only) before every step and journaled there by the loop. Also settles the experiments
        an earlier driver started and never ended: their stored result if there is one, else
        ``experiment_interrupted``.
        """
        self.runner.settle_orphans()
        seen = {r.step for r in history}
        return [{"evaluation": e["evaluation"], "experiment_step": e["step"]} for e in self.experiments()
                if isinstance(e.get("evaluation"), dict) and e["step"] not in seen]

    def settle(self, *, stop: bool = False) -> None:
        """Waits until no experiment of this driver runs (``stop``: stops them first)."""
        self.runner.settle(stop=stop)

    # ------------------------------------------------------------ tools
    @tool
    def run_experiment(self, description: str, time_budget_s: float | None = None, wait_s: float = 3.0) -> ToolOutput:
        """Starts training and scoring the workspace repository as it is now (uncommitted changes included).

        Returns the experiment's id at once (after wait_s seconds at most, to report a quick failure): train.py
        runs in the background in a fresh sandbox on a leased GPU (or CPU) slot within the time budget, then the
        trusted evaluator scores the saved checkpoint. Follow it with read_log(id) while it runs, get_experiments(),
        wait_experiment(id) for its result, stop_experiment(id) to end it. Costs one experiment (and its
        GPU-seconds), recorded when it ends. Commit the state you want to keep; the result names the commit.
        When every slot runs one of your experiments, this waits until one of them ends.

        Args:
            description: what this experiment tests (e.g. 'lr 6e-4 -> 3e-3').
            time_budget_s: training seconds (default: the task's budget; capped at its maximum).
            wait_s: seconds to wait for the result before returning (0-60; the experiment goes on either way).
        """
        ctx, run = self.ctx, self.ctx.run
        state = ctx.state()
        step = state.step
        if any(e.step == step for e in run.events(kind=EventKind.EXPERIMENT_START)):
            return self._settled_text(self.runner.settle_step(step))
        if not description.strip():
            raise ToolError("describe the experiment (what it changes and why)")
        task = self.task
        budget = float(time_budget_s) if time_budget_s is not None else float(task.params.time_budget_s)
        cap = float(task.params.max_time_budget_s)
        if not (math.isfinite(budget) and 0 < budget <= cap):
            raise ToolError(f"time_budget_s must be > 0 and at most {cap:g} s, not {time_budget_s}")
        wait = float(wait_s)
        if not (math.isfinite(wait) and 0 <= wait <= 60):
            raise ToolError(f"wait_s must be between 0 and 60, not {wait_s}")
        try:
            files = read_repo_dir(ctx.workspace.root, listed=self.repo.listed_files())
            source = encode_repo(files, time_budget_s=budget)
        except ConfigError as exc:
            raise ToolError(f"the repository cannot be run: {exc}") from None
        head, dirty = self.repo.head(), self.repo.dirty()
        where = f"{head[:10] if head else 'no commit'}{' +uncommitted changes' if dirty else ''}"
        from reasearch.evaluators.base import candidate_sha256

        waited = self.runner.wait_for_a_slot()
        cid = candidate_sha256(source)
        folder = self.folder / f"step-{step:05d}"
        start = {"description": description[:500], "commit": head, "dirty": dirty, "candidate": cid,
                 "time_budget_s": budget, "ts": time.time(), "folder": str(folder)}
        r = self.runner.start(step, start, source, state.parent, where)
        if r.done.wait(wait):
            return self._result_text(step)
        note = f" (waited {waited:.0f} s for one of this run's experiments to free a slot)" if waited >= 1 else ""
        status = read_status(folder)
        text = (f"experiment {step} started{note} on {where}: {status.get('state', 'starting')}"
                f"{' on ' + status['slot'] if status.get('slot') else ''}, budget {budget:g} s.\n"
                f"read_log(step={step}) follows its log; wait_experiment(step={step}) waits for its result; "
                f"stop_experiment(step={step}) stops it.")
        return ToolOutput(text, {"experiment": {"step": step, "status": "RUNNING", "candidate": cid}})

    def _settled_text(self, exp: dict[str, Any]) -> ToolOutput:
        if exp.get("status") == "INTERRUPTED":
            text = (f"the experiment of step {exp['step']} ({exp.get('description')}) was interrupted: the driver "
                    "stopped while it ran. Its training process was killed with the driver, nothing was recorded "
                    "or charged. Call run_experiment again to run it.")
            return ToolOutput(
                text, {"experiment": {**start_fields(exp), "step": exp["step"], "status": "INTERRUPTED"}}
            )
        return self._result_text(exp["step"])

    def _result_text(self, step: int) -> ToolOutput:
        """What an ended experiment did, for the agent (the blocking ``run_experiment``'s old answer)."""
        exp = next((e for e in self.experiments() if e["step"] == step), None)
        if exp is None:
            raise ToolError(f"experiment {step} has not ended")
        if exp.get("status") == "INTERRUPTED":
            return self._settled_text(exp)
        where = f"{(exp.get('commit') or 'no commit')[:10]}{' +uncommitted changes' if exp.get('dirty') else ''}"
        lines = [f"experiment {step} ({where}): {exp.get('status')}"]
        score = exp.get("score")
        if isinstance(score, (int, float)):
            lines.append(f"score: {fmt_score(score)}")
            others = [r for r in self.ctx.state().history if r.step != step]
            before = best_of(others, self.ctx.task.spec)
            if before is None or self.ctx.task.spec.is_better(score, before.score):
                lines.append("NEW BEST" + (f" (previous {fmt_score(before.score)})" if before else ""))
            else:
                lines.append(f"not better than the best {fmt_score(before.score)} (step {before.step})")
        if exp.get("status") != "ERROR":
            lines.append(
                f"training {_num(exp.get('train_s'))} s of budget {_num(exp.get('time_budget_s'))} s on "
                f"{exp.get('slot', '?')}, GPU-seconds {_num(exp.get('gpu_s'))}, last step {exp.get('last_step')}, "
                f"last train loss {exp.get('last_train_loss')}"
            )
        if exp.get("loss_curve"):
            lines.append("loss curve (step, loss): " + ", ".join(f"({s}, {v})" for s, v in exp["loss_curve"][:12]))
        if exp.get("feedback"):
            lines.append(str(exp["feedback"])[-3000:])
        lines.append(f"read_log(step={step}) shows the whole training log")
        return ToolOutput("\n".join(lines), {"experiment": {k: v for k, v in exp.items() if k != "feedback"}})

    def _pick(self, step: int | None) -> int:
        """The experiment a tool means: ``step``, else the most recent one (running or ended)."""
        known = {e["step"] for e in self.experiments()} | self.runner.steps()
        if not known:
            raise ToolError("no experiment yet: run_experiment starts one")
        if step is None:
            return max(known)
        if int(step) not in known:
            raise ToolError(f"no experiment has id {step}; ids (their steps): {sorted(known)}")
        return int(step)

    @tool
    def wait_experiment(self, step: int | None = None, timeout_s: float = 600.0) -> ToolOutput:
        """Waits for an experiment to end and returns its result (score, whether it is the new best, log tail).

        Args:
            step: the experiment's id (the step run_experiment gave; default: the most recent experiment).
            timeout_s: return after this many seconds if it is still running (it goes on; 1-3600).
        """
        step = self._pick(step)
        timeout = float(timeout_s)
        if not (math.isfinite(timeout) and 1 <= timeout <= 3600):
            raise ToolError(f"timeout_s must be between 1 and 3600, not {timeout_s}")
        r = self.runner.get(step)
        if r is not None and not r.done.wait(timeout):
            status = read_status(r.folder)
            return ToolOutput(
                f"experiment {step} is still running after {timeout:g} s more ({status.get('state', '?')}, "
                f"{time.time() - r.started:.0f} s elapsed of a {r.time_budget_s:g} s budget); "
                "wait_experiment again, read_log it, or stop_experiment it",
                {"experiment": {"step": step, "status": "RUNNING"}},
            )
        if r is None and not any(e["step"] == step for e in self.experiments()):
            return self._settled_text(self.runner.settle_step(step))
        return self._result_text(step)

    @tool
    def stop_experiment(self, step: int) -> ToolOutput:
        """Stops a running experiment: its training is killed, it is recorded as CRASH (stopped, no score) and
        charged for what it used. An experiment already in its trusted evaluation finishes that first.

        Args:
            step: the experiment's id (the step run_experiment gave).
        """
        step = self._pick(step)
        r = self.runner.get(step)
        if r is None or r.done.is_set():
            raise ToolError(
                f"experiment {step} is not running (it has ended: wait_experiment({step}) shows its result)"
            )
        touch(r.folder / "STOP")
        if not r.done.wait(120.0):
            return ToolOutput(f"experiment {step} was asked to stop and has not ended yet "
                              f"({read_status(r.folder).get('state', '?')}); wait_experiment({step}) shows its result",
                              {"experiment": {"step": step, "status": "RUNNING"}})
        return self._result_text(step)

    @tool
    def get_experiments(self, last: int = 20) -> str:
        """Lists the experiments: running ones (state, elapsed seconds) and ended ones (step, candidate, commit,
        status, score, training and GPU seconds, description).

        Args:
            last: how many of the most recent ended experiments to list.
        """
        exps = self.experiments()[-max(1, int(last)):]
        running = self.running()
        if not exps and not running:
            return "no experiments yet: run_experiment trains and scores the current repository"
        rows = ["step  candidate     commit      status       score        train_s  gpu_s   description"]
        for e in exps:
            commit = (e.get("commit") or "-")[:10] + ("+" if e.get("dirty") else "")
            rows.append(f"{e['step']:>4}  {(e.get('candidate') or '-')[:12]}  {commit:<11} {e.get('status', '?'):<12} "
                        f"{fmt_score(e.get('score')):<12} {_num(e.get('train_s')):<8} {_num(e.get('gpu_s')):<7} "
                        f"{e.get('description', '')[:80]}")
        for r in running:
            rows.append(f"{r['step']:>4}  RUNNING: {r['state']}{' on ' + str(r['slot']) if r.get('slot') else ''}, "
                        f"{r['elapsed_s']:g} s elapsed (budget {r['time_budget_s']:g} s)  {r['description'][:80]}")
        return "\n".join(rows)

    @tool
    def read_log(self, step: int | None = None, tail_lines: int = 100, grep: str | None = None,
                 offset: int | None = None) -> str:
        """Reads the training log (stdout and stderr) of an experiment, also while it runs.

        Args:
            step: the experiment's id (default: the most recent experiment).
            tail_lines: how many lines from the end to show.
            grep: show only lines containing this text (e.g. 'loss' or 'Error').
            offset: read from this byte offset instead of the tail (up to 64 KB; the reply gives the next
                offset, to follow a running experiment).
        """
        step = self._pick(step)
        r = self.runner.get(step)
        exp = next((e for e in self.experiments() if e["step"] == step), None)
        state = "running" if r is not None and not r.done.is_set() else (exp or {}).get("status", "?")
        try:
            data, size = read_experiment_file(self.folder, f"step-{step:05d}/train.log", offset)
        except FileNotFoundError:
            return f"[log of experiment {step} ({state}): nothing written yet]"
        except (OSError, UnsafePathError) as exc:
            raise ToolError(f"the log of experiment {step} cannot be read: {exc}") from None
        text = data.decode("utf-8", errors="replace")
        if offset is not None:
            start = min(max(0, int(offset)), size)
            return "\n".join([f"[log of experiment {step} ({state}): bytes {start}-{start + len(data)} of {size}; "
                              f"next offset {start + len(data)}]", text])
        lines = text.splitlines()
        if grep:
            lines = [ln for ln in lines if grep in ln]
        n = max(1, min(int(tail_lines), 2000))
        shown = lines[-n:]
        head = (
            f"[log of experiment {step} ({state}): {len(lines)} line(s){' matching ' + repr(grep) if grep else ''}, "
            f"last {len(shown)}; {size} bytes]"
        )
        return "\n".join([head, *shown])

