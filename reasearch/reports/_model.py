"""What a report shows, read from the run store: one frozen view of a run at one moment.

The store's content is hostile in places (candidate sources, feedback quoting candidate output, model
replies and tool results): this module only reads and caps it; escaping is the page's job.
"""

from __future__ import annotations

import difflib
import json
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reasearch.errors import ReasearchError
from reasearch.evaluators.result import EvalResult, Status
from reasearch.evaluators.scores import is_better
from reasearch.runs.events import EventKind
from reasearch.runs.ledger import Budget, LedgerEntry, Unit
from reasearch.runs.run import active_seconds_of
from reasearch.runs.steering import Effect, effects
from reasearch.runs.store import CandidateRecord, DriverRecord, EvaluationRecord, Event, RunRecord, Store

__all__ = ["RunView", "EvalPoint", "LessonsVersion", "load_run", "cap_text", "MAX_TEXT", "STEER_WINDOW"]

MAX_TEXT = 100_000  # characters of one source, feedback or tool result shown (the rest is cut, and says so)
LESSONS_FILE = "lessons.md"
STEER_WINDOW = 5  # evaluations after an intervention whose best the report states


def cap_text(text: Any, limit: int = MAX_TEXT) -> str:
    """``text`` as a string of at most ``limit`` characters, saying how much was cut."""
    s = text if isinstance(text, str) else json.dumps(text, indent=1, default=str)
    if len(s) <= limit:
        return s
    return s[:limit] + f"\n[... {len(s) - limit} more characters not shown]"


@dataclass(frozen=True, slots=True)
class EvalPoint:
    """One evaluation as the curves draw it."""

    index: int  # 1-based order of the evaluation in the run
    step: int
    candidate_id: str
    status: str
    score: float | None
    normalized: float | None
    cached: bool
    wall_since_start_s: float  # when it was stored, seconds after the run was created
    dollars: float  # dollars debited up to and including its step
    tokens: float  # tokens debited up to and including its step
    eval_wall_s: float  # the candidate's own wall time
    note: str


@dataclass(frozen=True, slots=True)
class LessonsVersion:
    """One state of ``lessons.md``: where it came from and its diff against the previous one."""

    step: int
    origin: str
    text: str
    diff: str


@dataclass(frozen=True, slots=True)
class RunView:
    """Everything a report draws about one run, read in one pass over the store."""

    record: RunRecord
    direction: str  # "maximize" | "minimize"
    best_known: float | None
    task_error: str  # why the task could not be built here ("" when it could)
    evaluations: tuple[EvaluationRecord, ...]
    candidates: tuple[CandidateRecord, ...]
    ledger: tuple[LedgerEntry, ...]
    events: tuple[Event, ...]
    usage: Mapping[str, float]
    caps: Mapping[str, float]
    points: tuple[EvalPoint, ...]
    best: EvaluationRecord | None
    read_at: float
    last_step: int
    lessons: tuple[LessonsVersion, ...] = field(default=())
    drivers: tuple[DriverRecord, ...] = field(default=())
    interventions: tuple[Effect, ...] = field(default=())  # a person's, applied, each with what followed it

    @property
    def family(self) -> str:
        """The task family: ``circle_packing`` for ``circle_packing/n26-v1``."""
        return self.record.task_id.split("/", 1)[0]

    @property
    def by_status(self) -> dict[str, int]:
        return dict(Counter(e.result.status.value for e in self.evaluations))

    @property
    def wall_s(self) -> float:
        """Active wall seconds: the run's drivers' lifetimes, gaps while it sat interrupted left out."""
        return active_seconds_of(self.record, self.drivers, now=self.read_at)

    @property
    def models(self) -> dict[str, str]:
        """Model name per role, from the agent's start event (else the run's config)."""
        for e in self.events:
            if e.kind == EventKind.START and isinstance(e.payload.get("models"), Mapping):
                return {str(k): str(v) for k, v in e.payload["models"].items()}
        models = self.record.config.get("models") if isinstance(self.record.config, Mapping) else None
        if isinstance(models, Mapping):
            out = {}
            for role, spec in models.items():
                out[str(role)] = str(spec.get("name", spec)) if isinstance(spec, Mapping) else str(spec)
            return out
        return {}

    def is_better(self, a: float, b: float | None) -> bool:
        return is_better(self.direction, a, b)


def _task_facts(record: RunRecord) -> tuple[str, float | None, str]:
    """Direction and best known value of the run's task (its stored spec; a run stored without one:
    the registry), without running anything."""
    if record.task_spec is not None:
        return record.task_spec.direction, record.task_spec.best_known, ""
    try:
        from reasearch.runs.executor import resolve_task

        spec = resolve_task(record.task_id, dict(record.task_params), record.task_entry or "").spec
        return spec.direction, spec.best_known, ""
    except (ReasearchError, ImportError, TypeError, ValueError) as exc:
        return "maximize", None, f"{type(exc).__name__}: {exc}"


def _lessons(events: list[Event]) -> list[LessonsVersion]:
    """The versions of ``lessons.md`` the event log records (preload, write_file calls, compactions)."""
    found: list[tuple[int, str, str]] = []
    for e in events:
        p = e.payload
        if e.kind == EventKind.START:
            text = p.get("lessons_text")
            found.append((e.step, "start (preloaded)" if text else "start (template)", text or ""))
        elif e.kind == EventKind.TOOL_CALL and p.get("name") == "write_file":
            inp = p.get("input") or {}
            if isinstance(inp, Mapping) and str(inp.get("path", "")).lstrip("./") == LESSONS_FILE:
                found.append((e.step, "write_file by the agent", str(inp.get("content", ""))))
        elif e.kind == EventKind.COMPACTION and isinstance(p.get("lessons"), str):
            found.append((e.step, "as read at a compaction", p["lessons"]))
    out: list[LessonsVersion] = []
    prev = ""
    for step, origin, text in found:
        if out and text == prev:
            continue
        diff = "\n".join(
            difflib.unified_diff(prev.splitlines(), text.splitlines(), "before", "after", lineterm="", n=1)
        )
        out.append(LessonsVersion(step, origin, cap_text(text), cap_text(diff)))
        prev = text
    return out


def load_run(store: Store, run_id: str) -> RunView:
    """Reads one run (its id or a unique prefix) into a :class:`RunView`.

    Raises:
        StoreError: no such run, or an ambiguous prefix.
    """
    record = store.get_run(run_id)
    direction, best_known, task_error = _task_facts(record)
    evaluations = store.evaluations(record.id)
    candidates = store.candidates(record.id)
    ledger = store.ledger(record.id)
    events = store.events(record.id)
    usage: dict[str, float] = {}
    for entry in ledger:
        usage[entry.unit.value] = usage.get(entry.unit.value, 0.0) + entry.amount
    caps = {u.value: c for u, c in Budget.from_dict(record.budget).units().items()}

    # Cumulative dollars and tokens by step (the ledger is keyed by step; an evaluation's x is what was
    # spent up to and including its step).
    spend = sorted((e.step, e.unit, e.amount) for e in ledger if e.unit in (Unit.DOLLARS, Unit.TOKENS))
    notes = {c.id: c.note for c in candidates}
    points: list[EvalPoint] = []
    best: EvaluationRecord | None = None
    k, dollars, tokens = 0, 0.0, 0.0
    for i, ev in enumerate(evaluations):
        while k < len(spend) and spend[k][0] <= ev.step:
            if spend[k][1] is Unit.DOLLARS:
                dollars += spend[k][2]
            else:
                tokens += spend[k][2]
            k += 1
        res: EvalResult = ev.result
        ok = res.status is Status.OK and res.score is not None
        if ok and (best is None or (res.score is not None and is_better(direction, res.score, best.result.score))):
            best = ev
        points.append(EvalPoint(
            index=i + 1, step=ev.step, candidate_id=ev.candidate_id, status=res.status.value,
            score=res.score if ok else None, normalized=res.normalized_score if ok else None, cached=res.cached,
            wall_since_start_s=max(0.0, ev.created_at - record.created_at), dollars=dollars, tokens=tokens,
            eval_wall_s=res.wall_s, note=notes.get(ev.candidate_id, "")))
    return RunView(
        record=record, direction=direction, best_known=best_known, task_error=task_error,
        evaluations=tuple(evaluations), candidates=tuple(candidates), ledger=tuple(ledger), events=tuple(events),
        usage=usage, caps=caps, points=tuple(points), best=best, read_at=time.time(),
        last_step=max([ev.step for ev in evaluations] + [e.step for e in events] + [e.step for e in ledger] + [-1]),
        lessons=tuple(_lessons(events)), drivers=tuple(store.drivers(record.id)),
        interventions=tuple(effects(store, record.id, window=STEER_WINDOW)))
