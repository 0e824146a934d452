"""The state snapshot the harness re-emits into the prompt every turn."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reasearch.evaluators.scores import best_index, fmt_score, ok_score, since_best
from reasearch.evaluators.spec import TaskSpec

__all__ = ["EvalRecord", "best_of", "fmt_score", "render_snapshot", "score_spreads", "since_improvement"]


@dataclass(frozen=True, slots=True)
class EvalRecord:
    """One evaluation the agent asked for, as the snapshot lists it."""

    step: int
    candidate: str
    status: str
    score: float | None
    normalized_score: float | None
    cached: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "candidate": self.candidate, "status": self.status, "score": self.score,
                "normalized_score": self.normalized_score, "cached": self.cached}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EvalRecord:
        return cls(int(d["step"]), str(d["candidate"]), str(d["status"]), d.get("score"),
                   d.get("normalized_score"), bool(d.get("cached", False)))


def best_of(history: Sequence[EvalRecord], spec: TaskSpec) -> EvalRecord | None:
    """The first evaluation with the best OK score of ``history`` (None when none scored)."""
    i = best_index([ok_score(r.status, r.score) for r in history], spec.direction)
    return None if i is None else history[i]


def since_improvement(history: Sequence[EvalRecord], spec: TaskSpec) -> int:
    """Evaluations after the one that last improved the best score (all of them when none is OK)."""
    return since_best([ok_score(r.status, r.score) for r in history], spec.direction)


def score_spreads(history: Sequence[EvalRecord]) -> dict[str, tuple[int, float, float, float]]:
    """``candidate -> (n, min, max, std)`` over the fresh (not cached) OK scores of candidates scored twice or more."""
    scores: dict[str, list[float]] = {}
    for rec in history:
        score = ok_score(rec.status, rec.score)
        if score is not None and not rec.cached:
            scores.setdefault(rec.candidate, []).append(float(score))
    return {cid: (len(v), min(v), max(v), statistics.stdev(v)) for cid, v in scores.items() if len(v) > 1}


def _budget_line(remaining: Mapping[Any, float | None]) -> str:
    parts = []
    for unit, left in remaining.items():
        if left is None:
            continue
        name = getattr(unit, "value", str(unit))
        parts.append(f"{name}: ${left:.2f} left" if name == "dollars" else f"{name}: {left:g} left")
    return "; ".join(parts) or "no caps"


def render_snapshot(*, turn: int, max_turns: int, spec: TaskSpec, remaining: Mapping[Any, float | None],
                    best: tuple[str, float | None, float | None] | None, history: Sequence[EvalRecord],
                    current: str, lessons: str | None, stagnation_after: int, recent: int, lessons_max_chars: int,
                    elapsed_s: float, max_wall_s: float | None, notice: str = "",
                    current_label: str = "Current code: candidate.py") -> str:
    """The snapshot text: budget, best, recent evaluations, stagnation warning, lessons.md."""
    wall = f"{elapsed_s:.0f} s" + (f" of {max_wall_s:.0f} s" if max_wall_s else "")
    lines = [
        f"## State snapshot (turn {turn} of {max_turns}; active time {wall})",
        f"Task: {spec.id} ({spec.direction}; best known {fmt_score(spec.best_known)})",
        f"Budget: {_budget_line(remaining)}",
    ]
    if best:
        cid, score, norm = best
        lines.append(f"Best so far: {fmt_score(score)}" + (f" (normalized {norm:.6f})" if norm is not None else "")
                     + f", candidate {cid[:12]}")
    else:
        lines.append("Best so far: none (no evaluation has scored yet)")
    lines.append(f"{current_label} = {current}")
    if history:
        lines.append(f"Last {min(recent, len(history))} of {len(history)} evaluations:")
        for rec in history[-recent:]:
            tag = " (cached)" if rec.cached else ""
            lines.append(f"  step {rec.step:>4}  {rec.candidate[:12]}  {rec.status:<8} {fmt_score(rec.score)}{tag}")
        spreads = score_spreads(history)
        if spreads:
            lines.append("Score spread of candidates evaluated afresh more than once (evaluate(repeat=True)):")
            for cid, (n, lo, hi, std) in list(spreads.items())[-5:]:
                lines.append(f"  {cid[:12]}  n={n}  min {fmt_score(lo)}  max {fmt_score(hi)}  std {std:.3g}")
        stale = since_improvement(history, spec)
        if stale >= stagnation_after:
            lines.append(f"WARNING: {stale} evaluations without improvement. Step back: re-read lessons.md, "
                         "question your assumptions, try a different approach rather than another small tweak.")
    else:
        lines.append("No evaluations yet.")
    if lessons is not None:
        text = lessons.strip()
        if len(text) > lessons_max_chars:
            text = text[:lessons_max_chars] + "\n[... lessons.md cut; read_file shows all of it]"
        lines += ["", "## lessons.md", text or "(empty: record what worked, what failed, what to try next)"]
    if notice:
        lines += ["", notice]
    return "\n".join(lines)
