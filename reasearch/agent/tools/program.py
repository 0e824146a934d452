"""Tools of program evolution (``get_current_code``, ``edit_code``, ``evaluate``) and of control
(``get_status``, ``compact``, ``finish``), bound to a :class:`ToolContext` (never to the agent loop)."""

from __future__ import annotations

import difflib
import re
from collections import Counter
from typing import Any

from reasearch.agent.prompts import EDITOR_SYSTEM, editor_request
from reasearch.agent.snapshot import EvalRecord, best_of, fmt_score, score_spreads
from reasearch.agent.tools.context import ToolContext
from reasearch.agent.tools.domain import AgentDomain
from reasearch.agent.tools.schema import ToolError, ToolOutput, tool
from reasearch.models.messages import ModelRequest
from reasearch.models.reply_text import MAX_REPLY_CHARS

__all__ = ["CANDIDATE_FILE", "ControlTools", "ProgramTools", "extract_code"]

CANDIDATE_FILE = "candidate.py"
_MAX_SOURCE = 2 * 1024 * 1024  # a larger candidate.py is refused, never evaluated cut
_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)(?:\n```|\Z)", re.DOTALL)


def extract_code(text: str) -> str | None:
    """The longest fenced code block of a reply (None when there is none, or the reply passes
    :data:`~reasearch.models.reply_text.MAX_REPLY_CHARS`). The pattern is linear: every match that opens
    one runs to the next closer or the end, so no opener is scanned twice."""
    if len(text) > MAX_REPLY_CHARS:
        return None
    blocks = _FENCE.findall(text)
    return max(blocks, key=len).rstrip() + "\n" if blocks else None


def _diff(old: str, new: str, limit: int = 4000) -> tuple[str, int]:
    lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), "before", "after", lineterm="", n=1))
    changed = sum(1 for ln in lines if ln[:1] in "+-" and not ln.startswith(("+++", "---")))
    text = "\n".join(lines)
    return (text if len(text) <= limit else text[:limit] + "\n[diff cut]"), changed


def _source(ctx: ToolContext) -> str:
    """The whole of candidate.py through the guarded reader (refused, never cut, when oversized)."""
    return ctx.workspace.read_bytes(CANDIDATE_FILE, cap=_MAX_SOURCE).decode("utf-8", errors="replace")


class ProgramTools(AgentDomain):
    """Read, rewrite and evaluate the candidate program (``candidate.py`` in the workspace); the loop's hooks
    are :class:`AgentDomain`'s defaults."""

    @tool
    def get_current_code(self) -> str:
        """Returns the current candidate program (the content of candidate.py)."""
        return self.ctx.workspace.read_text(CANDIDATE_FILE)

    @tool
    def edit_code(self, instruction: str) -> ToolOutput:
        """Has the editor model rewrite the whole of candidate.py following an instruction.

        Costs model tokens, never evaluation budget. Returns the diff; evaluate() to score the result.

        Args:
            instruction: what to change and how, precisely (the editor sees the task and the current code).
        """
        if not instruction.strip():
            raise ToolError("give an instruction: what to change and how")
        ctx = self.ctx
        old = _source(ctx)
        request = ModelRequest(EDITOR_SYSTEM, [{"role": "user", "content": [
            {"type": "text", "text": editor_request(ctx.task.describe(), old, instruction)}]}])
        reply = ctx.complete("editor", request, "edit_reply")
        code = extract_code(reply.text)
        if code is None:
            raise ToolError("the editor answered without a ```python block; candidate.py is unchanged. "
                            "Rephrase the instruction, or write the file yourself with write_file")
        ctx.workspace.write_text(CANDIDATE_FILE, code)
        diff, changed = _diff(old, code)
        try:
            compile(code, CANDIDATE_FILE, "exec")
            syntax = ""
        except SyntaxError as exc:
            syntax = f"\nWARNING: the new code has a syntax error (line {exc.lineno}: {exc.msg})."
        text = f"candidate.py rewritten: {changed} lines changed.{syntax}\n{diff or '(no change)'}"
        return ToolOutput(text, {"edit": {"lines_changed": changed, "tokens": reply.usage.total}})

    @tool
    def evaluate(self, code: str | None = None, repeat: bool = False) -> ToolOutput:
        """Scores a program on the trusted evaluator (one unit of evaluation budget; repeats are free).

        Args:
            code: the program to evaluate; it also becomes candidate.py. Default: the current candidate.py.
            repeat: evaluate afresh even if this exact program was scored before (charged like any
                evaluation): measures how much the score varies (timed or clock-dependent programs).
        """
        ctx = self.ctx
        if code is not None:
            ctx.workspace.write_text(CANDIDATE_FILE, code)
        source = code if code is not None else _source(ctx)
        spec = ctx.task.spec
        state = ctx.state()
        before = best_of(state.history, spec)
        parent = ctx.run.lineage_parent(source)  # what it came from, not the last evaluated (a written file)
        cid = ctx.run.add_candidate(source, parent=parent, note=f"step {state.step}")
        result = ctx.run.evaluate(source, step=state.step, parent=parent, note=f"step {state.step}", repeat=repeat)
        rec = EvalRecord(state.step, cid, result.status.value, result.score, result.normalized_score, result.cached)
        lines = [f"evaluation at step {rec.step}: candidate {cid[:12]}", f"status: {rec.status}"]
        if rec.score is not None:
            norm = f" (normalized {rec.normalized_score:.6f})" if rec.normalized_score is not None else ""
            lines.append(f"score: {fmt_score(rec.score)}{norm}" + (" [cached: cost nothing]" if rec.cached else ""))
            if before is None or spec.is_better(rec.score, before.score):
                lines.append("NEW BEST" + (f" (previous {fmt_score(before.score)})" if before else ""))
            else:
                lines.append(f"not better than the best {fmt_score(before.score)} (candidate {before.candidate[:12]})")
        metrics = {k: v for k, v in dict(result.metrics).items() if isinstance(v, (int, float, str, bool)) or v is None}
        if metrics:
            lines.append("metrics: " + ", ".join(f"{k}={v}" for k, v in list(metrics.items())[:20]))
        spread = score_spreads([*state.history, rec]).get(cid)
        if spread is not None:
            n, lo, hi, std = spread
            lines.append(f"spread over {n} fresh scores of this candidate: min {fmt_score(lo)}, max {fmt_score(hi)}, "
                         f"std {std:.3g}")
        if result.feedback:
            lines.append("feedback:\n" + result.feedback[-6000:])
        return ToolOutput("\n".join(lines), {"evaluation": rec.to_dict()})


class ControlTools:
    """Status, compaction and the final choice."""

    def __init__(self, ctx: ToolContext) -> None:
        self.ctx = ctx

    @tool
    def get_status(self) -> str:
        """Returns the run's status: budget left, best candidates, evaluations by status."""
        ctx = self.ctx
        history = ctx.state().history
        counts = Counter(r.status for r in history)
        ok = sorted((r for r in history if r.score is not None), key=lambda r: float(r.score or 0.0),
                    reverse=ctx.task.spec.direction == "maximize")
        seen: set[str] = set()
        top = []
        for r in ok:
            if r.candidate not in seen:
                seen.add(r.candidate)
                top.append(f"  {r.candidate[:12]}  {fmt_score(r.score)}  (step {r.step})")
        lines = [ctx.status(),
                 "Evaluations by status: " + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"),
                 "Best distinct candidates:", *(top[:10] or ["  none yet"])]
        return "\n".join(lines)

    @tool
    def compact(self) -> ToolOutput:
        """Saves the transcript and restarts the context from a summary, the state snapshot and lessons.md.

        Update lessons.md first: it is what survives.
        """
        return ToolOutput("the context will be compacted before your next turn", {"compact": True})

    @tool
    def finish(self, reason: str, candidate_id: str | None = None) -> ToolOutput:
        """Ends the run with the candidate you choose as the final answer.

        Args:
            reason: why this candidate, with the whole history in view (recorded in the run).
            candidate_id: id (or a unique prefix of 6+ characters) of an evaluated candidate that scored OK.
                Default: the best-scoring one.
        """
        history = self.ctx.state().history
        ok = [r for r in history if r.status == "OK" and r.score is not None]
        if not ok:
            raise ToolError("no candidate has scored OK yet: evaluate one before finishing")
        if candidate_id is None:
            rec = best_of(history, self.ctx.task.spec)
        else:
            if len(candidate_id) < 6:
                raise ToolError("give at least 6 characters of the candidate id")
            matches = {r.candidate for r in ok if r.candidate.startswith(candidate_id)}
            if len(matches) != 1:
                known = ", ".join(sorted({r.candidate[:12] for r in ok}))
                raise ToolError(f"{candidate_id!r} matches {len(matches)} OK candidates; OK candidates: {known}")
            cid = matches.pop()
            rec = next(r for r in reversed(ok) if r.candidate == cid)
        assert rec is not None
        final: dict[str, Any] = {"candidate": rec.candidate, "reason": reason, "score": rec.score, "step": rec.step}
        return ToolOutput(
            f"final candidate {rec.candidate[:12]} (score {fmt_score(rec.score)}); the run ends", {"final": final}
        )
