"""The toolset of training tasks: ``run_experiment``, ``get_experiments``, ``read_log`` (and ``git``).

The candidate is the workspace repository (git directory outside the workspace: see
:mod:`reasearch.agent.tools.git`). ``run_experiment`` snapshots the files git would see (tracked and
untracked-but-not-ignored) into the canonical repository text (:mod:`reasearch.evaluators.repo`), so
the store records exactly what ran, content-addressed, with the commit it sat on; the run's
``evaluate`` then trains and scores it on a leased slot and debits one experiment and its GPU-seconds
with the result.

Before an experiment starts, an ``experiment_start`` event is written at its step. If the driver dies
during the experiment (``kill -9``), the training process dies with it (the engine's launcher) and no
result or debit is recorded; when the resumed agent reaches that step again, the experiment is
recorded as ``experiment_interrupted`` -- not run again and not charged -- and the agent is told so.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reasearch.agent.snapshot import EvalRecord, best_of, fmt_score
from reasearch.agent.tools.git import GitRepo, GitTools
from reasearch.agent.tools.schema import ToolError, ToolOutput, tool
from reasearch.errors import ConfigError
from reasearch.evaluators.repo import encode_repo, read_repo_dir

if TYPE_CHECKING:
    from reasearch.agent.tools.context import ToolContext

__all__ = ["GITIGNORE", "ExperimentTools", "experiment_toolset", "setup_repository"]

GITIGNORE = "# kept out of experiments (the harness's files, data and checkpoints)\nTASK.md\nlessons.md\n" \
            "__pycache__/\n*.pyc\nout/\ndata/\n*.pt\n*.bin\n*.safetensors\n"


def setup_repository(workspace_root: Path, repo: GitRepo, files: dict[str, str]) -> str:
    """Writes the seed repository into the workspace and commits it; returns the commit."""
    repo.init()
    if repo.head() is None:
        for path, text in {**files, ".gitignore": GITIGNORE}.items():
            target = workspace_root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        repo.run(["add", "-A"])
        repo.run(["commit", "-q", "-m", "seed"])
    head = repo.head()
    assert head is not None
    return head


def experiment_toolset(ctx: ToolContext) -> list[Any]:
    """The domain tools of a repository task: experiments (first) and git. The git directory is
    ``<run>/git``, beside the workspace (never inside it)."""
    repo = GitRepo(ctx.workspace.root, ctx.workspace.root.parent / "git")
    return [ExperimentTools(ctx, repo), GitTools(repo)]


def _num(x: Any, digits: int = 4) -> str:
    return "-" if not isinstance(x, (int, float)) or isinstance(x, bool) else f"{x:.{digits}g}"


class ExperimentTools:
    """Run experiments on the workspace repository and read their history and logs.

    Args:
        ctx: the tool context (run, task, workspace, the loop's step/parent/history).
        repo: the workspace's git repository.
    """

    current_label = "Current repository"

    def __init__(self, ctx: ToolContext, repo: GitRepo) -> None:
        self.ctx = ctx
        self.repo = repo

    # ------------------------------------------------------------ setup and snapshot
    def setup_workspace(self) -> None:
        """Step 0: the seed repository, committed."""
        setup_repository(self.ctx.workspace.root, self.repo, self.ctx.task.seed_files())  # type: ignore[attr-defined]

    def experiments(self) -> list[dict[str, Any]]:
        """Finished and interrupted experiments of the run, by step."""
        run = self.ctx.run
        out = [dict(e.payload, step=e.step) for e in run.events(kind="experiment")]
        out += [dict(e.payload, step=e.step, status="INTERRUPTED") for e in run.events(kind="experiment_interrupted")]
        return sorted(out, key=lambda d: d["step"])

    def current_text(self) -> str:
        """The snapshot's "current code" line: the repository's HEAD and whether it has uncommitted changes."""
        try:
            head, dirty = self.repo.head(), self.repo.dirty()
        except ConfigError as exc:
            return f"(unused: the candidate is the workspace repository; git failed: {exc})"
        return (f"(unused: the candidate is the workspace repository) HEAD {head[:10] if head else 'none'}"
                + (", uncommitted changes" if dirty else ", clean"))

    def snapshot_lines(self, recent: int = 5) -> list[str]:
        """Best experiment and commit, the recent ones, and the slots (added to the state snapshot)."""
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
        lines.append(f"{len(exps)} experiment(s) so far" + (":" if exps else "."))
        for e in exps[-recent:]:
            lines.append(f"  step {e['step']:>4}  {e.get('status', '?'):<11} score {fmt_score(e.get('score'))}  "
                         f"train {_num(e.get('train_s'))} s  gpu {_num(e.get('gpu_s'))} s  "
                         f"{(e.get('commit') or '-')[:8]}  {e.get('description', '')[:60]}")
        try:
            from reasearch.engine.gpu import slot_status

            slots = slot_status(getattr(self.ctx.task, "slot", "auto"))
            lines.append("Slots: " + "; ".join(f"{s['slot']} {'free' if s['free'] else 'busy'}" for s in slots))
        except Exception as exc:  # the snapshot never fails over a status line
            lines.append(f"Slots: unknown ({exc})")
        lines.append("Running: none (run_experiment returns when its experiment has finished)")
        return lines

    # ------------------------------------------------------------ tools
    @tool
    def run_experiment(self, description: str, time_budget_s: float | None = None) -> ToolOutput:
        """Trains and scores the workspace repository as it is now (uncommitted changes included): one experiment.

        train.py runs in a fresh sandbox on a leased GPU (or CPU) slot within the time budget; the trusted
        evaluator then scores the saved checkpoint. Costs one experiment (and its GPU-seconds). Commit the
        state you want to keep; the result names the commit it ran on.

        Args:
            description: what this experiment tests (e.g. 'lr 6e-4 -> 3e-3').
            time_budget_s: training seconds (default: the task's budget; capped at its maximum).
        """
        ctx, run = self.ctx, self.ctx.run
        state = ctx.state()
        step = state.step
        if any(e.step == step for e in run.events(kind="experiment_start")):
            return self._interrupted(step)
        if not description.strip():
            raise ToolError("describe the experiment (what it changes and why)")
        task = ctx.task
        budget = float(time_budget_s) if time_budget_s is not None else float(task.time_budget_s)  # type: ignore[attr-defined]
        cap = float(task.max_time_budget_s)  # type: ignore[attr-defined]
        if not (math.isfinite(budget) and 0 < budget <= cap):
            raise ToolError(f"time_budget_s must be > 0 and at most {cap:g} s, not {time_budget_s}")
        try:
            files = read_repo_dir(ctx.workspace.root, listed=self.repo.listed_files())
            source = encode_repo(files, time_budget_s=budget)
        except ConfigError as exc:
            raise ToolError(f"the repository cannot be run: {exc}") from None
        head, dirty = self.repo.head(), self.repo.dirty()
        where = f"{head[:10] if head else 'no commit'}{' +uncommitted changes' if dirty else ''}"
        from reasearch.evaluators.base import candidate_sha256

        cid = candidate_sha256(source)
        run.log_event(step, "experiment_start", {"description": description, "commit": head, "dirty": dirty,
                                                  "candidate": cid, "time_budget_s": budget, "ts": time.time()})
        before = best_of(state.history, task.spec)
        result = run.evaluate(source, step=step, parent=state.parent, note=f"step {step}: {description[:300]} @ {where}")
        m = dict(result.metrics)
        exp = {"candidate": cid, "commit": head, "dirty": dirty, "description": description[:500],
               "status": result.status.value, "score": result.score, "time_budget_s": budget,
               **{k: m.get(k) for k in ("train_s", "eval_s", "gpu_s", "slot", "log_path", "last_step",
                                         "last_train_loss", "median_step_ms", "first_metric_s")}}
        run.log_event(step, "experiment", exp)
        rec = EvalRecord(step, cid, result.status.value, result.score, result.normalized_score, result.cached)
        lines = [f"experiment at step {step} ({where}): {result.status.value}"]
        if result.score is not None:
            lines.append(f"score: {fmt_score(result.score)}")
            if before is None or task.spec.is_better(result.score, before.score):
                lines.append("NEW BEST" + (f" (previous {fmt_score(before.score)})" if before else ""))
            else:
                lines.append(f"not better than the best {fmt_score(before.score)} (step {before.step})")
        lines.append(f"training {_num(m.get('train_s'))} s of budget {budget:g} s on {m.get('slot', '?')}, "
                     f"GPU-seconds {_num(m.get('gpu_s'))}, last step {m.get('last_step')}, "
                     f"last train loss {m.get('last_train_loss')}")
        if m.get("loss_curve"):
            lines.append("loss curve (step, loss): " + ", ".join(f"({s}, {v})" for s, v in m["loss_curve"][:12]))
        if result.feedback:
            lines.append(result.feedback[-3000:])
        lines.append(f"read_log(step={step}) shows the whole training log")
        return ToolOutput("\n".join(lines), {"evaluation": rec.to_dict(), "experiment": {**exp, "step": step}})

    def _interrupted(self, step: int) -> ToolOutput:
        run = self.ctx.run
        start = next(e for e in run.events(kind="experiment_start") if e.step == step)
        payload = {k: start.payload.get(k) for k in ("description", "commit", "dirty", "candidate", "time_budget_s")}
        run.log_event(step, "experiment_interrupted", {**payload, "reason": "the driver stopped during the experiment"})
        text = (f"the experiment of step {step} ({payload.get('description')}) was interrupted: the driver stopped "
                "while it ran. Its training process was killed with the driver, nothing was recorded or charged. "
                "Call run_experiment again to run it.")
        return ToolOutput(text, {"experiment": {**payload, "step": step, "status": "INTERRUPTED"}})

    @tool
    def get_experiments(self, last: int = 20) -> str:
        """Lists the experiments so far: step, candidate, commit, status, score, training and GPU seconds, description.

        Args:
            last: how many of the most recent experiments to list.
        """
        exps = self.experiments()[-max(1, int(last)):]
        if not exps:
            return "no experiments yet: run_experiment trains and scores the current repository"
        rows = ["step  candidate     commit      status       score        train_s  gpu_s   description"]
        for e in exps:
            commit = (e.get("commit") or "-")[:10] + ("+" if e.get("dirty") else "")
            rows.append(f"{e['step']:>4}  {(e.get('candidate') or '-')[:12]}  {commit:<11} {e.get('status', '?'):<12} "
                        f"{fmt_score(e.get('score')):<12} {_num(e.get('train_s')):<8} {_num(e.get('gpu_s')):<7} "
                        f"{e.get('description', '')[:80]}")
        return "\n".join(rows)

    @tool
    def read_log(self, step: int | None = None, tail_lines: int = 100, grep: str | None = None) -> str:
        """Reads the training log (stdout and stderr) of an experiment.

        Args:
            step: the experiment's step (default: the latest experiment).
            tail_lines: how many lines from the end to show.
            grep: show only lines containing this text (e.g. 'loss' or 'Error').
        """
        exps = [e for e in self.experiments() if e.get("log_path")]
        if not exps:
            raise ToolError("no experiment has a log yet")
        if step is None:
            exp = exps[-1]
        else:
            found = [e for e in exps if e["step"] == int(step)]
            if not found:
                raise ToolError(f"no experiment at step {step}; steps with logs: {[e['step'] for e in exps]}")
            exp = found[0]
        path = Path(exp["log_path"])
        try:
            with open(path, "rb") as fh:
                fh.seek(0, 2)
                size = fh.tell()
                fh.seek(max(0, size - (2 << 20)))
                text = fh.read().decode("utf-8", errors="replace")
        except OSError as exc:
            raise ToolError(f"the log of step {exp['step']} cannot be read: {exc}") from None
        lines = text.splitlines()
        if grep:
            lines = [ln for ln in lines if grep in ln]
        n = max(1, min(int(tail_lines), 2000))
        shown = lines[-n:]
        head = f"[log of step {exp['step']}: {len(lines)} line(s){' matching ' + repr(grep) if grep else ''}, last {len(shown)}]"
        return "\n".join([head, *shown])
