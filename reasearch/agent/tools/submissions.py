"""``submit``: the one way a private-split score of a competition-style task reaches the agent.

A task that declares ``score_submission(bytes)`` (``tabular/csv-v2``) scores each experiment on a
validation period and keeps the experiment's validated ``submission.csv`` in the experiment's folder of
the run (``<run>/experiments/step-NNNNN/``, outside the workspace). ``submit(step)`` scores that file on
the private test period: it costs one ``submissions`` unit, capped by the smaller of the run's
``submissions`` cap and the task's ``max_submissions`` (a small default, as a competition limits
submissions a day). Each submission is journaled as a ``submission`` event before it is debited, so
a resumed run replays it instead of scoring (and charging) it twice.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from reasearch.agent.snapshot import fmt_score
from reasearch.agent.tools.schema import ToolError, ToolOutput, tool
from reasearch.evaluators.outputs import OutputError, read_output
from reasearch.runs.events import EventKind
from reasearch.runs.ledger import Unit

if TYPE_CHECKING:
    from reasearch.agent.tools.context import ToolContext

__all__ = ["SubmissionTools"]

_MAX_BYTES = 256 << 20


class SubmissionTools:
    """``submit`` for tasks with a private split (the task has ``score_submission``)."""

    def __init__(self, ctx: ToolContext) -> None:
        self.ctx = ctx
        self.folder = ctx.workspace.root.parent / "experiments"

    def submissions(self) -> list[dict[str, Any]]:
        """The submissions of the run so far, in order."""
        return [dict(e.payload, step=e.step) for e in self.ctx.run.events(kind=EventKind.SUBMISSION)]

    def cap(self) -> int:
        task_cap = int(getattr(self.ctx.task, "max_submissions", 0))
        run_left = self.ctx.run.remaining().get(Unit.SUBMISSIONS)
        used = len(self.submissions())
        return task_cap if run_left is None else min(task_cap, used + int(run_left))

    def snapshot_lines(self) -> list[str]:
        subs = self.submissions()
        lines = [(f"Submissions: {len(subs)}/{self.cap()} used (submit(step) scores an experiment's submission.csv "
                 "on the private test period)")]
        lines += [f"  experiment {s['experiment']}: {s['status']} {fmt_score(s.get('score'))}" for s in subs[-5:]]
        return lines

    @tool
    def submit(self, step: int) -> ToolOutput:
        """Scores the submission.csv that experiment `step` wrote on the private test period (the data no
        experiment is scored on). Costs one submission; the run allows only a few (see the snapshot), so submit
        an experiment whose validation score you trust, not every one.

        Args:
            step: the id of an experiment that ended OK (its submission.csv was validated then).
        """
        ctx, run = self.ctx, self.ctx.run
        now = ctx.state().step
        for s in self.submissions():
            if s["step"] == now:  # replayed on resume: scored and journaled before the driver stopped
                return self._text(s)
        score_submission = getattr(ctx.task, "score_submission", None)
        if not callable(score_submission):
            raise ToolError(f"{ctx.task.spec.id} has no private split to submit to")
        ended = {e.step: e.payload for e in run.events(kind=EventKind.EXPERIMENT)}
        exp = ended.get(int(step))
        if exp is None:
            raise ToolError(f"no ended experiment has id {step}; get_experiments() lists them")
        if exp.get("status") != "OK":
            raise ToolError(f"experiment {step} ended {exp.get('status')}: only an experiment that ended OK has a "
                            "validated submission.csv")
        used, cap = len(self.submissions()), self.cap()
        if used >= cap:
            raise ToolError(f"submission budget spent: {used}/{cap} used; nothing was scored")
        try:
            data = read_output(self.folder / f"step-{int(step):05d}" / "submission.csv", _MAX_BYTES)
        except OutputError as exc:
            raise ToolError(f"experiment {step} kept no submission ({exc})") from None
        result = score_submission(data)
        payload = {"experiment": int(step), "status": result.status.value, "score": result.score,
                   "feedback": result.feedback[-500:], "submission_sha256": result.metrics.get("submission_sha256"),
                   "candidate": exp.get("candidate"), "ts": time.time()}
        run.log_event(now, EventKind.SUBMISSION, payload)
        if result.ok:
            run.debit(Unit.SUBMISSIONS, 1.0, step=now, note=f"submit experiment {int(step)}")
        return self._text(dict(payload, step=now))

    def _text(self, s: dict[str, Any]) -> ToolOutput:
        used, cap = len(self.submissions()), self.cap()
        text = (f"submission of experiment {s['experiment']}: {s['status']}, private test score "
                f"{fmt_score(s.get('score'))} ({s.get('feedback', '')}); {used}/{cap} submissions used")
        return ToolOutput(text, {"submission": {k: s.get(k) for k in ("experiment", "status", "score")}})


def submission_toolset(ctx: ToolContext) -> list[Any]:
    """``[SubmissionTools]`` when the task has a private split, else nothing."""
    return [SubmissionTools(ctx)] if callable(getattr(ctx.task, "score_submission", None)) else []

